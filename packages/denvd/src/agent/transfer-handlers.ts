import type { Socket } from "node:net";
import { BULK_WINDOW, DenvError } from "@denv/spec";
import { hostVersion, versionInfo } from "../runtime/host-reports.js";
import { requireEngine } from "../runtime/host-runtime.js";
import { dialDirect } from "../transfer/direct.js";
import { type ReceiveStreams, receiveVersion } from "../transfer/receive.js";
import { sendVersion } from "../transfer/send.js";
import { RecordWriter } from "../transfer/wire.js";
import { type CommandContext, type HandlerResult, type Payload, throwIfAborted } from "./command-context.js";

/**
 * version.send / version.receive: a version streamed host to host through the control plane's
 * relay (docs/reference/protocol.md#version-transfer), or, with `direct`, on a connection from the
 * sender to the receiver's transfer listener that presented the control plane's ticket. Both stop
 * when their stream dies; the receiver's journal makes the next attempt resume.
 */

export async function versionSend(
  p: Payload<"version.send">,
  ctx: CommandContext,
): Promise<HandlerResult<"version.send">> {
  const { outbound } = ctx.streams.open(p.stream);
  outbound.bulk();
  if (p.direct) return sendDirect(p, p.direct, ctx, outbound);
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
    const { parts } = await sendVersion(
      requireEngine(ctx.runtime, "version transfer").host,
      p.version,
      p.resume,
      writer,
      ctx.signal,
    );
    await outbound.end();
    ctx.line(`sent ${p.version}: ${writer.bytes} bytes in ${writer.records} records`);
    return { version: p.version, bytes: writer.bytes, records: writer.records, parts };
  } catch (err) {
    outbound.abort(ctx.signal.aborted ? String(ctx.signal.reason) : (err as Error).message);
    throwIfAborted(ctx.signal);
    throw err;
  }
}

/** The records on a connection of their own to the receiver; the stream only ends. */
async function sendDirect(
  p: Payload<"version.send">,
  direct: NonNullable<Payload<"version.send">["direct"]>,
  ctx: CommandContext,
  outbound: ReturnType<CommandContext["streams"]["open"]>["outbound"],
): Promise<HandlerResult<"version.send">> {
  let socket: Socket | undefined;
  const onAbort = () => socket?.destroy(new Error(String(ctx.signal.reason)));
  ctx.signal.addEventListener("abort", onAbort, { once: true });
  try {
    socket = await dialDirect(direct, { version: p.version, from: ctx.runtime.hostId }, ctx.signal);
    const s = socket;
    // The socket lets go of each batch once the kernel has it: the writer fills it again.
    const writer = new RecordWriter({
      writeBatch: (bytes, release) => s.write(bytes, () => release()),
      drained: () =>
        new Promise<void>((resolve, reject) => {
          if (s.destroyed) return reject(new Error(`the connection to ${direct.to} closed`));
          const done = (err?: Error) => {
            s.off("drain", onDrain);
            s.off("close", onClose);
            if (err) reject(err);
            else resolve();
          };
          const onDrain = () => done();
          const onClose = () => done(new Error(`the connection to ${direct.to} closed`));
          s.once("drain", onDrain);
          s.once("close", onClose);
        }),
    });
    const { parts } = await sendVersion(
      requireEngine(ctx.runtime, "version transfer").host,
      p.version,
      p.resume,
      writer,
      ctx.signal,
    );
    await new Promise<void>((resolve, reject) => {
      s.once("error", reject);
      s.end(() => resolve());
    });
    await outbound.end();
    ctx.line(
      `sent ${p.version} to ${direct.to} directly: ${writer.bytes} bytes in ${writer.records} records`,
    );
    return { version: p.version, bytes: writer.bytes, records: writer.records, parts };
  } catch (err) {
    socket?.destroy();
    outbound.abort(ctx.signal.aborted ? String(ctx.signal.reason) : (err as Error).message);
    throwIfAborted(ctx.signal);
    throw err;
  } finally {
    ctx.signal.removeEventListener("abort", onAbort);
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
  const direct = p.direct ? directInbound(p, p.direct, ctx, inbound) : undefined;
  try {
    // One transfer of a version at a time on a host: a second waits, then finds it registered.
    const host = requireEngine(ctx.runtime, "version transfer").host;
    const r = await host.locks.with(`transfer:${p.version}`, () =>
      receiveVersion(host, p.version, p.from, {
        inbound: direct?.records ?? inbound,
        sendResume: async (line) => {
          outbound.write("file", line);
        },
      }),
    );
    await outbound.end();
    ctx.line(`received ${p.version} from ${p.from}${direct ? " directly" : ""}: ${r.transfer.bytes} bytes`);
    return { ...hostVersion(versionInfo(r.record), ctx.runtime.hostId), transfer: r.transfer };
  } catch (err) {
    outbound.abort(ctx.signal.aborted ? String(ctx.signal.reason) : (err as Error).message);
    throwIfAborted(ctx.signal);
    throw err;
  } finally {
    direct?.close();
    ctx.signal.removeEventListener("abort", onAbort);
  }
}

/**
 * The records of a direct receive: from the one connection to this host's listener that presents
 * the ticket. The control plane's stream carries nothing more than the resume point; when it
 * fails (the control plane gave up on this attempt, or the command was cancelled), so does this.
 */
function directInbound(
  p: Payload<"version.receive">,
  direct: NonNullable<Payload<"version.receive">["direct"]>,
  ctx: CommandContext,
  control: ReturnType<CommandContext["streams"]["open"]>["inbound"],
): { records: ReceiveStreams["inbound"]; close(): void } {
  const listener = ctx.transfer;
  if (!listener) {
    throw new DenvError(
      "conflict",
      `version transfer: host ${ctx.runtime.hostId} has no transfer listener (denvd --transfer-listen)`,
    );
  }
  const waiting = listener.expect({
    ticket: direct.ticket,
    version: p.version,
    from: p.from,
    expiresAt: direct.expires_at,
  });
  let socket: Socket | undefined;
  control.on("error", (err: Error) => {
    waiting.cancel(err.message);
    socket?.destroy(err);
  });
  control.resume();
  return {
    records: (async function* () {
      socket = await waiting.socket;
      for await (const chunk of socket) yield chunk as Buffer;
      // The receiver stops reading at the version's last record: an end before it is a broken
      // link (a killed sender), which the next attempt resumes, not a malformed stream.
      throw new DenvError(
        "conflict",
        `version transfer: the connection from ${p.from} closed before the end`,
      );
    })(),
    close() {
      waiting.cancel("the receive ended");
      socket?.destroy();
    },
  };
}
