import type { IncomingMessage, ServerResponse } from "node:http";

/**
 * The Connect protocol (https://connectrpc.com/docs/protocol) as the e2b SDK speaks it to envd:
 * its transport is @connectrpc/connect-web with `useBinaryFormat: false`, so unary calls are
 * `application/json` bodies and server-streaming calls are `application/connect+json`, each
 * message in an envelope of 1 flag byte and a 4-byte big-endian length; the stream ends with an
 * envelope flagged 0x02 holding `{}` or `{"error": {"code", "message"}}`. The Prime double
 * speaks it with the binary codec (`application/proto`, `application/connect+proto`): its
 * messages come encoded by the caller; errors and the end of a stream stay JSON in both.
 */
export type ConnectCode =
  | "canceled"
  | "invalid_argument"
  | "deadline_exceeded"
  | "not_found"
  | "failed_precondition"
  | "permission_denied"
  | "unimplemented"
  | "internal"
  | "unavailable"
  | "unauthenticated";

/** The HTTP status a unary error travels with, as the protocol's table maps codes. */
const httpStatus: Record<ConnectCode, number> = {
  canceled: 499,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  failed_precondition: 400,
  permission_denied: 403,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  unauthenticated: 401,
};

export class ConnectError extends Error {
  constructor(
    readonly code: ConnectCode,
    message: string,
  ) {
    super(message);
  }
}

/** How messages travel: `name` completes the content types, `encode` makes a message's bytes. */
export interface ConnectCodec {
  name: "json" | "proto";
  encode(message: unknown): Buffer;
}

export const jsonCodec: ConnectCodec = { name: "json", encode: (m) => Buffer.from(JSON.stringify(m)) };
/** Protobuf binary: the caller hands over each message already encoded, as a Buffer. */
export const protoCodec: ConnectCodec = { name: "proto", encode: (m) => m as Buffer };

const END_STREAM = 0x02;
const COMPRESSED = 0x01;

export function isStreaming(req: IncomingMessage): boolean {
  return (req.headers["content-type"] ?? "").startsWith("application/connect+");
}

/** The request's message bytes: a unary call's body, or the one enveloped message of a stream. */
export function requestBytes(req: IncomingMessage, body: Buffer): Buffer {
  if (!isStreaming(req)) return body;
  if (body.length < 5) throw new ConnectError("invalid_argument", "missing envelope");
  if ((body[0] ?? 0) & COMPRESSED) throw new ConnectError("unimplemented", "compressed messages");
  return body.subarray(5, 5 + body.readUInt32BE(1));
}

/** The request message: the JSON body of a unary call, or the one enveloped message of a stream. */
export function requestMessage(req: IncomingMessage, body: Buffer): Record<string, unknown> {
  const json = requestBytes(req, body);
  try {
    return (json.length === 0 ? {} : JSON.parse(json.toString())) as Record<string, unknown>;
  } catch {
    throw new ConnectError("invalid_argument", "request is not JSON");
  }
}

function envelope(flags: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

export function sendUnary(res: ServerResponse, message: unknown, codec = jsonCodec): void {
  res.writeHead(200, { "content-type": `application/${codec.name}` });
  res.end(codec.encode(message));
}

/** A unary error, or a stream's error before any message was sent: both are plain JSON. */
export function sendError(res: ServerResponse, e: ConnectError, status = httpStatus[e.code]): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify({ code: e.code, message: e.message }));
}

/** A server stream: messages as they come, then its end with an optional error. */
export class ConnectStream {
  constructor(
    private readonly res: ServerResponse,
    private readonly codec = jsonCodec,
  ) {
    res.writeHead(200, { "content-type": `application/connect+${codec.name}` });
  }

  get closed(): boolean {
    return this.res.writableEnded || this.res.destroyed;
  }

  send(message: unknown): void {
    if (!this.closed) this.res.write(envelope(0, this.codec.encode(message)));
  }

  end(error?: ConnectError): void {
    if (this.closed) return;
    const end = error ? { error: { code: error.code, message: error.message } } : {};
    this.res.end(envelope(END_STREAM, jsonCodec.encode(end)));
  }
}
