import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import {
  type CommandKind,
  type DataFrame,
  decodeBinaryData,
  encodeBinaryData,
  type Frame,
  INITIAL_WINDOW,
  JoinRequest,
  MAX_DATA_CHUNK,
  PROTOCOL_VERSION,
  parseFrame,
  type ResultFrame,
} from "@denv/spec";
import { type WebSocket, WebSocketServer } from "ws";
import type { z } from "zod";

/**
 * A control plane small enough to read in one go, for denvd's tests: POST /v1/hosts/join and
 * the host stream on 127.0.0.1. It records every frame the host sends, sends commands, answers
 * heartbeats, and plays either end of a data stream with real credit accounting. With
 * `binaryData`, it answers hello as the control plane does (a heartbeat with its capabilities)
 * and takes binary data frames; `frames` holds them as JSON ones (base64), `binaryIn` counts them.
 */

export interface StreamReader {
  /** Everything received so far, per channel. */
  bytes(channel?: DataFrame["channel"]): Buffer;
  /** Resolves at the host's `end` frame (with its error, if any). */
  ended: Promise<string | undefined>;
  /** Most bytes received and not yet granted back: never above INITIAL_WINDOW if the writer keeps to its credit. */
  maxUnacked: number;
  /** Bytes the host sent beyond the credit it had been granted (must stay 0). */
  overrun: number;
  stop(): void;
}

export class FakeCp {
  readonly token = `join-${randomBytes(8).toString("hex")}`;
  readonly credential = `cred-${randomBytes(16).toString("hex")}`;
  readonly frames: Frame[] = [];
  readonly joins: Array<z.infer<typeof JoinRequest>> = [];
  /** Upgrades refused for a wrong credential. */
  refused = 0;
  /** Binary data frames received. */
  binaryIn = 0;
  connections = 0;
  private socket: WebSocket | undefined;
  private listeners = new Set<() => void>();
  private credit = new Map<string, number>();
  private readers = new Map<string, (f: DataFrame | { type: "end"; error?: string }) => void>();

