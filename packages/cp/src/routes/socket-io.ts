import type { WebSocket } from "ws";

/**
 * Sends one message and resolves when it left for the kernel. Awaiting this before reading more
 * from a host stream is what makes a slow WebSocket client slow the host down.
 */
export function sendAndDrain(socket: WebSocket, data: string | Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    if (socket.readyState !== socket.OPEN) {
      reject(new Error("the client went away"));
      return;
    }
    socket.send(data, { binary: typeof data !== "string" }, (err) => (err ? reject(err) : resolve()));
  });
}
