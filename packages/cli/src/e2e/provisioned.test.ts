import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
// The control plane's own test server for Hetzner's API (a test helper, not the cp's code).
import { HetznerTestServer } from "../../../cp/src/testing/hetzner-server.js";
import { type Hosts, startHosts } from "./hosts-fixture.js";
import { bootMachine, type Machine, machineRootfs } from "./machine.js";
import { cli, run as runProc } from "./stack.js";

/**
 * A provisioned machine, from the control plane's cloud-init user data to graded episodes: a
 * `hetzner` target (against a Hetzner Cloud API on loopback) creates a server; the test, in the
 * cloud's place, boots a fresh machine with that server's user data (machine.ts: Debian 13 with
 * Docker, Node.js and cloud-init, nothing of denv); cloud-init runs it, the control plane's
 * install script installs the denvd bundle it serves, joins with the single-use token minted for
 * that machine and starts denvd; then an episode runs there: deploy, two forks, an exec as the
 * agent, two verifies (1 and 0). The machine has no route beyond the fixture's bridge, so the
 * project is one that builds nothing (the quickstart's images install Debian packages, which a
 * machine here cannot fetch): the base image is loaded into its engine as a cloud image would
 * carry it.
 */

const HCLOUD_TOKEN = "hcloud-machine-test-0123456789abcdef";

const PROJECT = `name: boot
services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [data:/data]
  side:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [data:/data]
volumes:
  data: {}
x-denv:
  agent: main
  verifier:
    image: debian:bookworm-slim
    command: ["sh", "-c", 'if [ "$$(cat /submission/workspace/answer)" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt']
    timeout: 60
    submission: [/workspace/answer]
`;

let hz: HetznerTestServer;
let hosts: Hosts;
let machine: Machine | undefined;
let dir: string;
let lower: string;

beforeAll(async () => {
  [lower] = await Promise.all([
    machineRootfs(),
    (async () => {
      hz = await new HetznerTestServer(HCLOUD_TOKEN).start();
      hosts = await startHosts({ hosts: [] });
    })(),
  ]);
  dir = mkdtempSync(path.join(os.tmpdir(), "denv-machine-"));
  mkdirSync(path.join(dir, "boot"));
  writeFileSync(path.join(dir, "boot", "compose.yaml"), PROJECT);
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
  if (dir) rmSync(dir, { recursive: true, force: true });
}, 180_000);

it("a machine booted from the target's user data installs denvd from the cp, joins and runs episodes", async () => {
  // The server the target created, as the cloud has it: its user data is the machine's. The
  // target's reconcile makes its minimum in the background, so `targets add` may answer first.
  for (const until = Date.now() + 60_000; hz.servers.size === 0 && Date.now() < until; ) {
    await new Promise((r) => setTimeout(r, 100));
  }
  expect(hz.servers.size).toBe(1);
  const [server] = [...hz.servers.values()];
  if (server === undefined) throw new Error("no server");
  expect(server.user_data).toMatch(/^#cloud-config\n/);
  machine = await bootMachine(hosts, { name: "m1", index: 0, userData: server.user_data, lower });

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

  // An episode on it: deploy to the target, fork twice, solve one, grade both.
  await machine.loadImage("debian:bookworm-slim");
  const run = (args: string[]) => hosts.denv(args, { timeoutMs: 300_000 });
  expect((await run(["projects", "create", "boot"])).code).toBe(0);
  const deploy = await run(["deploy", path.join(dir, "boot"), "--project", "boot", "--target", "cloud"]);
  expect(deploy.code, `${deploy.stderr}\n${machine.logs()}`).toBe(0);
  const alpha = await hosts.json<{ host?: string; placement?: { host?: string } }>([
    "env",
    "show",
    "boot/alpha",
  ]);
  expect(JSON.stringify(alpha)).toContain(joined?.host_id as string);
  for (const name of ["solved", "untouched"]) {
    const fork = await run(["env", "fork", "boot/alpha", "--name", name]);
    expect(fork.code, fork.stderr).toBe(0);
  }
  const agent = await run(["exec", "boot/solved", "--", "sh", "-c", "id -u; echo 42 > /workspace/answer"]);
  expect(agent.code, `${agent.stdout}\n${agent.stderr}\n${machine.logs()}`).toBe(0);
  expect(agent.stdout.trim()).toBe("1000");
  const reward = async (e: string) => (await hosts.json<{ reward?: number }>(["verify", e])).reward;
  expect(await reward("boot/solved")).toBe(1);
  expect(await reward("boot/untouched")).toBe(0);

  // Removing the target deletes its server; the cloud then stops the machine.
  for (const e of ["boot/solved", "boot/untouched", "boot/alpha"])
    expect((await run(["env", "destroy", e])).code).toBe(0);
  const rm = await run(["targets", "rm", "cloud", "--force"]);
  expect(rm.code, rm.stderr).toBe(0);
  expect(hz.servers.size).toBe(0);
}, 600_000);
