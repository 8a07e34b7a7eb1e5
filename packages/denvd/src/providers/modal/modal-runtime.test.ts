import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buffer } from "node:stream/consumers";
import { Protection, ProviderMessages, SpecialFileReasons } from "@denv/spec";
import { Labels } from "@denv/spec/labels";
import type { ModalClient } from "modal";
import tar from "tar-stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packEntries } from "../../files/tar-pack.js";
import { type Canary, gatewayOf, startCanary } from "../testing/double-fixtures.js";
import { refusal } from "../testing/refusal.js";
import { ModalRuntime } from "./modal-runtime.js";
import { type ModalDouble, startModalDouble } from "./testing/modal-double.js";

/**
 * ModalRuntime against the Modal double (Modal's gRPC API on 127.0.0.1 as the official `modal` SDK
 * calls it, sandboxes as real containers on this machine's engine, images built by Modal's image
 * API as docker builds of debian:bookworm-slim, never pulled). One environment is deployed once and
 * shared; the only addresses anything connects to are 127.0.0.1 and containers this test made.
 */
const HOST = `h${randomBytes(3).toString("hex")}`;
const ENV = "shop/alpha";

let double: ModalDouble;
let rt: ModalRuntime;
/** The test's own client of the double, for what the runtime does not make (strays). */
let client: ModalClient;
let dir: string;
const saved = { ...process.env };

const DOCKERFILE = [
  "FROM debian:bookworm-slim",
  "RUN useradd -m -u 1000 agent && useradd -M -u 1001 grader && useradd -o -u 0 -M toor",
  "COPY --chown=1000 hello.txt /home/agent/hello.txt",
  "",
].join("\n");

/** Grades /home/agent/answer, and says what it sees: its uid, the service, the agent's leftovers. */
const CHECK = `seen() { for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < "$f" 2>/dev/null; echo; done | grep -q "$1" && echo 1 || echo 0; }
[ "$(cat /submission/home/agent/answer 2>/dev/null)" = 42 ] && r=1 || r=0
echo "{\\"reward\\": $r, \\"uid\\": $(id -u), \\"service\\": $(seen 'sleep infinit[y]'), \\"left\\": $(seen 'sleep 454[5]')}" > "$REWARD_DIR/reward.json"
`;

const SHOP = `services:
  main:
    build: .
    command: ["sh", "-c", "echo up > /tmp/up; exec sleep infinity"]
    healthcheck: { test: ["CMD-SHELL", "test -f /tmp/up"], interval: 1s, retries: 10 }
    mem_limit: 300m
    cpus: 0.5
x-denv:
  agent: { user: "1000", workdir: /home/agent }
  verifier:
    build: .
    user: "1001"
    command: ["sh", "/tests/check.sh"]
    timeout: 30
    tests: ./tests
    submission: [/home/agent]
`;

async function project(name: string, compose: string): Promise<string> {
  const p = join(dir, name);
  await mkdir(join(p, "tests"), { recursive: true });
  await writeFile(join(p, "Dockerfile"), DOCKERFILE);
  await writeFile(join(p, "hello.txt"), "copied at build\n");
  await writeFile(join(p, "tests", "check.sh"), CHECK);
  await writeFile(join(p, "compose.yaml"), compose);
  return p;
}

/** The double's sandboxes of this host that have not ended. */
function liveSandboxes(): string[] {
  return [...double.server.sandboxes.all.values()]
    .filter((s) => !s.result && s.tags[Labels.host] === HOST)
    .map((s) => s.id);
}

/** The lines a docker listing prints. */
function docker(...args: string[]): string[] {
  return execFileSync("docker", args, { encoding: "utf8" }).split("\n").filter(Boolean);
}

const sh = (shell: string, env = ENV) => rt.exec(env, { shell });

