import { performance } from "node:perf_hooks";
import { FakeHost } from "../../../packages/cp/dist/testing/fake-host.js";
import { pool } from "./numbers.js";

/**
 * One process of the load generator (started by load-bench.ts with an IPC channel): a slice of
 * the simulated hosts. Each is the cp's own protocol client for tests (packages/cp's FakeHost):
 * it joins with the join token, dials GET /v1/hosts/stream, says hello with what it holds,
 * sends a heartbeat every HEARTBEAT_MS (the protocol's 5 s) and answers commands at once with
 * denvd-shaped results. It exits when its parent goes away.
 */

export type WorkerRequest =
  | { type: "join"; url: string; token: string; names: string[]; concurrency: number }
  | { type: "reconnect"; concurrency: number }
  | { type: "stop" };

export type WorkerReply =
  | { type: "joined"; hosts: Array<{ name: string; id: string }>; ms: number }
  | { type: "reconnected"; ms: number; environments: number; versions: number }
  | { type: "stopped" }
  | { type: "error"; message: string };

const hosts: FakeHost[] = [];

function reply(r: WorkerReply): void {
  process.send?.(r);
}

async function closeAll(): Promise<void> {
  await Promise.all(hosts.map((h) => h.close().catch(() => undefined)));
}

async function handle(m: WorkerRequest): Promise<void> {
  if (m.type === "join") {
    const t0 = performance.now();
    const joined = await pool(m.names, m.concurrency, async (name) => {
      const h = await FakeHost.join(m.url, m.token, { name, stepDelayMs: 0 });
      await h.connect();
      hosts.push(h);
      return { name, id: h.id };
    });
    reply({ type: "joined", hosts: joined, ms: performance.now() - t0 });
  } else if (m.type === "reconnect") {
    // A fresh connection says hello again, now listing the environments and versions the host
    // holds: the cp reconciles its records against it.
    const t0 = performance.now();
    await pool(hosts, m.concurrency, async (h) => {
      await h.close();
      await h.connect();
    });
    reply({
      type: "reconnected",
      ms: performance.now() - t0,
      environments: hosts.reduce((n, h) => n + h.environments.size, 0),
      versions: hosts.reduce((n, h) => n + h.versions.size, 0),
    });
  } else {
    await closeAll();
    reply({ type: "stopped" });
    process.exit(0);
  }
}

process.on("message", (m: WorkerRequest) => {
  handle(m).catch((err: Error) => reply({ type: "error", message: err.stack ?? err.message }));
});
// The parent died or let go: nothing to simulate for.
process.on("disconnect", () => {
  void closeAll().finally(() => process.exit(0));
});