  private constructor(
    private readonly server: Server,
    private readonly wss: WebSocketServer,
    readonly hostId: string,
    private readonly opts: { answerHeartbeats: boolean; binaryData: boolean },
  ) {}

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  static async start(
    opts: { hostId?: string; answerHeartbeats?: boolean; binaryData?: boolean } = {},
  ): Promise<FakeCp> {
    const server = createServer();
    const wss = new WebSocketServer({ noServer: true });
    const cp = new FakeCp(server, wss, opts.hostId ?? `t${randomBytes(3).toString("hex")}`, {
      answerHeartbeats: opts.answerHeartbeats ?? true,
      binaryData: opts.binaryData ?? false,
    });
    server.on("request", (req, res) => void cp.onRequest(req, res));
    server.on("upgrade", (req, socket, head) => {
      // The client may reset the socket once it has read a refusal: not an error of this server.
      socket.on("error", () => undefined);
      if (req.url !== "/v1/hosts/stream" || req.headers.authorization !== `Bearer ${cp.credential}`) {
        cp.refused++;
        const body = JSON.stringify({ error: { code: "unauthorized", message: "unknown host credential" } });
        socket.end(
          `HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
        );
        return;
      }
      wss.handleUpgrade(req, socket, head, (ws) => cp.onSocket(ws));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    return cp;
  }

  private async onRequest(req: IncomingMessage, res: import("node:http").ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const reply = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (req.method !== "POST" || req.url !== "/v1/hosts/join") {
      return reply(404, { error: { code: "not_found", message: "no such route" } });
    }
    const parsed = JoinRequest.safeParse(JSON.parse(Buffer.concat(chunks).toString() || "{}"));
    if (!parsed.success)
      return reply(400, { error: { code: "invalid_request", message: "bad join request" } });
    if (parsed.data.token !== this.token) {
      return reply(401, {
        error: { code: "unauthorized", message: "the join token is unknown or expired: create a new one" },
      });
    }
    this.joins.push(parsed.data);
    reply(200, { host_id: this.hostId, credential: this.credential, target: "default" });
  }

  private onSocket(ws: WebSocket): void {
    this.socket = ws;
    this.connections++;
    this.credit.clear();
    ws.on("message", (data, isBinary) => {
      let frame: Frame;
      if (isBinary) {
        const raw = decodeBinaryData(data as Buffer);
        this.binaryIn++;
        frame = { ...raw, data: Buffer.from(raw.data).toString("base64") };
      } else frame = parseFrame(data.toString());
      this.frames.push(frame);
      if (frame.type === "hello" && this.opts.binaryData) {
        this.send({
          v: PROTOCOL_VERSION,
          type: "heartbeat",
          ts: Date.now(),
          capabilities: { binary_data: true },
        });
      }
      if (frame.type === "heartbeat" && this.opts.answerHeartbeats) {
        this.send({ v: PROTOCOL_VERSION, type: "heartbeat", ts: Date.now() });
      }
      if (frame.type === "window")
        this.credit.set(frame.stream, (this.credit.get(frame.stream) ?? INITIAL_WINDOW) + frame.bytes);
      if (frame.type === "data" || frame.type === "end") this.readers.get(frame.stream)?.(frame);
      for (const l of [...this.listeners]) l();
    });
    for (const l of [...this.listeners]) l();
  }

  send(frame: Frame): void {
    if (!this.socket) throw new Error("fake cp: no host connected");
    this.socket.send(JSON.stringify(frame));
  }

  /** Sends a data frame as a binary message, or any bytes as one (a malformed frame). */
  sendBinary(frame: Omit<DataFrame, "data" | "v" | "type"> & { data: Buffer }): void;
  sendBinary(raw: Uint8Array): void;
  sendBinary(what: Uint8Array | (Omit<DataFrame, "data" | "v" | "type"> & { data: Buffer })): void {
    if (!this.socket) throw new Error("fake cp: no host connected");
    const msg =
      what instanceof Uint8Array ? what : encodeBinaryData({ v: PROTOCOL_VERSION, type: "data", ...what });
    if (!msg) throw new Error("fake cp: not encodable");
    this.socket.send(msg);
  }

  command(
    kind: CommandKind,
    payload: Record<string, unknown>,
    opts: { id?: string; deadlineMs?: number } = {},
  ): string {
    const id = opts.id ?? `cmd-${randomBytes(6).toString("hex")}`;
    this.send({
      v: PROTOCOL_VERSION,
      type: "command",
      id,
      kind,
      payload,
      deadline: Date.now() + (opts.deadlineMs ?? 300_000),
    });
    return id;
  }

  /** Waits for a frame from the host matching `pred` (looking at frames from index `from`). */
  waitFor<F extends Frame = Frame>(pred: (f: Frame) => boolean, timeoutMs = 120_000, from = 0): Promise<F> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.frames.slice(from).find(pred);
        if (found) {
          this.listeners.delete(check);
          clearTimeout(timer);
          resolve(found as F);
        }
      };
      const timer = setTimeout(() => {
        this.listeners.delete(check);
        reject(new Error(`fake cp: no matching frame within ${timeoutMs} ms`));
      }, timeoutMs);
      this.listeners.add(check);
      check();
    });
  }

  /** Waits until `n` hosts connections were accepted in all. */
  waitConnections(n: number, timeoutMs = 60_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (this.connections >= n) {
          this.listeners.delete(check);
          clearTimeout(timer);
          resolve();
        }
      };
      const timer = setTimeout(() => reject(new Error(`fake cp: fewer than ${n} connections`)), timeoutMs);
      this.listeners.add(check);
      check();
    });
  }

  result(id: string, timeoutMs?: number, from = 0): Promise<ResultFrame> {
    return this.waitFor<ResultFrame>((f) => f.type === "result" && f.id === id, timeoutMs, from);
  }

  of<T extends Frame["type"]>(type: T, id?: string): Array<Extract<Frame, { type: T }>> {
    return this.frames.filter(
      (f): f is Extract<Frame, { type: T }> =>
        f.type === type && (id === undefined || (f as { id?: string }).id === id),
    );
  }

  /** Sends bytes on a stream within the host's credit, then `end`. */
  async write(stream: string, bytes: Buffer, channel: DataFrame["channel"], end = true): Promise<void> {
    let seq = 0;
    let sent = 0;
    let offset = 0;
    while (offset < bytes.length) {
      const credit = (this.credit.get(stream) ?? INITIAL_WINDOW) - sent;
      if (credit <= 0) {
        await new Promise((r) => setTimeout(r, 5));
        continue;
      }
      const n = Math.min(credit, MAX_DATA_CHUNK, bytes.length - offset);
      const data = bytes.subarray(offset, offset + n).toString("base64");
      this.send({ v: PROTOCOL_VERSION, type: "data", stream, seq: seq++, channel, data });
      offset += n;
      sent += n;
    }
    if (end) this.send({ v: PROTOCOL_VERSION, type: "end", stream });
  }

  /**
   * Reads a stream from the host, granting credit back as it "consumes": `grantBytes` every
   * `everyMs` (a slow reader), or at once when grantBytes is Infinity.
   */
  read(stream: string, opts: { grantBytes?: number; everyMs?: number } = {}): StreamReader {
    const grantBytes = opts.grantBytes ?? Number.POSITIVE_INFINITY;
    const chunks: Array<{ channel: DataFrame["channel"]; data: Buffer }> = [];
    let received = 0;
    let granted = INITIAL_WINDOW;
    let consumed = 0;
    let resolveEnd!: (e: string | undefined) => void;
    const reader: StreamReader = {
      bytes: (channel) =>
        Buffer.concat(chunks.filter((c) => !channel || c.channel === channel).map((c) => c.data)),
      ended: new Promise((r) => {
        resolveEnd = r;
      }),
      maxUnacked: 0,
      overrun: 0,
      stop: () => clearInterval(timer),
    };
    const grant = (limit: number) => {
      const n = Math.min(limit, received - consumed);
      if (n <= 0) return;
      consumed += n;
      granted += n;
      this.send({ v: PROTOCOL_VERSION, type: "window", stream, bytes: n });
    };
    this.readers.set(stream, (f) => {
      if (f.type === "end") {
        resolveEnd(f.error);
        return;
      }
      const data = Buffer.from(f.data, "base64");
      chunks.push({ channel: f.channel, data });
      received += data.length;
      reader.overrun = Math.max(reader.overrun, received - granted);
      reader.maxUnacked = Math.max(reader.maxUnacked, received - consumed);
      if (!Number.isFinite(grantBytes)) grant(Number.POSITIVE_INFINITY);
    });
    const timer = setInterval(() => grant(grantBytes), opts.everyMs ?? 50);
    void reader.ended.then(() => clearInterval(timer));
    return reader;
  }

  /** Drops the host's socket (as a network failure would). */
  dropConnection(): void {
    this.socket?.terminate();
  }

  async close(): Promise<void> {
    for (const ws of this.wss.clients) ws.terminate();
    this.wss.close();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
