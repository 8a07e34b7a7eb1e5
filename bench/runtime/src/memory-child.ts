import { Runtime } from "@denv/denvd";
import { teardownRuntime } from "./cleanup.js";

/**
 * The process whose memory benchmark 4 measures: it opens a Runtime and idles; on request it
 * deploys the small stack once, snapshots it and forks it until it holds N environments.
 * Talks to the parent over the IPC channel; cleans up after itself when told, on a signal, or
 * when the parent goes away.
 */

export type ChildRequest = { cmd: "hold"; n: number; projectDir: string } | { cmd: "close" };
export type ChildReply =
  | { type: "ready"; pid: number; openMs: number }
  | { type: "held"; n: number; ms: number }
  | { type: "closed"; problems: string[] }
  | { type: "error"; message: string };

const hostId = process.env.BENCH_HOST_ID ?? "";
const stateDir = process.env.BENCH_STATE_DIR ?? "";

function send(m: ChildReply): void {
  if (process.connected) process.send?.(m);
}

const t0 = Date.now();
const rt = await Runtime.open({ hostId, stateDir });
let closing: Promise<string[]> | undefined;
const close = (): Promise<string[]> => {
  closing ??= teardownRuntime(rt, stateDir);
  return closing;
};

for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.once(sig, () => {
    void close().finally(() => process.exit(130));
  });
}
process.on("disconnect", () => {
  void close().finally(() => process.exit(0));
});

process.on("message", (m: ChildRequest) => {
  void (async () => {
    try {
      if (m.cmd === "hold") {
        const started = Date.now();
        const first = await rt.deploy({ project: "mem", environment: "e0", projectDir: m.projectDir });
        if (m.n > 1) {
          const v = await rt.snapshot(first.id);
          for (let i = 1; i < m.n; i++) await rt.fork(v.id, { name: `e${i}` });
        }
        send({ type: "held", n: (await rt.host.records.environments()).length, ms: Date.now() - started });
      } else if (m.cmd === "close") {
        const problems = await close();
        send({ type: "closed", problems });
        process.disconnect?.();
        process.exit(0);
      }
    } catch (err) {
      send({ type: "error", message: (err as Error).message });
    }
  })();
});

send({ type: "ready", pid: process.pid, openMs: Date.now() - t0 });
