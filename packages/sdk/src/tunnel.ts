import net from "node:net";
import type { Duplex } from "node:stream";
import { createWebSocketStream } from "ws";
import { DenvApiError, DenvClientError } from "./errors.js";
import type { Query, Transport } from "./http.js";
import { openWebSocket } from "./ws-open.js";

/** A TCP byte stream to a port of a service, carried by one WebSocket of binary frames. */
export function openTunnel(
  http: Transport,
  path: string,
  query: Query,
  signal?: AbortSignal,
): Promise<Duplex> {
  return openWebSocket(http, path, query, signal, (ws) => {
    const duplex = createWebSocketStream(ws);
    // The control plane reaches the service after the upgrade: a tunnel it cannot open (no
    // such service, nothing listening) is a 1011 close whose reason says why.
    ws.on("close", (code, reason) => {
      if (code === 1000 || code === 1005) return;
      const why = reason.toString("utf8") || `the tunnel closed (WebSocket close ${code})`;
      duplex.destroy(new DenvApiError(0, code === 1011 ? "internal" : "unreachable", why));
    });
    return duplex;
  });
}

export interface PortForwardOptions {
  /** The local address to listen on (default 127.0.0.1: a forwarded port is not for the network). */
  host?: string;
  /** A tunnel that could not be opened; the local connection is closed. */
  onError?: (err: Error) => void;
}

export interface PortForward {
  host: string;
  /** The local port (the one asked for, or the one the system chose for 0). */
  port: number;
  /** Stops listening and closes every forwarded connection. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Listens on a local port and tunnels each TCP connection through its own WebSocket (the
 * connect route), so that connections are independent as they would be on the real port.
 */
export async function listenForward(
  open: () => Promise<Duplex>,
  localPort: number,
  options: PortForwardOptions = {},
): Promise<PortForward> {
  const host = options.host ?? "127.0.0.1";
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    // Bytes the client sends before the tunnel is open wait in the socket.
    socket.pause();
    open().then(
      (tunnel) => {
        if (socket.destroyed) return tunnel.destroy();
        tunnel.on("error", (err: Error) => {
          options.onError?.(err);
          socket.destroy();
        });
        tunnel.on("close", () => socket.destroy());
        socket.on("close", () => tunnel.destroy());
        socket.pipe(tunnel);
        tunnel.pipe(socket);
      },
      (err: Error) => {
        socket.destroy();
        options.onError?.(err);
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) => {
      const why = err.code === "EADDRINUSE" ? "the port is in use; pick another local port" : err.message;
      reject(new DenvClientError("invalid_request", `cannot listen on ${host}:${localPort}: ${why}`));
    });
    server.listen(localPort, host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : localPort;
  const close = async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return { host, port, close, [Symbol.asyncDispose]: close };
}
