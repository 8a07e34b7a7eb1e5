import { randomBytes } from "node:crypto";
import { ControlPlaneMessages, DenvError, TransferMessages, TransferResume } from "@denv/spec";
import type { z } from "zod";
import type { HostHub } from "../hub/hub.js";
import { choosePath, type PathChoice, type TransferPathSetting } from "../hub/transfer-route.js";
import { nowIso } from "../ids.js";
import type { Log } from "../log.js";
import type { Store } from "../store/store.js";
import type { TransferValue } from "./requests.js";

/**
 * A version streamed from a host that holds it to one that does not, through this control
 * plane's relay (docs/reference/protocol.md#version-transfer). The cp holds at most one stream
 * window of it at a time and never writes a byte of it to disk. The receiver says first what it
 * has (its resume point); the sender starts from there. An attempt that breaks (a dropped link,
 * a host that went away) is retried once both hosts are back, and resumes from what the
 * receiver verified; after the last attempt, what the receiver staged is discarded.
 *
 * With the direct path (docs/reference/protocol.md#direct-transfers) the bytes go from the sender
 * to the receiver's transfer listener instead, on a connection that presents a ticket minted here
 * for this attempt; the streams through the cp then carry only the resume point and the ends.
 */

export interface TransferDeps {
  hub: HostHub;
  store: Store;
  log: Log;
}

export interface TransferRequest {
  version: string;
  from: string;
  to: string;
  /** Stable per deployment: attempt n sends commands `${id}.r<n>` and `${id}.s<n>`. */
  id: string;
  timeoutMs: number;
  attempts?: number;
  /** How long to wait for both hosts to be online before an attempt. */
  waitMs?: number;
  /** relay (the default), direct, or auto: direct where the receiver takes it, else the relay. */
  path?: TransferPathSetting;
}

export type TransferOutcome = z.infer<typeof TransferValue>;

const DEFAULT_ATTEMPTS = 4;
const DEFAULT_WAIT_MS = 60_000;
/** A direct attempt's ticket is good this long: the sender connects as its command starts (on a loaded host that can take a while; the ticket is single-use all the same). */
const TICKET_MS = 10 * 60_000;

export async function transferVersion(deps: TransferDeps, req: TransferRequest): Promise<TransferOutcome> {
  const attempts = req.attempts ?? DEFAULT_ATTEMPTS;
  const t0 = Date.now();
  let last = "";
  let directFailed: string | undefined;
  for (let n = 1; n <= attempts; n++) {
    if (!(await bothOnline(deps.hub, [req.from, req.to], req.waitMs ?? DEFAULT_WAIT_MS))) {
      last = ControlPlaneMessages.hostOffline(deps.hub.isOnline(req.from) ? req.to : req.from);
      break;
    }
    // Chosen per attempt: the receiver's listener is its current connection's.
    const path = choosePath(req.path ?? "relay", req.to, deps.hub.directRoute(req.to), directFailed);
    if (path.path === "none") {
      last = path.reason;
      break;
    }
    try {
      const { transfer: r } = await attempt(deps, req, n, path);
      if (!(await deps.store.putReplica(req.version, req.to, nowIso()))) {
        // Deleted while it was on its way: the copy that arrived goes too.
        last = `version ${req.version} was deleted while it was being sent`;
        break;
      }
      const ms = Date.now() - t0;
      deps.log.info("version transferred", {
        version: req.version,
        from: req.from,
        to: req.to,
        bytes: r.bytes,
        ms,
        path: path.path,
      });
      return {
        version: req.version,
        from: req.from,
        to: req.to,
        attempts: n,
        bytes: r.bytes,
        resumed_bytes: r.resumed_bytes,
        layers_sent: r.layers_sent,
        layers_skipped: r.layers_skipped,
        skipped_special: r.skipped_special,
        duration_ms: ms,
        mib_per_s: Math.round((r.bytes / 1024 ** 2 / Math.max(ms, 1)) * 1000 * 10) / 10,
        path: path.path,
        path_reason: path.reason,
      };
    } catch (err) {
      last = err instanceof Error ? err.message : String(err);
      if (path.path === "direct") directFailed = last;
      deps.log.warn("version transfer attempt failed", { version: req.version, attempt: n, error: last });
      // A refusal of what was sent (a checksum, a path, an id) will not mend itself.
      if (err instanceof DenvError && err.code === "invalid_request") break;
    }
  }
  await deps.hub
    .send(
      req.to,
      "version.delete",
      { version: req.version },
      { id: `${req.id}.discard`, timeoutMs: req.timeoutMs, durable: false },
    )
    .catch(() => undefined);
  throw new DenvError("conflict", TransferMessages.failed(req.version, req.from, req.to, last));
}

