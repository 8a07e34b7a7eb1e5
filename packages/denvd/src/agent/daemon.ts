import { rm } from "node:fs/promises";
import { join } from "node:path";
import type { HostRuntime } from "../runtime/host-runtime.js";
import type { TransferListener } from "../transfer/direct.js";
import { Agent } from "./agent.js";
import { type Backoff, Connection } from "./connection.js";
import type { HostFile } from "./host-file.js";
import { Journal } from "./journal.js";
import type { Log } from "./log.js";
import { reconcile } from "./reconcile.js";

/**
 * What `denvd run` runs once the runtime is open: reconcile the journal, then the agent on a
 * connection to the control plane. Tests start it in-process against a fake control plane.
 */

export interface DaemonOptions {
  runtime: HostRuntime;
  host: Pick<HostFile, "url" | "credential">;
  labels: Record<string, string>;
  /** Caps the memory hello reports (--capacity-memory). */
  capacityMemory?: number;
  /** IP:PORT for direct version transfers from other hosts (--transfer-listen). */
  transferListen?: { host: string; port: number } | undefined;
  log: Log;
  heartbeatMs?: number;
  backoff?: Backoff;
}

export interface Daemon {
  agent: Agent;
  /** Stops taking commands, waits up to graceMs for running ones, closes the socket. */
  stop(graceMs?: number): Promise<void>;
}

const PRUNE_EVERY_MS = 60 * 60 * 1000;

export async function startDaemon(o: DaemonOptions): Promise<Daemon> {
  const stateDir = o.runtime.stateDir;
  const tmpDir = join(stateDir, "tmp");
  // Deploy sources of commands a crash interrupted.
  await rm(tmpDir, { recursive: true, force: true });
  const journal = await Journal.open(join(stateDir, "journal"));
  // Before the socket opens: a re-sent command must find its crash already settled.
  await reconcile(o.runtime, journal, o.log);
  const pruned = await journal.prune();
  if (pruned > 0) o.log("journal pruned", { removed: pruned });
  const prune = setInterval(() => void journal.prune().catch(() => undefined), PRUNE_EVERY_MS);
  prune.unref();

  let transfer: TransferListener | undefined;
  if (o.transferListen) {
    const { TransferListener } = await import("../transfer/direct.js");
    transfer = await TransferListener.open(o.transferListen, o.log);
    o.log("transfer listener open", { address: transfer.address });
  }
  const agent = new Agent({
    runtime: o.runtime,
    journal,
    labels: o.labels,
    capacityMemory: o.capacityMemory,
    log: o.log,
    tmpDir,
    transfer,
  });
  const connection = new Connection({
    url: o.host.url,
    credential: o.host.credential,
    log: o.log,
    ...(o.heartbeatMs !== undefined ? { heartbeatMs: o.heartbeatMs } : {}),
    ...(o.backoff ? { backoff: o.backoff } : {}),
    handlers: {
      onOpen: (send) => void agent.connected(send),
      onFrame: (frame) => agent.handle(frame),
      onClose: (reason) => agent.disconnected(reason),
    },
  });
  connection.start();
  return {
    agent,
    async stop(graceMs = 10_000) {
      const left = await agent.drain(graceMs);
      if (left > 0)
        o.log("stopping with commands running", { running: left, note: "reconciled at the next start" });
      clearInterval(prune);
      await connection.stop();
      await transfer?.close();
    },
  };
}
