import type { IncomingMessage } from "node:http";
import WebSocket from "ws";
import { DenvUnreachableError, errorFromBody } from "./errors.js";
import type { Query, Transport } from "./http.js";

/**
 * Opens a WebSocket to a route with the client's token and resolves with what `onOpen` makes
 * of it. `onOpen` runs inside the open event, before any message can be delivered: a server
 * that speaks first (an SSH banner through a tunnel) would otherwise lose its first bytes to a
 * listener attached one microtask too late. A refused upgrade rejects with the DenvApiError of
 * the server's error body (401, 404, 403 ...), a network failure with DenvUnreachableError.
 */
export function openWebSocket<T>(
  http: Transport,
  path: string,
  query: Query,
  signal: AbortSignal | undefined,
  onOpen: (ws: WebSocket) => T,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(http.wsHref(path, query), { headers: http.authHeaders() });
    const onAbort = () => {
      ws.terminate();
      reject(signal?.reason instanceof Error ? signal.reason : abortError());
    };
    if (signal?.aborted === true) return onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    const settle = () => {
      signal?.removeEventListener("abort", onAbort);
      ws.removeAllListeners("unexpected-response");
      ws.removeListener("error", onError);
    };
    const onError = (err: Error) => {
      settle();
      reject(new DenvUnreachableError(http.url, err));
    };
    ws.on("error", onError);
    ws.on("unexpected-response", (_req, res: IncomingMessage) => {
      settle();
      ws.removeAllListeners("error");
      ws.on("error", () => undefined);
      readAll(res).then(
        (body) => reject(errorFromBody(res.statusCode ?? 0, res.statusMessage ?? "", body, `GET ${path}`)),
        (err: unknown) => reject(new DenvUnreachableError(http.url, err)),
      );
    });
    ws.once("open", () => {
      settle();
      try {
        resolve(onOpen(ws));
      } catch (err) {
        ws.terminate();
        reject(err);
      }
    });
  });
}

function readAll(res: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    res.on("data", (c: Buffer) => chunks.push(c));
    res.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    res.on("error", reject);
  });
}

export function abortError(): Error {
  const err = new Error("the operation was aborted");
  err.name = "AbortError";
  return err;
}
