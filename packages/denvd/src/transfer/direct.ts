import { createHash, timingSafeEqual } from "node:crypto";
import net from "node:net";
import { DenvError } from "@denv/spec/errors";
import { TransferMessages } from "@denv/spec/messages";
import { DirectAnswer, DirectHello, type DirectSend } from "@denv/spec/protocol/transfer";

/**
 * Direct version transfers (docs/reference/protocol.md#direct-transfers): the receiving host's
 * listener (denvd --transfer-listen) and the sender's dial. The control plane mints a ticket for
 * one (version, sender, receiver) and hands it to both; the receiver takes exactly one connection
 * presenting it, before it expires, and reads nothing from any other. What flows after the
 * ticket is the same record stream as over the relay, checked the same way.
 */

/** The hello line (and the answer) are short; more before a newline is not a transfer. */
const MAX_LINE = 4096;
/** A connection that has not said who it is by then is closed. */
const HELLO_MS = 10_000;
/** Connections that have not presented a ticket yet, at most: more are closed at once. */
const MAX_UNAUTHENTICATED = 16;
/** How long past its expiry a spent ticket is still recognised as one. */
const KEEP_USED_MS = 60 * 60_000;

const digest = (ticket: string) => createHash("sha256").update(ticket).digest();

interface Expected {
  hash: Buffer;
  version: string;
  from: string;
  expiresAt: number;
  resolve(socket: net.Socket): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

/** What a receive waits on: the sender's connection, once it presented the ticket. */
export interface Expectation {
  socket: Promise<net.Socket>;
  /** The receive stopped waiting: the ticket is no longer taken. */
  cancel(why: string): void;
}

const refusal = (why: string) => new DenvError("invalid_request", TransferMessages.directRefused(why));

export class TransferListener {
  private expected = new Set<Expected>();
  /**
   * Hashes of tickets that were taken, spent or expired, kept an hour past their expiry: a second
   * presentation is refused as such, not as an unknown ticket.
   */
  private used = new Map<string, { until: number; expired: boolean }>();
  private unauthenticated = 0;
  /** Every open connection, closed with the listener. */
  private sockets = new Set<net.Socket>();

  private constructor(
    private readonly server: net.Server,
    private readonly log: (msg: string, fields?: Record<string, unknown>) => void,
  ) {
    server.on("connection", (s) => this.onConnection(s));
  }

  static open(
    listen: { host: string; port: number },
    log: (msg: string, fields?: Record<string, unknown>) => void,
  ): Promise<TransferListener> {
    const server = net.createServer({ noDelay: true });
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(listen.port, listen.host, () => {
        server.off("error", reject);
        resolve(new TransferListener(server, log));
      });
    });
  }

  /** HOST:PORT as listening (the port the kernel picked for port 0). */
  get address(): string {
    const a = this.server.address() as net.AddressInfo;
    return a.family === "IPv6" ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
  }

  /** Waits for the one connection that presents `ticket` for `version` from `from`. */
  expect(t: { ticket: string; version: string; from: string; expiresAt: number }): Expectation {
    let entry!: Expected;
    const socket = new Promise<net.Socket>((resolve, reject) => {
      entry = {
        hash: digest(t.ticket),
        version: t.version,
        from: t.from,
        expiresAt: t.expiresAt,
        resolve,
        reject,
        timer: setTimeout(
          () =>
            this.settle(
              entry,
              new DenvError("conflict", TransferMessages.directNoSender(t.version, t.from)),
              true,
            ),
          Math.max(0, t.expiresAt - Date.now()),
        ),
      };
    });
    // Awaited by the receive in its turn; a rejection before then is not unhandled.
    socket.catch(() => undefined);
    this.expected.add(entry);
    return { socket, cancel: (why) => this.settle(entry, new DenvError("conflict", why)) };
  }

  private settle(e: Expected, outcome: Error | net.Socket, expired = false): void {
    if (!this.expected.delete(e)) return;
    clearTimeout(e.timer);
    this.used.set(e.hash.toString("hex"), { until: e.expiresAt + KEEP_USED_MS, expired });
    if (outcome instanceof Error) e.reject(outcome);
    else e.resolve(outcome);
  }

  close(): Promise<void> {
    for (const e of [...this.expected]) this.settle(e, new DenvError("conflict", "denvd is stopping"));
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    return closed;
  }

  private onConnection(socket: net.Socket): void {
    if (this.unauthenticated >= MAX_UNAUTHENTICATED) {
      socket.destroy();
      return;
    }
    this.unauthenticated++;
    this.sockets.add(socket);
    socket.once("close", () => this.sockets.delete(socket));
    let counted = true;
    const uncount = () => {
      if (counted) this.unauthenticated--;
      counted = false;
    };
    socket.setTimeout(HELLO_MS, () => socket.destroy());
    socket.on("error", () => undefined);
    socket.on("close", uncount);
    let buf = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      const nl = buf.indexOf(0x0a);
      if (nl < 0 && buf.length <= MAX_LINE) return;
      socket.off("data", onData);
      socket.pause();
      uncount();
      const line = nl < 0 ? undefined : buf.subarray(0, nl).toString("utf8");
      const rest = nl < 0 ? Buffer.alloc(0) : buf.subarray(nl + 1);
      this.authenticate(socket, line, rest);
    };
    socket.on("data", onData);
  }

  private authenticate(socket: net.Socket, line: string | undefined, rest: Buffer): void {
    const refuse = (why: string) => {
      const message = TransferMessages.directRefused(why);
      this.log("direct transfer connection refused", { peer: socket.remoteAddress, why });
      socket.end(`${JSON.stringify({ error: message })}\n`);
    };
    let hello: DirectHello | undefined;
    try {
      hello = line === undefined ? undefined : DirectHello.parse(JSON.parse(line));
    } catch {
      hello = undefined;
    }
    if (!hello) {
      refuse("the first line is not a transfer hello");
      return;
    }
    if (!hello.ticket) {
      refuse(TransferMessages.directNoTicket);
      return;
    }
    const hash = digest(hello.ticket);
    // Compared with every ticket this host holds, each in constant time.
    let match: Expected | undefined;
    for (const e of this.expected) if (timingSafeEqual(e.hash, hash)) match = e;
    if (!match) {
      this.pruneUsed();
      const seen = this.used.get(hash.toString("hex"));
      refuse(
        seen === undefined
          ? TransferMessages.directWrongTicket
          : seen.expired
            ? TransferMessages.directExpiredTicket
            : TransferMessages.directUsedTicket,
      );
      return;
    }
    if (Date.now() > match.expiresAt) {
      refuse(TransferMessages.directExpiredTicket);
      this.settle(match, refusal(TransferMessages.directExpiredTicket), true);
      return;
    }
    if (hello.version !== match.version || hello.from !== match.from) {
      // The one who holds the ticket misuses it: it is spent, and the receive fails.
      const why = TransferMessages.directOtherVersion(match.version, match.from);
      refuse(why);
      this.settle(match, refusal(why));
      return;
    }
    socket.setTimeout(0);
    socket.write(`${JSON.stringify({ ok: true })}\n`);
    if (rest.length > 0) socket.unshift(rest);
    this.log("direct transfer connection taken", { peer: socket.remoteAddress, version: match.version });
    this.settle(match, socket);
  }

  private pruneUsed(): void {
    const now = Date.now();
    for (const [h, u] of this.used) if (u.until < now) this.used.delete(h);
  }
}

