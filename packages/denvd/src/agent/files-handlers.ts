import { pipeline } from "node:stream/promises";
import { type CommandContext, type HandlerResult, type Payload, throwIfAborted } from "./command-context.js";

/**
 * env.files.put / env.files.get: a tar archive over a data stream (channel `file`). Uploads go
 * through the special-file guard inside putFiles before anything is written; downloads are read
 * as the target user. A cancel stops the transfer by failing the stream.
 */

export async function filesPut(
  p: Payload<"env.files.put">,
  ctx: CommandContext,
): Promise<HandlerResult<"env.files.put">> {
  const { inbound } = ctx.streams.open(p.stream);
  const onAbort = () => inbound.fail(`stream ${p.stream}: ${String(ctx.signal.reason)}`);
  ctx.signal.addEventListener("abort", onAbort, { once: true });
  try {
    const r = await ctx.runtime.putFiles(p.environment, p.path, inbound, {
      ...(p.service ? { service: p.service } : {}),
      ...(p.user ? { user: p.user } : {}),
    });
    return { path: p.path, entries: r.entries, bytes: r.bytes };
  } catch (err) {
    throwIfAborted(ctx.signal);
    throw err;
  } finally {
    ctx.signal.removeEventListener("abort", onAbort);
  }
}

export async function filesGet(
  p: Payload<"env.files.get">,
  ctx: CommandContext,
): Promise<HandlerResult<"env.files.get">> {
  const archive = await ctx.runtime.getFiles(p.environment, p.path, {
    ...(p.service ? { service: p.service } : {}),
    ...(p.user ? { user: p.user } : {}),
  });
  const { outbound } = ctx.streams.open(p.stream);
  const onAbort = () => archive.destroy(new Error(String(ctx.signal.reason)));
  ctx.signal.addEventListener("abort", onAbort, { once: true });
  try {
    await pipeline(archive, outbound.writable("file"));
  } catch (err) {
    outbound.abort(ctx.signal.aborted ? String(ctx.signal.reason) : (err as Error).message);
    throwIfAborted(ctx.signal);
    throw err;
  } finally {
    ctx.signal.removeEventListener("abort", onAbort);
  }
  return { path: p.path, bytes: outbound.sent.file };
}
