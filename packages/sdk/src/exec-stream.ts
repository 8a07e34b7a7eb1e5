import { ErrorResponse, type ExecRequest, type ExecResponse, ExecStreamServerFrame } from "@denv/spec";
import WebSocket from "ws";
import { DenvApiError } from "./errors.js";
import { parseValue, type Transport } from "./http.js";
import { abortError, openWebSocket } from "./ws-open.js";

export interface ExecStreamOptions {
  /** Streamed to the command's standard input; the command sees EOF when it ends. */
  stdin?: AsyncIterable<Uint8Array | string>;
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
  signal?: AbortSignal;
}

/** Bytes per stdin frame: the size of a protocol data frame (spec MAX_DATA_CHUNK). */
const STDIN_CHUNK = 64 * 1024;
/** Above this much unsent data, reading stdin waits: a slow link slows the reader. */
const HIGH_WATER = 1024 * 1024;

/**
 * Runs a command over the exec stream route (a WebSocket of JSON text frames, routes.md):
 * `start`, then `stdin`... and `stdin_end` from us; `stdout`/`stderr`... and one `exit` from the
 * server. Output arrives through the callbacks as it is produced; the promise resolves with the
 * result (its output fields empty).
 */
export async function runExecStream(
  http: Transport,
  path: string,
  request: ExecRequest,
  options: ExecStreamOptions = {},
): Promise<ExecResponse> {
  const what = `exec stream ${path}`;
  // attach() runs inside the open event, so no frame is missed; its promise is the result.
  return await openWebSocket(http, path, {}, options.signal, (ws) => attach(ws, request, options, what));
}

function attach(ws: WebSocket, request: ExecRequest, options: ExecStreamOptions, what: string) {
  return new Promise<ExecResponse>((resolve, reject) => {
    let settled = false;
    const finish = (err: Error | undefined, result?: ExecResponse) => {
      if (settled) return;
      settled = true;
      options.signal?.removeEventListener("abort", onAbort);
      if (ws.readyState === WebSocket.OPEN) ws.close(1000);
      if (err !== undefined) reject(err);
      else if (result !== undefined) resolve(result);
    };
    const onAbort = () => {
      ws.terminate();
      finish(options.signal?.reason instanceof Error ? options.signal.reason : abortError());
    };
    options.signal?.addEventListener("abort", onAbort, { once: true });

    ws.on("error", (err) => finish(err));
    ws.on("message", (data, isBinary) => {
      if (isBinary) return;
      let frame: ExecStreamServerFrame;
      try {
        frame = parseValue(ExecStreamServerFrame, JSON.parse(String(data)), what);
      } catch (err) {
        return finish(
          err instanceof DenvApiError
            ? err
            : new DenvApiError(0, "invalid_response", `${what} sent a frame that is not JSON`),
        );
      }
      if (frame.type === "stdout" || frame.type === "stderr") {
        (frame.type === "stdout" ? options.onStdout : options.onStderr)?.(Buffer.from(frame.data, "base64"));
      } else if (frame.type === "exit") {
        finish(undefined, frame.result);
      } else {
        // A refusal after the upgrade (agent_root, not_found, a host failure) reads like the
        // same refusal from the sync route.
        const { code, message, details } = frame.error;
        finish(new DenvApiError(0, code, message, details ?? []));
      }
    });
    ws.on("close", (code, reason) => finish(closeError(code, reason.toString("utf8"), what)));

    ws.send(JSON.stringify({ type: "start", exec: request }));
    pumpStdin(ws, options.stdin, () => settled).catch((err: Error) => finish(err));
  });
}

async function pumpStdin(
  ws: WebSocket,
  stdin: AsyncIterable<Uint8Array | string> | undefined,
  done: () => boolean,
): Promise<void> {
  if (stdin !== undefined) {
    for await (const chunk of stdin) {
      if (done()) return;
      const bytes = Buffer.from(chunk);
      for (let offset = 0; offset < bytes.length; offset += STDIN_CHUNK) {
        const data = bytes.subarray(offset, offset + STDIN_CHUNK).toString("base64");
        await send(ws, JSON.stringify({ type: "stdin", data }));
      }
    }
  }
  if (!done() && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "stdin_end" }));
}

function send(ws: WebSocket, text: string): Promise<void> {
  if (ws.readyState !== WebSocket.OPEN) return Promise.resolve();
  if (ws.bufferedAmount < HIGH_WATER) {
    ws.send(text);
    return Promise.resolve();
  }
  return new Promise((resolve) => ws.send(text, () => resolve()));
}

/** An error frame, or a close reason, may carry denv's error body. */
function errorFrame(frame: unknown, what: string): DenvApiError {
  const parsed = ErrorResponse.safeParse(frame);
  if (!parsed.success) return new DenvApiError(0, "internal", `${what} failed without a reason`);
  const { code, message, details } = parsed.data.error;
  return new DenvApiError(0, code, message, details ?? []);
}

function closeError(code: number, reason: string, what: string): DenvApiError {
  if (reason !== "") {
    try {
      return errorFrame(JSON.parse(reason), what);
    } catch {
      // The control plane closes with 1011 and the message after its error frame; a proxy may
      // close with only a reason.
      return new DenvApiError(0, code === 1011 || code >= 4000 ? "internal" : "unreachable", reason);
    }
  }
  return new DenvApiError(
    0,
    "unreachable",
    `${what} closed before the command finished (WebSocket close ${code}); the command may still be running`,
  );
}
