import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
// The control plane's own test server for Hetzner's API (a test helper, not the cp's code).
import { HetznerTestServer } from "../../../cp/src/testing/hetzner-server.js";
import { hostMirrors } from "../../../denvd/src/build/host-mirrors.js";
import {
  type DaytonaDouble,
  startDaytonaDouble,
} from "../../../denvd/src/providers/daytona/testing/daytona-double.js";
import { runnableLines } from "./doc-blocks.js";
import { waitUntil } from "./fixture-procs.js";
import { type Hosts, startHosts } from "./hosts-fixture.js";
import { bootMachine, type Machine, machineRootfs } from "./machine.js";
import { cli, repo, run as runProc } from "./stack.js";

/**
 * Provisioned machines, from what the control plane gives a new machine to graded episodes.
 *
 * - hetzner: a target (against a Hetzner Cloud API on loopback) creates a server; the test, in
 *   the cloud's place, boots a fresh machine with that server's user data (machine.ts: Debian 13
 *   with Docker, Node.js and cloud-init, nothing of denv); cloud-init runs it, the control plane's
 *   install script installs the denvd bundle it serves, joins with the single-use token minted
 *   for that machine and starts denvd; then the quickstart runs there: deploy, two forks, the
 *   agent's fix in one, two verifies (1 and 0).
 * - daytona-docker: connect-a-target.md's block, against the Daytona double, whose sandboxes of
 *   the Docker-capable snapshot are machines booted the same way (no user data: the control plane
 *   installs through the toolbox), and the block runs the whole quickstart there.
 *
 * Each machine reaches the control plane and its package mirrors (machine-mirrors.ts) and
 * nothing else: the quickstart's images build on its own engine from the base image, loaded
 * into it as a cloud image would carry it.
 *
 * The two run at once: they share the fixture's control plane and nothing else.
 */

const HCLOUD_TOKEN = "hcloud-machine-test-0123456789abcdef";

let hz: HetznerTestServer;
let daytona: DaytonaDouble;
let hosts: Hosts;
let machine: Machine | undefined;
let lower: string;
/** The mirrors of the machine image's apt sources: the only hosts beyond the fixture a machine reaches. */
let mirrors: string[];

beforeAll(async () => {
  [lower] = await Promise.all([
    machineRootfs(),
    (async () => {
      [hz, daytona] = await Promise.all([new HetznerTestServer(HCLOUD_TOKEN).start(), startDaytonaDouble()]);
      hosts = await startHosts({ hosts: [] });
    })(),
  ]);
  mirrors = await hostMirrors(lower);
  // The first machine of the target, created at `targets add` (min_machines=1).
  // The Hetzner API token in HCLOUD_TOKEN, as connect-a-target.md says (never in argv).
  const add = await runProc(
    process.execPath,
    [
      cli,
      "targets",
      "add",
      "hetzner",
      "cloud",
      "location=nbg1",
      "server_type=cx32",
      "min_machines=1",
      "max_machines=1",
      `base_url=${hz.url}`,
    ],
    { ...hosts.env, HCLOUD_TOKEN },
  );
  expect(add.code, add.stderr).toBe(0);
}, 900_000);

afterAll(async () => {
  await machine?.kill();
  await hosts?.close();
  await hz?.close();
  await daytona?.close();
}, 180_000);