/** A canary on the gateway of the double's open network: a sandbox with egress reaches it. */
let gateway: Canary;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "denv-modal-runtime-"));
  double = await startModalDouble();
  // What a sandbox with egress reaches: 127.0.0.1 inside a sandbox is the sandbox itself.
  gateway = await startCanary(gatewayOf(`denv-modal-${double.server.id}-open`));
  // The SDK reads a profile from ~/.modal.toml: this test's home has none.
  for (const k of Object.keys(process.env)) if (k.startsWith("MODAL_")) delete process.env[k];
  Object.assign(process.env, { HOME: dir, MODAL_CONFIG_PATH: join(dir, ".modal.toml") });
  rt = await ModalRuntime.open({
    hostId: HOST,
    stateDir: join(dir, "state"),
    connection: { ...double.connection, serverUrl: double.server.url },
    egressCanaries: [double.canary, gateway],
  });
  const modal = await import("modal");
  client = new modal.ModalClient(double.connection);
  await rt.deploy({ project: "shop", projectDir: await project("shop", SHOP), command: "cmd-deploy-1" });
}, 180_000);

afterAll(async () => {
  await rt?.release().catch(() => undefined);
  await rt?.close();
  client?.close();
  process.env = saved;
  await gateway?.close();
  await double?.close();
  await rm(dir, { recursive: true, force: true });
  expect(double?.leftovers(), "what the test made at the double").toEqual([]);
}, 60_000);

