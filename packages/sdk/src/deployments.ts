import { Deployment, Phase } from "@denv/spec";
import { DenvApiError, DenvUnreachableError } from "./errors.js";
import type { Transport } from "./http.js";
import { parseBody } from "./http.js";
import { parseEventStream } from "./sse.js";

/** An event of a deployment's log (GET /v1/deployments/:id/log). */
export type DeploymentEvent = (
  | { type: "phase"; phase: Phase }
  | { type: "log"; line: string }
  | { type: "done"; deployment: Deployment }
) & {
  /** The event's sequence number, when the control plane numbers them (SSE `id:`). */
  seq?: number;
};

export interface FollowOptions {
  /** Called when a phase changes status (once per change, also across reconnects). */
  onPhase?: (phase: Phase) => void;
  /** Called for each log line of the deployment. */
  onLog?: (line: string) => void;
  signal?: AbortSignal;
  /** How many times a dropped stream is reopened before giving up (default 5). */
  retries?: number;
}

export const isFinished = (d: Deployment): boolean => d.status === "succeeded" || d.status === "failed";

/**
 * The events of one connection to the log route: the past first (after `afterSeq` when the
 * server numbers its events and honours Last-Event-ID), then live, until `done`.
 */
export async function* deploymentEvents(
  http: Transport,
  id: string,
  signal?: AbortSignal,
  afterSeq?: number,
): AsyncGenerator<DeploymentEvent> {
  const path = `/v1/deployments/${encodeURIComponent(id)}/log`;
  const res = await http.send("GET", path, {
    accept: "text/event-stream",
    ...(afterSeq === undefined ? {} : { headers: { "last-event-id": String(afterSeq) } }),
    signal,
  });
  if (res.body === null) return;
  const what = `GET ${path}`;
  const stream = parseEventStream(readChunks(res.body as AsyncIterable<Uint8Array>, http.url, signal));
  for await (const sse of stream) {
    const seq = sse.id !== undefined && /^\d+$/.test(sse.id) ? { seq: Number(sse.id) } : {};
    if (sse.event === "phase") {
      yield { type: "phase", phase: parseBody(Phase, sse.data, what), ...seq };
    } else if (sse.event === "log") {
      yield { type: "log", line: parseBody({ safeParse: lineOf }, sse.data, what), ...seq };
    } else if (sse.event === "done") {
      yield { type: "done", deployment: parseBody(Deployment, sse.data, what), ...seq };
      return;
    }
    // Other event names are ignored so that the server may add some.
  }
}

/** A connection dropped mid-stream is a network failure like any other. */
async function* readChunks(
  body: AsyncIterable<Uint8Array>,
  url: string,
  signal: AbortSignal | undefined,
): AsyncGenerator<Uint8Array> {
  try {
    yield* body;
  } catch (err) {
    if (signal?.aborted === true) throw err;
    throw new DenvUnreachableError(url, err);
  }
}

function lineOf(value: unknown) {
  const line = (value as { line?: unknown } | null)?.line;
  return typeof line === "string"
    ? { success: true as const, data: line }
    : { success: false as const, error: { issues: [{ path: ["line"], message: "expected a string" }] } };
}

/**
 * Follows a deployment until it finishes and returns its final state. After a dropped
 * connection (a proxy's idle timeout, a control plane restart) it reconnects: with
 * Last-Event-ID when the server numbers its events, and in any case skipping what it has
 * already reported, since the route replays the past on every connection.
 */
export async function waitForDeployment(
  http: Transport,
  id: string,
  options: FollowOptions = {},
): Promise<Deployment> {
  // A phase passes through each status once, so a (phase, status) pair seen before is a replay.
  const seenPhases = new Set<string>();
  let logsSeen = 0;
  let lastSeq: number | undefined;
  let failures = 0;
  const retries = options.retries ?? 5;
  for (;;) {
    let logsThisConnection = 0;
    try {
      for await (const event of deploymentEvents(http, id, options.signal, lastSeq)) {
        if (event.seq !== undefined) {
          if (lastSeq !== undefined && event.seq <= lastSeq) continue;
          lastSeq = event.seq;
        }
        if (event.type === "phase") {
          const key = `${event.phase.name}\u0000${event.phase.status}`;
          if (seenPhases.has(key)) continue;
          seenPhases.add(key);
          options.onPhase?.(event.phase);
        } else if (event.type === "log") {
          // Without sequence numbers, the first lines of a replay are the ones already shown.
          logsThisConnection++;
          if (event.seq === undefined && logsThisConnection <= logsSeen) continue;
          logsSeen = Math.max(logsSeen, logsThisConnection);
          options.onLog?.(event.line);
        } else {
          return event.deployment;
        }
      }
    } catch (err) {
      // Errors of the answer itself (404, 401, a bad body) do not get better by retrying.
      if (options.signal?.aborted === true || !(err instanceof DenvApiError) || err.status !== 0) throw err;
      if (err.code === "invalid_response") throw err;
      if (++failures > retries) throw err;
    }
    // The stream ended without `done`: the deployment may have finished meanwhile.
    const current = await http.json("GET", `/v1/deployments/${encodeURIComponent(id)}`, Deployment);
    if (isFinished(current)) return current;
    await new Promise((r) => setTimeout(r, Math.min(200 * 2 ** failures, 5_000)));
  }
}
