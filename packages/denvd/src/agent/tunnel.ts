import { connect, type Socket } from "node:net";
import { DenvError } from "@denv/spec";
import { requireEnvironment } from "../runtime/host-context.js";
import { requireEngine } from "../runtime/host-runtime.js";
import {
  abortCode,
  type CommandContext,
  type HandlerResult,
  type Payload,
  throwIfAborted,
  unlessAborted,
} from "./command-context.js";

const CONNECT_TIMEOUT_MS = 10_000;

/**
 * env.connect: a TCP tunnel to service:port inside an environment. denvd opens the connection
 * from the host to the service's address on the environment's network (the host firewall
 * accepts the replies to connections the host opened, and rejects anything the environment
 * starts). Bytes flow both ways under the stream's credit; each side's `end` half-closes. The
 * result comes when the connection is closed. Phases: `connect` (ends with the address), then
 * `connected` (ends with the byte counts when the connection closes).
 */
export async function tunnel(
  p: Payload<"env.connect">,
  ctx: CommandContext,
): Promise<HandlerResult<"env.connect">> {
  const phases = ctx.phases(false);
  phases.start("connect");
  const host = requireEngine(ctx.runtime, "a port tunnel").host;
  const rec = await requireEnvironment(host, p.environment);
  const containerId = rec.containers[p.service];
  if (!containerId) {
    throw new DenvError(
      "not_found",
      `environment ${p.environment} has no service '${p.service}' (services: ${Object.keys(rec.containers).join(", ")})`,
    );
  }
  const state = await host.docker.containers.inspect(containerId);
  const ip = state?.running ? state.networks[rec.network.name]?.ip : undefined;
  if (!ip) {
    throw new DenvError(
      "conflict",
      `service '${p.service}' of ${p.environment} is not running on the environment's network: start the environment`,
    );
  }
  const address = `${ip}:${p.port}`;
  const socket = await open(ip, p.port, ctx.signal).catch((err: Error) => {
    throwIfAborted(ctx.signal);
    throw new DenvError(
      "not_found",
      `cannot connect to ${p.service}:${p.port} in ${p.environment} (${address}): ${err.message}`,
    );
  });
  phases.end("connect", { address }, "connected");

  const { inbound, outbound } = ctx.streams.open(p.stream);
  let error: string | undefined;
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  const onAbort = () => socket.destroy();
  ctx.signal.addEventListener("abort", onAbort, { once: true });
  socket.on("error", (err) => {
    error ??= err.message;
  });
  inbound.on("error", (err) => socket.destroy(err));
  // pipe() ends the socket's write side when the control plane ends its side, and pauses the
  // socket when the stream's credit runs out.
  inbound.pipe(socket);
  socket.pipe(outbound.writable("tunnel"));
  await closed;
  ctx.signal.removeEventListener("abort", onAbort);
  if (ctx.signal.aborted) {
    outbound.abort(abortCode(ctx.signal));
    throwIfAborted(ctx.signal);
  }
  if (error !== undefined) outbound.abort(error);
  else await unlessAborted(outbound.end(), ctx.signal);
  const bytes = { bytes_to_service: inbound.bytes, bytes_from_service: outbound.sent.tunnel };
  phases.end("connected", bytes);
  return { service: p.service, port: p.port, address, ...bytes, ...(error !== undefined ? { error } : {}) };
}

function open(host: string, port: number, signal: AbortSignal): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port, allowHalfOpen: true, timeout: CONNECT_TIMEOUT_MS });
    const fail = (err: Error) => {
      socket.destroy();
      reject(err);
    };
    socket.once("connect", () => {
      socket.setTimeout(0);
      socket.off("error", fail);
      resolve(socket);
    });
    socket.once("error", fail);
    socket.once("timeout", () => fail(new Error(`no answer within ${CONNECT_TIMEOUT_MS} ms`)));
    signal.addEventListener("abort", () => fail(new Error("cancelled")), { once: true });
  });
}