describe("ModalRuntime on the Modal double", { timeout: 90_000 }, () => {
  it("deploys a one-service project as one tagged sandbox of an image Modal built, blockNetwork, as the agent", async () => {
    const [env] = (await rt.list()).environments;
    expect(env?.id).toBe(ENV);
    expect(env?.evidence.probe).toMatchObject({ ok: true, findings: [] });
    expect(env?.evidence.network).toEqual({ name: "modal blockNetwork: true", subnet: "", internal: true });
    expect(double.canary.hits()).toBe(0);
    expect(gateway.hits()).toBe(0);
    const sbx = double.server.sandboxes.get(env?.services[0]?.container_id ?? "");
    expect(sbx.tags).toMatchObject({
      [Labels.managed]: "true",
      [Labels.host]: HOST,
      [Labels.environment]: ENV,
      [Labels.command]: "cmd-deploy-1",
    });
    expect(env?.services[0]?.image).toBe(sbx.imageId);
    expect(double.server.calls).toContain("ImageGetOrCreate");
    // The service's caps are Modal's hard limits (the double's container caps).
    expect(docker("inspect", "-f", "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}}", sbx.container)).toEqual(
      [`${0.5e9} ${300 * 2 ** 20}`],
    );
    const r = await sh("id -u; pwd; cat hello.txt; cat /tmp/up");
    expect(r.stdout.toString()).toBe("1000\n/home/agent\ncopied at build\nup\n");
  });

  it("execs as the agent with exit codes, env, stdin and timeouts; root on the uid and the verifier's uid refused", async () => {
    const r = await rt.exec(ENV, {
      cmd: ["sh", "-c", 'echo "out $0 $GREETING"; echo err >&2; exit 7', "it's"],
      env: { GREETING: "hi" },
    });
    expect(r).toMatchObject({ exitCode: 7, timedOut: false });
    expect(r.stdout.toString()).toBe("out it's hi\n");
    expect(r.stderr.toString()).toBe("err\n");
    expect((await rt.exec(ENV, { cmd: ["cat"], stdin: Buffer.from("piped\n") })).stdout.toString()).toBe(
      "piped\n",
    );
    expect(await rt.exec(ENV, { shell: "sleep 30", timeout: 1 })).toMatchObject({
      exitCode: 124,
      timedOut: true,
    });
    for (const user of ["root", "0", "toor"]) {
      const e = await refusal(rt.exec(ENV, { cmd: ["id"], user }));
      expect(e.message).toBe(Protection.agentRoot("main"));
    }
    expect((await refusal(rt.exec(ENV, { cmd: ["id"], user: "grader" }))).message).toBe(
      ProviderMessages.agentAsVerifier("main", "grader", 1001),
    );
    expect((await rt.exec(ENV, { cmd: ["id", "-u"], user: "agent" })).stdout.toString()).toBe("1000\n");
  });

  it("puts and gets files as the agent through the special-file check; a FIFO is refused on the way out", async () => {
    const put = await rt.putFiles(
      ENV,
      "/home/agent/up",
      await packEntries([
        { name: "d", type: "directory" },
        { name: "d/a.txt", content: "uploaded\n", mode: 0o640 },
      ]),
    );
    expect(put).toMatchObject({ entries: 2 });
    expect((await sh("stat -c '%u %a' up/d/a.txt; cat up/d/a.txt")).stdout.toString()).toBe(
      "1000 640\nuploaded\n",
    );
    const names: string[] = [];
    const extract = tar.extract();
    extract.on("entry", (h, s, next) => {
      names.push(h.name);
      s.resume();
      s.on("end", next);
    });
    const got = await buffer(await rt.getFiles(ENV, "/home/agent/up"));
    await new Promise<void>((resolve, reject) => {
      extract.on("finish", resolve).on("error", reject);
      extract.end(got);
    });
    expect(names.sort()).toEqual(["up/", "up/d/", "up/d/a.txt"]);
    await sh("mkfifo /home/agent/up/pipe");
    const e = await refusal(rt.getFiles(ENV, "/home/agent/up"));
    expect(e.message).toBe(Protection.specialFile("/home/agent/up/pipe", SpecialFileReasons.fifo));
    await sh("rm -r /home/agent/up");
  });

  it("snapshots as Modal's filesystem snapshot; a fork has the parent's files and its service anew; destroy and deleteVersion leave nothing at Modal", async () => {
    await sh("echo kept > /home/agent/kept.txt");
    const v = await rt.snapshot(ENV, { command: "cmd-snap-1" });
    expect(v).toMatchObject({ id: "shop@v1", method: "modal-filesystem-snapshot", source_environment: ENV });
    const image = v.digests.main ?? "";
    expect(image).toMatch(/^im-/);
    const fork = await rt.fork(v.id, { name: "copy", command: "cmd-fork-1" });
    expect(fork.parent_version).toBe(v.id);
    expect(fork.evidence.probe).toMatchObject({ ok: true });
    expect((await sh("id -u; cat kept.txt; cat /tmp/up", fork.id)).stdout.toString()).toBe(
      "1000\nkept\nup\n",
    );
    const forkSandbox = fork.services[0]?.container_id ?? "";
    await rt.destroy(fork.id);
    expect(await rt.has(fork.id)).toBe(false);
    expect(double.server.sandboxes.get(forkSandbox).result).toBeDefined();
    expect(docker("ps", "-a", "-q", "--filter", `label=${Labels.environment}=shop/copy`)).toEqual([]);
    await rt.deleteVersion(v.id);
    expect((await rt.list()).versions).toEqual([]);
    expect(double.server.images.deleted.has(image)).toBe(true);
  });

  it("grades on a fork, the agent's processes killed first: 0.0 untouched, 1.0 solved, as uid 1001 in the fork's sandbox", async () => {
    await sh("setsid sleep 4545 >/dev/null 2>&1 </dev/null & echo started");
    const wrong = await rt.verify(ENV, { command: "cmd-verify-0" });
    expect(wrong.status, wrong.log).toBe("graded");
    expect(wrong.rewards).toEqual({ reward: 0, uid: 1001, service: 1, left: 0 });
    expect(wrong.evidence.agent?.killed).toBeGreaterThanOrEqual(1);
    const ps = await sh("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done");
    expect(ps.stdout.toString()).not.toContain("sleep 4545");
    expect(ps.stdout.toString()).toContain("sleep infinity");
    await sh("echo 42 > answer");
    const right = await rt.verify(ENV, { command: "cmd-verify-1" });
    expect(right.status, right.log).toBe("graded");
    expect(right.rewards).toEqual({ reward: 1, uid: 1001, service: 1, left: 0 });
    expect(right.evidence.agent).toEqual({ killed: 0, survivors: 0 });
    expect(right.evidence.verifier?.isolation).toMatch(
      /^modal: the fork's sandbox \S+, as uid 1001 \(grader\); \/tests and \/logs\/verifier are that uid's alone$/,
    );
    expect(right.evidence.submission).toEqual([expect.objectContaining({ path: "/home/agent" })]);
    // Each verify's fork is gone; its versions stay.
    expect((await rt.list()).environments.map((e) => e.id)).toEqual([ENV]);
    expect(liveSandboxes()).toHaveLength(1);
  });

  it("refuses stop and start (Modal has no pause), a verifier without services, and a file of several services before anything is made", async () => {
    const noPause = ProviderMessages.noPause("Modal");
    expect((await refusal(rt.stop(ENV))).message).toBe(
      ProviderMessages.unsupportedVerb("Modal", "stop", noPause),
    );
    expect((await refusal(rt.start(ENV))).message).toBe(
      ProviderMessages.unsupportedVerb("Modal", "start", noPause),
    );
    const sandboxes = double.server.sandboxes.all.size;
    const calls = double.server.calls.filter((c) => c === "ImageGetOrCreate").length;
    const two = await project(
      "two",
      'services:\n  main:\n    build: .\n  db:\n    build: .\nx-denv:\n  agent: { user: "1000" }\n',
    );
    expect((await refusal(rt.deploy({ project: "two", projectDir: two }))).message).toBe(
      ProviderMessages.lacks("Modal", "multi_service", "a file of 2 services needs"),
    );
    const filesOnly = await project(
      "files",
      SHOP.replace("    submission:", "    services: false\n    submission:"),
    );
    expect((await refusal(rt.deploy({ project: "files", projectDir: filesOnly }))).message).toBe(
      ProviderMessages.lacks(
        "Modal",
        "a verifier sandbox of its own",
        "x-denv.verifier.services: false needs (a verifier on Modal grades in the fork's sandbox, as its own uid: drop services: false)",
      ),
    );
    expect(double.server.sandboxes.all.size).toBe(sandboxes);
    expect(double.server.calls.filter((c) => c === "ImageGetOrCreate").length).toBe(calls);
  });

  it("gc terminates a tagged sandbox no record owns; settle rolls back a crashed deploy; release gives back every sandbox and snapshot", async () => {
    const [env] = (await rt.list()).environments;
    const app = await client.apps.fromName(`denv-${HOST}`);
    const image = await client.images.fromId(env?.services[0]?.image ?? "");
    const tags = { [Labels.managed]: "true", [Labels.host]: HOST };
    const stray = await client.sandboxes.create(app, image, { tags: { ...tags, [Labels.command]: "cmd-x" } });
    const crashed = await client.sandboxes.create(app, image, {
      tags: { ...tags, [Labels.command]: "cmd-deploy-crashed" },
    });
    expect(await rt.settle({ id: "cmd-deploy-crashed", kind: "env.deploy" })).toEqual({
      done: false,
      rolledBack: true,
    });
    expect(double.server.sandboxes.get(crashed.sandboxId).result).toBeDefined();
    const { removed } = await rt.gc();
    expect(removed).toEqual([`sandbox ${stray.sandboxId}`]);
    expect(liveSandboxes()).toEqual([env?.services[0]?.container_id]);
    // The two verifies' versions: their snapshot images go with them.
    const versions = (await rt.list()).versions;
    const images = versions.map((v) => v.digests.main ?? "");
    expect(images).toHaveLength(2);
    const released = await rt.release();
    expect(released.removed).toEqual(
      expect.arrayContaining([
        `environment ${ENV} (sandbox ${env?.services[0]?.container_id})`,
        ...versions.map((v) => `version ${v.id} (image ${v.digests.main})`),
      ]),
    );
    for (const i of images) expect(double.server.images.deleted.has(i)).toBe(true);
    expect(liveSandboxes()).toEqual([]);
    expect(docker("ps", "-a", "-q", "--filter", `label=${Labels.host}=${HOST}`)).toEqual([]);
    expect((await rt.list()).environments).toEqual([]);
    expect((await rt.list()).versions).toEqual([]);
  });
});