/**
 * The sender's side: connects to the receiver's listener, presents the ticket, and returns the
 * socket once the receiver took it. A refusal is the receiver's one line; a listener that cannot
 * be reached says where it was looked for.
 */
export async function dialDirect(
  d: DirectSend,
  hello: { version: string; from: string },
  signal: AbortSignal,
): Promise<net.Socket> {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(d.address);
  const host = m?.[1] ?? m?.[2];
  if (!host || net.isIP(host) === 0)
    throw new DenvError("invalid_request", `version transfer: bad address ${d.address}`);
  const socket = net.connect({ host, port: Number(m?.[3]), noDelay: true });
  const unreachable = (why: string) =>
    new DenvError("conflict", `version transfer: ${d.to}'s transfer listener at ${d.address}: ${why}`);
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(unreachable("no connection within 10 s")), HELLO_MS);
      const onAbort = () => reject(unreachable("cancelled"));
      signal.addEventListener("abort", onAbort, { once: true });
      socket.once("connect", () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        resolve();
      });
      socket.once("error", (err) => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        reject(unreachable(err.message));
      });
    });
    socket.write(`${JSON.stringify({ ticket: d.ticket, version: hello.version, from: hello.from })}\n`);
    const answer = await readLine(socket);
    let parsed: DirectAnswer | undefined;
    try {
      parsed = DirectAnswer.parse(JSON.parse(answer));
    } catch {
      parsed = undefined;
    }
    if (!parsed) throw unreachable("the listener did not answer as a denvd does");
    if ("error" in parsed) throw new DenvError("invalid_request", parsed.error.slice(0, 500));
    return socket;
  } catch (err) {
    socket.destroy();
    throw err;
  }
}

/** One line from the socket (the answer to the hello); whatever follows stays in the socket. */
function readLine(socket: net.Socket): Promise<string> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const timer = setTimeout(() => done(new Error("the listener did not answer within 10 s")), HELLO_MS);
    const done = (err?: Error, line?: string) => {
      clearTimeout(timer);
      socket.off("data", onData);
      socket.off("end", onEnd);
      socket.off("error", onEnd);
      if (err) reject(new DenvError("conflict", `version transfer: ${err.message}`));
      else resolve(line ?? "");
    };
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      const nl = buf.indexOf(0x0a);
      if (nl >= 0) {
        socket.pause();
        const rest = buf.subarray(nl + 1);
        if (rest.length > 0) socket.unshift(rest);
        done(undefined, buf.subarray(0, nl).toString("utf8"));
      } else if (buf.length > MAX_LINE) done(new Error("the listener's answer is too long"));
    };
    const onEnd = () => done(new Error("the listener closed the connection without an answer"));
    socket.on("data", onData);
    socket.once("end", onEnd);
    socket.once("error", onEnd);
  });
}