async function bothOnline(hub: HostHub, hosts: string[], waitMs: number): Promise<boolean> {
  const until = Date.now() + waitMs;
  for (;;) {
    if (hosts.every((h) => hub.isOnline(h))) return true;
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, 250));
  }
}

type Received = Awaited<ReturnType<typeof receive>>["result"];

function receive(deps: TransferDeps, req: TransferRequest, n: number, ticket?: Ticket) {
  return deps.hub.stream(
    req.to,
    "version.receive",
    (stream) => ({
      version: req.version,
      stream,
      from: req.from,
      ...(ticket ? { direct: { ticket: ticket.ticket, expires_at: ticket.expiresAt } } : {}),
    }),
    {
      id: `${req.id}.r${n}`,
      timeoutMs: req.timeoutMs,
      bulk: true,
    },
  );
}

interface Ticket {
  ticket: string;
  expiresAt: number;
}

async function attempt(
  deps: TransferDeps,
  req: TransferRequest,
  n: number,
  path: Exclude<PathChoice, { path: "none" }>,
): Promise<Awaited<Received>> {
  // Single-use, for this attempt's (version, sender, receiver) only: the receiver takes one
  // connection presenting it, from this sender, for this version, before it expires.
  const ticket =
    path.path === "direct"
      ? { ticket: randomBytes(32).toString("base64url"), expiresAt: Date.now() + TICKET_MS }
      : undefined;
  const recv = receive(deps, req, n, ticket);
  const fromReceiver = recv.inbound[Symbol.asyncIterator]();
  try {
    const resume = await readResume(fromReceiver, recv.result);
    if (!resume.complete) {
      const send = deps.hub.stream(
        req.from,
        "version.send",
        (stream) => ({
          version: req.version,
          stream,
          resume,
          ...(ticket && path.path === "direct"
            ? { direct: { address: path.address, ticket: ticket.ticket, to: req.to } }
            : {}),
        }),
        {
          id: `${req.id}.s${n}`,
          timeoutMs: req.timeoutMs,
          bulk: true,
        },
      );
      try {
        // Direct: the sender's stream carries no bytes, only its end.
        for await (const chunk of send.inbound) if (!ticket) await recv.outbound.write("file", chunk.data);
        if (!ticket) recv.outbound.end();
        await send.result;
      } catch (err) {
        // The receiver keeps what it verified; its result says why it stopped. A direct
        // receiver waiting for its sender stops waiting when its stream ends with an error.
        recv.outbound.end(err instanceof Error ? err.message : String(err));
        await send.result.catch(() => undefined);
        throw ticket
          ? ((await send.result.then(
              () => undefined,
              (e: unknown) => e,
            )) ?? err)
          : await firstFailure(recv.result, err);
      } finally {
        send.close();
      }
    }
    const result = await recv.result;
    return result;
  } finally {
    void drain(fromReceiver);
    recv.close();
  }
}

/** The receiver's first line: what it has. */
async function readResume(
  it: AsyncIterator<{ data: Buffer }>,
  result: Promise<unknown>,
): Promise<TransferResume> {
  let text = "";
  while (!text.includes("\n")) {
    const next = await Promise.race([
      it.next(),
      result.then(() => ({ done: true, value: undefined }) as const),
    ]);
    if (next.done) {
      await result;
      throw new DenvError("conflict", "version transfer: the receiver ended before it said what it has");
    }
    text += next.value.data.toString("utf8");
    if (text.length > 1024 * 1024)
      throw new DenvError("invalid_request", "version transfer: the resume point is too long");
  }
  try {
    return TransferResume.parse(JSON.parse(text.slice(0, text.indexOf("\n"))));
  } catch {
    throw new DenvError("invalid_request", "version transfer: the receiver's resume point does not parse");
  }
}

/** The receiver's own error if it has one (it names the part and the byte), else the relay's. */
async function firstFailure(result: Promise<unknown>, relayErr: unknown): Promise<unknown> {
  const own = await Promise.race([
    result.then(
      () => undefined,
      (e: unknown) => e,
    ),
    new Promise<undefined>((r) => setTimeout(() => r(undefined), 2000).unref()),
  ]);
  return own ?? relayErr;
}

async function drain(it: AsyncIterator<unknown>): Promise<void> {
  try {
    for (;;) if ((await it.next()).done) return;
  } catch {
    // The stream failed after the result: nothing is waiting on it.
  }
}
