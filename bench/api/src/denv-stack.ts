import { readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { DenvClient, packTar } from "@denv/sdk";
import { cli, removeHostLeftovers, type Stack, startStack } from "../../../packages/cli/dist/e2e/stack.js";
import { run } from "../../runtime/dist/host.js";

/**
 * A whole denv for the exec and fork benchmarks: `denv up` (control plane + denvd, background
 * processes) with a temporary data dir, via the CLI's full-stack test helper
 * (packages/cli/src/e2e/stack.ts), and the bench's small stack deployed through the API as
 * `bench/alpha`.
 */

export const PROJECT = "bench";
export const ENV = `${PROJECT}/alpha`;

export interface BenchStack {
  stack: Stack;
  client: DenvClient;
  hostId: string;
  /** The agent service's container of bench/alpha. */
  containerId: string;
  agent: { service: string; user: string; workdir: string };
  deployMs: number;
}

async function stackDirs(dir: string): Promise<string[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  return names.filter((n) => n.startsWith("denv-stack-")).map((n) => join(dir, n));
}

/**
 * Starts the stack with TMPDIR pointing at `privateTmp` (a directory of this run only): its data
 * dir, and whatever the cp and denvd put in their temporary directory, land there. If `denv up`
 * itself fails, the data dir it made (startStack does not return it then) is taken down here.
 */
export async function startBenchStack(
  smallDir: string,
  privateTmp: string,
  track: (s: Stack) => void,
): Promise<BenchStack> {
  const tmpBefore = process.env.TMPDIR;
  let stack: Stack;
  try {
    process.env.TMPDIR = privateTmp;
    stack = await startStack();
  } catch (err) {
    for (const dir of await stackDirs(privateTmp)) await downLeftoverStack(dir);
    throw err;
  } finally {
    if (tmpBefore === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = tmpBefore;
  }
  track(stack);
  const client = new DenvClient({ url: stack.url, token: stack.token });
  await client.createProject({ name: PROJECT });
  const t0 = performance.now();
  const d = await client.deploy(PROJECT, { tar: packTar(smallDir, { name: "." }) }, { wait: true });
  const deployMs = performance.now() - t0;
  if (d.status !== "succeeded") throw new Error(`deploy of ${ENV} ${d.status}: ${d.error?.message ?? ""}`);
  const env = await client.getEnvironment(ENV);
  if (!env.agent) throw new Error(`${ENV} has no agent`);
  const container = env.services.find((s) => s.name === env.agent?.service)?.container_id;
  if (!container) throw new Error(`${ENV} has no container for ${env.agent.service}`);
  return { stack, client, hostId: stack.hostId(), containerId: container, agent: env.agent, deployMs };
}

/** What `stack.close()` would do, for a data dir whose `denv up` failed half way. */
async function downLeftoverStack(dataDir: string): Promise<void> {
  await run(process.execPath, [cli, "down", "--data-dir", dataDir]).catch(() => undefined);
  const hostFile = join(dataDir, "denvd", "host.json");
  const host = await readFile(hostFile, "utf8").then(
    (t) => (JSON.parse(t) as { host_id?: string }).host_id,
    () => undefined,
  );
  if (host) await removeHostLeftovers(host, join(dataDir, "denvd"));
  await rm(dataDir, { recursive: true, force: true });
}
