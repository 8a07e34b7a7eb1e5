import { BULK_WINDOW } from "@denv/spec";
import { hostVersion, versionInfo } from "../runtime/host-reports.js";
import { receiveVersion } from "../transfer/receive.js";
import { sendVersion } from "../transfer/send.js";
import { RecordWriter } from "../transfer/wire.js";
import { type CommandContext, type HandlerResult, type Payload, throwIfAborted } from "./command-context.js";

/**
 * version.send / version.receive: a version streamed host to host through the control plane's
 * relay (docs/reference/protocol.md#version-transfer). Both stop when their stream dies; the
 * receiver's journal makes the next attempt resume.
 */

export async function versionSend(
  p: Payload<"version.send">,
  ctx: CommandContext,
): Promise<HandlerResult<"version.send">> {
  const { outbound } = ctx.streams.open(p.stream);
  outbound.bulk();
  const closed = () => new Error(`stream ${p.stream} is closed`);
  // Batches straight into the stream, reused once sent: no Writable in between.
  const writer = new RecordWriter({
    writeBatch: (bytes, release) => outbound.write("file", bytes, release),
    drained: () =>
      outbound.isClosed
        ? Promise.reject(closed())
        : new Promise((resolve, reject) =>
            outbound.once("drain", () => (outbound.isClosed ? reject(closed()) : resolve())),
          ),
  });
  try {
    const { parts } = await sendVersion(ctx.runtime.host, p.version, p.resume, writer, ctx.signal);
    await outbound.end();
    ctx.line(`sent ${p.version}: ${writer.bytes} bytes in ${writer.records} records`);
    return { version: p.version, bytes: writer.bytes, records: writer.records, parts };
  } catch (err) {
    outbound.abort(ctx.signal.aborted ? String(ctx.signal.reason) : (err as Error).message);
    throwIfAborted(ctx.signal);
    throw err;
  }
}

export async function versionReceive(
  p: Payload<"version.receive">,
  ctx: CommandContext,
): Promise<HandlerResult<"version.receive">> {
  const { inbound, outbound } = ctx.streams.open(p.stream);
  inbound.widen(BULK_WINDOW);
  const onAbort = () => inbound.fail(`stream ${p.stream}: ${String(ctx.signal.reason)}`);
  ctx.signal.addEventListener("abort", onAbort, { once: true });
  try {
    // One transfer of a version at a time on a host: a second waits, then finds it registered.
    const r = await ctx.runtime.host.locks.with(`transfer:${p.version}`, () =>
      receiveVersion(ctx.runtime.host, p.version, p.from, {
        inbound,
        sendResume: async (line) => {
          outbound.write("file", line);
        },
      }),
    );
    await outbound.end();
    ctx.line(`received ${p.version} from ${p.from}: ${r.transfer.bytes} bytes`);
    return { ...hostVersion(versionInfo(r.record), ctx.runtime.host.hostId), transfer: r.transfer };
  } catch (err) {
    outbound.abort(ctx.signal.aborted ? String(ctx.signal.reason) : (err as Error).message);
    throwIfAborted(ctx.signal);
    throw err;
  } finally {
    ctx.signal.removeEventListener("abort", onAbort);
  }
}