it.concurrent("a machine booted from the target's user data installs denvd from the cp, joins and runs the quickstart", async () => {
  // The server the target created, as the cloud has it: its user data is the machine's. The
  // target's reconcile makes its minimum in the background, so `targets add` may answer first.
  for (const until = Date.now() + 60_000; hz.servers.size === 0 && Date.now() < until; ) {
    await new Promise((r) => setTimeout(r, 100));
  }
  expect(hz.servers.size).toBe(1);
  const [server] = [...hz.servers.values()];
  if (server === undefined) throw new Error("no server");
  expect(server.user_data).toMatch(/^#cloud-config\n/);
  machine = await bootMachine(hosts, {
    name: "m1",
    index: 0,
    userData: server.user_data,
    lower,
    mirrors,
  });

  // It joined as its machine, with the denvd bundle the cp serves (checked by the install script too).
  const machines = async () =>
    (
      await hosts.json<{ machines: Array<{ id: string; status: string; host_id?: string }> }>([
        "targets",
        "machines",
        "cloud",
      ])
    ).machines;
  let joined: { id: string; status: string; host_id?: string } | undefined;
  for (let i = 0; i < 600 && joined === undefined; i++) {
    joined = (await machines()).find((m) => m.status === "joined");
    if (joined === undefined) await new Promise((r) => setTimeout(r, 200));
  }
  expect(joined, machine.logs()).toBeDefined();
  expect(server.name).toBe(joined?.id);
  const served = createHash("sha256")
    .update(Buffer.from(await (await fetch(`${hosts.url}/v1/install/denvd.mjs`)).arrayBuffer()))
    .digest("hex");
  const installed = await machine.exec(["sha256sum", "/usr/local/lib/denv/denvd.mjs"]);
  expect(installed.stdout.split(" ")[0]).toBe(served);
  // The join token was used and its file removed; the token cannot join a second machine.
  expect((await machine.exec(["test", "-e", "/etc/denv/join.env"])).code).toBe(1);
  const hostList = await hosts.json<{ hosts: Array<{ id: string; status: string; target: string }> }>([
    "hosts",
    "list",
  ]);
  expect(hostList.hosts.find((h) => h.id === joined?.host_id)).toMatchObject({
    status: "online",
    target: "cloud",
  });

  // With no systemd on the machine, the install script's loop starts denvd again when it dies.
  const denvdPid = async () => (await machine?.exec(["pgrep", "-x", "node"]))?.stdout.trim() ?? "";
  const before = await denvdPid();
  expect(before).toMatch(/^\d+$/);
  expect((await machine.exec(["pkill", "-KILL", "-x", "node"])).code).toBe(0);
  const hellos = async () =>
    ((await machine?.exec(["cat", "/var/log/denvd.log"]))?.stdout.match(/hello sent/g) ?? []).length;
  for (let i = 0; i < 300 && (await hellos()) < 2; i++) await new Promise((r) => setTimeout(r, 100));
  expect(await hellos(), machine.logs()).toBe(2);
  const after = await denvdPid();
  expect(after).toMatch(/^\d+$/);
  expect(after).not.toBe(before);

  await episode(machine, "cloud", "boot", joined?.host_id as string);
  // Removing the target deletes its server; the cloud then stops the machine.
  const rm = await hosts.denv(["targets", "rm", "cloud", "--force"], { timeoutMs: 300_000 });
  expect(rm.code, rm.stderr).toBe(0);
  expect(hz.servers.size).toBe(0);
}, 600_000);

it.concurrent("how-to/connect-a-target.md's daytona-docker block: a Docker-capable Daytona sandbox installs denvd through the toolbox, joins, runs the whole quickstart (0 then 1), and goes with the target", async () => {
  // Daytona's Docker-capable sandboxes are machines here (no privileged containers): each boots
  // as machine.ts boots one, with no user data (Daytona has none), and the toolbox's execute
  // runs in it as root.
  const booted = new Map<string, Machine>();
  const gone: string[] = [];
  daytona.server.sandboxes.machines = {
    snapshot: "denv-docker",
    boot: async (id) => {
      const m = await bootMachine(hosts, {
        name: `d${booted.size + 1}`,
        index: 10 + booted.size,
        userData: "#cloud-config\n{}\n",
        mirrors,
        lower,
      });
      booted.set(id, m);
    },
    execute: async (id, command, o) => {
      const m = booted.get(id);
      if (!m) throw new Error(`no machine for sandbox ${id}`);
      const env = Object.entries(o.envs).map(([k, v]) => `${k}=${v}`);
      const r = await m.exec(["env", ...env, "sh", "-c", command], { timeoutMs: o.timeoutS * 1000 });
      return { exitCode: r.code, output: r.stdout + r.stderr };
    },
    remove: async (id) => {
      gone.push(id);
      await booted.get(id)?.kill();
    },
  };
  const cpCidr = `${new URL(hosts.url).hostname}/32`;
  const env = {
    ...hosts.env,
    DAYTONA_API_KEY: daytona.apiKey,
    DAYTONA_API_URL: daytona.url,
    DENV_CP_CIDR: cpCidr,
  };
  const sh = (line: string) =>
    runProc(
      "bash",
      ["-c", `denv() { node ${JSON.stringify(cli)} "$@"; }\ncd ${JSON.stringify(repo)}\n${line}`],
      env,
      {
        timeoutMs: 300_000,
      },
    );
  const lines = runnableLines("how-to/connect-a-target.md", "daytona-docker");
  expect(lines.length).toBeGreaterThan(3);
  const machines = async () =>
    (
      await hosts.json<{ machines: Array<{ id: string; status: string; host_id?: string; error?: string }> }>(
        ["targets", "machines", "dind"],
      )
    ).machines;
  let transcript = "";
  for (const [i, { line, code }] of lines.entries()) {
    if (line.includes("targets machines")) {
      // Before the listing: the machine joined (the lines after deploy the quickstart on it).
      let joined: { id: string; status: string; host_id?: string } | undefined;
      await waitUntil("the Daytona machine joined", 300_000, async () => {
        const ms = await machines();
        const failed = ms.find((x) => x.status === "failed");
        if (failed) throw new Error(`machine failed: ${failed.error}`);
        joined = ms.find((x) => x.status === "joined");
        return joined !== undefined;
      });
      const [sandbox] = [...daytona.server.sandboxes.all.values()];
      expect(sandbox).toMatchObject({
        name: joined?.id,
        snapshot: "denv-docker",
        cpu: 4,
        memory: 8,
        disk: 40,
        networkAllowList: cpCidr,
        autoStopInterval: 0,
        labels: { "ai.denv.managed": "true", "ai.denv.target": "dind", "ai.denv.machine": joined?.id },
      });
      const m = booted.get(sandbox?.id ?? "");
      if (!m) throw new Error("the sandbox booted no machine");
      // The install came through the toolbox with the token in its environment, not its text.
      expect(daytona.requests()).toContain(`POST /toolbox/${sandbox?.id}/process/execute`);
      expect((await m.exec(["test", "-x", "/usr/local/lib/denv/denvd.mjs"])).code).toBe(0);
      expect((await m.exec(["test", "-e", "/tmp/denv-install.sh"])).code).toBe(1);
      // The quickstart's images build on the machine's engine from this base (no registry here).
      await m.loadImage("debian:bookworm-slim");
    }
    const r = await sh(line);
    transcript += `$ ${line}\n${r.stdout}${r.stderr}`;
    expect(r.code, `${line}\n${r.stdout}\n${r.stderr}`).toBe(code);
    if (i === 0) expect(r.stdout).toContain("target dind created (daytona-docker)");
  }
  expect(transcript).toContain("daytona-docker targets need the setting snapshot");
  // The whole quickstart on the sandbox's engine: the app reaches db by name, graded 0 then 1.
  expect(transcript).toMatch(/^\$ denv exec shop-dind\/alpha -- getent hosts db\n\S+ +db\b/m);
  const rewards = [...transcript.matchAll(/^\$ denv verify shop-dind\/alpha\nreward +(\S+)\n/gm)].map(
    (x) => x[1],
  );
  expect(rewards, transcript).toEqual(["0", "1"]);
  expect(transcript).toMatch(/joined +daytona-docker\/4cpu-8GiB-40GiB \(billed by Daytona\)/);
  // Removing the target deleted its sandbox (the machine with it) and its host.
  expect(daytona.liveSandboxes()).toBe(0);
  expect(gone).toHaveLength(1);
  const { hosts: left } = await hosts.json<{ hosts: Array<{ target: string }> }>(["hosts", "list"]);
  expect(left.filter((h) => h.target === "dind")).toEqual([]);
}, 600_000);

/**
 * The quickstart on `target`'s machine: deploy (its images built on the machine's engine), fork
 * twice, fix one as the agent, grade both (1 and 0), destroy them.
 */
async function episode(m: Machine, target: string, project: string, hostId: string): Promise<void> {
  await m.loadImage("debian:bookworm-slim");
  const run = (args: string[], input?: string) => hosts.denv(args, { timeoutMs: 300_000, input });
  expect((await run(["projects", "create", project])).code).toBe(0);
  const deploy = await run([
    "deploy",
    path.join(repo, "examples/quickstart"),
    "--project",
    project,
    "--target",
    target,
  ]);
  expect(deploy.code, `${deploy.stderr}\n${m.logs()}`).toBe(0);
  const alpha = await hosts.json<{ host?: string; placement?: { host?: string } }>([
    "env",
    "show",
    `${project}/alpha`,
  ]);
  expect(JSON.stringify(alpha)).toContain(hostId);
  for (const name of ["solved", "untouched"]) {
    const fork = await run(["env", "fork", `${project}/alpha`, "--name", name]);
    expect(fork.code, fork.stderr).toBe(0);
  }
  const fix = readFileSync(path.join(repo, "examples/quickstart/agent/fix.sh"), "utf8");
  const agent = await run(["exec", "-i", `${project}/solved`, "--", "bash", "-s"], fix);
  expect(agent.code, `${agent.stdout}\n${agent.stderr}\n${m.logs()}`).toBe(0);
  expect(agent.stdout).toContain("as agent (uid 1000)");
  const reward = async (e: string) => (await hosts.json<{ reward?: number }>(["verify", e])).reward;
  expect(await reward(`${project}/solved`)).toBe(1);
  expect(await reward(`${project}/untouched`)).toBe(0);
  for (const e of ["solved", "untouched", "alpha"])
    expect((await run(["env", "destroy", `${project}/${e}`])).code).toBe(0);
}
