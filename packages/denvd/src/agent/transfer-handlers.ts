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
  const out = outbound.bulk().writable("file");
  // A stream that breaks (the connection went) fails the writer's next write, not the process.
  out.on("error", () => undefined);
  const writer = new RecordWriter(out);
  try {
    const { parts } = await sendVersion(ctx.runtime.host, p.version, p.resume, writer, ctx.signal);
    await new Promise<void>((resolve, reject) => {
      out.once("error", reject);
      out.end(() => resolve());
    });
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
