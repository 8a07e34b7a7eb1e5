import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buffer } from "node:stream/consumers";
import { EgressFindings, Protection, ProviderMessages, SpecialFileReasons } from "@denv/spec";
import { Labels } from "@denv/spec/labels";
import tar from "tar-stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packEntries } from "../../files/tar-pack.js";
import { type Canary, gatewayOf, startCanary } from "../testing/double-fixtures.js";
import { refusal } from "../testing/refusal.js";
import { PrimeApi } from "./prime-api.js";
import { primeLabels } from "./prime-materialize.js";
import { PrimeRuntime } from "./prime-runtime.js";
import { type PrimeDouble, startPrimeDouble } from "./testing/prime-double.js";

/**
 * PrimeRuntime against the Prime double (Prime's REST API and gateway on 127.0.0.1, sandboxes as
 * real containers on this machine's engine, images built by Prime's image API as docker builds of
 * debian:bookworm-slim, never pulled). One environment is deployed once and shared; the only
 * addresses anything connects to are 127.0.0.1 and containers this test made.
 */
const HOST = `h${randomBytes(3).toString("hex")}`;
const ENV = "shop/alpha";

let double: PrimeDouble;
let api: PrimeApi;
let rt: PrimeRuntime;
let dir: string;
/** A listener on the gateway of the double's open network: a sandbox with egress reaches it. */
let gateway: Canary;
/** shop@v1's checkpoint, kept at its deleteVersion as its sandbox's newest. */
let tipDeleted = "";

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

/** The double's sandboxes of this host that are not deleted. */
function liveSandboxes(): string[] {
  return [...double.server.sandboxes.all.values()]
    .filter((s) => s.status !== "TERMINATED" && s.labels.includes(`${Labels.host}=${HOST}`))
    .map((s) => s.id);
}

/** The ids a docker listing prints. */
function docker(...args: string[]): string[] {
  return execFileSync("docker", args, { encoding: "utf8" }).split("\n").filter(Boolean);
}

/** Containers of the double's engine with this label (key=value). */
const containers = (label: string) => docker("ps", "-a", "-q", "--filter", `label=${label}`);

const sh = (shell: string, env = ENV) => rt.exec(env, { shell });

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "denv-prime-runtime-"));
  double = await startPrimeDouble();
  api = new PrimeApi(double.connection);
  gateway = await startCanary(gatewayOf(`denv-prime-${double.server.id}-open`));
  rt = await PrimeRuntime.open({
    hostId: HOST,
    stateDir: join(dir, "state"),
    connection: double.connection,
    egressCanaries: [double.canary, gateway],
  });
  await rt.deploy({ project: "shop", projectDir: await project("shop", SHOP), command: "cmd-deploy-1" });
}, 120_000);

afterAll(async () => {
  await rt?.release().catch(() => undefined);
  await rt?.close();
  await gateway?.close();
  await double?.close();
  await rm(dir, { recursive: true, force: true });
  expect(double?.leftovers(), "what the test made at the double").toEqual([]);
}, 60_000);

describe("PrimeRuntime on the Prime double", { timeout: 60_000 }, () => {
  it("deploys a one-service project as one labelled sandbox of an image Prime built, egress shut, as the agent", async () => {
    const [env] = (await rt.list()).environments;
    expect(env?.id).toBe(ENV);
    expect(env?.evidence.probe).toMatchObject({ ok: true, findings: [] });
    expect(double.canary.hits()).toBe(0);
    expect(gateway.hits()).toBe(0);
    const sbx = await api.getSandbox(env?.services[0]?.container_id ?? "");
    expect(sbx.labels).toEqual(
      expect.arrayContaining(
        primeLabels({ [Labels.host]: HOST, [Labels.environment]: ENV, [Labels.command]: "cmd-deploy-1" }),
      ),
    );
    expect(double.server.sandboxes.get(sbx.id).timeoutMinutes).toBe(1440);
    // The image is the one Prime's image API built of the service's context.
    const builds = [...double.server.images.builds.values()];
    expect(builds.map((b) => b.status)).toEqual(["COMPLETED"]);
    expect(env?.services[0]?.image).toBe(sbx.dockerImage);
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

  it("snapshots as a Prime checkpoint; a fork of it has the parent's files and its service anew; destroy leaves no sandbox, deleteVersion of the newest leaves its checkpoint to gc", async () => {
    await sh("echo kept > /home/agent/kept.txt");
    const v = await rt.snapshot(ENV, { command: "cmd-snap-1" });
    expect(v).toMatchObject({ id: "shop@v1", method: "prime-checkpoint", source_environment: ENV });
    const fork = await rt.fork(v.id, { name: "copy", command: "cmd-fork-1" });
    expect(fork.parent_version).toBe(v.id);
    expect((await sh("id -u; cat kept.txt; cat /tmp/up", fork.id)).stdout.toString()).toBe(
      "1000\nkept\nup\n",
    );
    const forkSandbox = fork.services[0]?.container_id ?? "";
    await rt.destroy(fork.id);
    expect(await rt.has(fork.id)).toBe(false);
    expect(double.server.sandboxes.get(forkSandbox).status).toBe("TERMINATED");
    expect(containers(`${Labels.environment}=shop/copy`)).toEqual([]);
    // The version's checkpoint is the running sandbox's newest, which Prime keeps while it runs:
    // the record goes, and gc deletes the checkpoint once a later one replaces it.
    tipDeleted =
      double.server.sandboxes.get(
        (await api.listSandboxes({ labels: primeLabels({ [Labels.environment]: ENV }) })).sandboxes[0]?.id ??
          "",
      ).tip ?? "";
    await rt.deleteVersion(v.id);
    expect((await rt.list()).versions).toEqual([]);
    expect(double.server.checkpoints.get(tipDeleted).sandboxId).not.toBe(forkSandbox);
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
      /^prime: the fork's sandbox \S+, as uid 1001 \(grader\); \/tests and \/logs\/verifier are that uid's alone$/,
    );
    expect(right.evidence.submission).toEqual([expect.objectContaining({ path: "/home/agent" })]);
    // Each verify's fork is gone; its versions stay.
    expect((await rt.list()).environments.map((e) => e.id)).toEqual([ENV]);
    expect(liveSandboxes()).toHaveLength(1);
  });

  it("refuses stop and start (Prime has no pause), and a volume two services share before anything is made", async () => {
    const noPause = ProviderMessages.noPause("Prime");
    expect((await refusal(rt.stop(ENV))).message).toBe(
      ProviderMessages.unsupportedVerb("Prime", "stop", noPause),
    );
    expect((await refusal(rt.start(ENV))).message).toBe(
      ProviderMessages.unsupportedVerb("Prime", "start", noPause),
    );
    const sandboxes = double.server.sandboxes.all.size;
    const builds = double.server.images.builds.size;
    const shared = await project(
      "shared",
      'services:\n  main:\n    build: .\n    volumes: [data:/data]\n  db:\n    build: .\n    volumes: [data:/data]\nvolumes:\n  data: {}\nx-denv:\n  agent: { service: main, user: "1000" }\n',
    );
    expect((await refusal(rt.deploy({ project: "shared", projectDir: shared }))).message).toBe(
      ProviderMessages.lacks(
        "Prime",
        "shared volumes",
        "volume 'data' of services main, db needs (each service's sandbox has a disk of its own)",
      ),
    );
    expect(double.server.sandboxes.all.size).toBe(sandboxes);
    expect(double.server.images.builds.size).toBe(builds);
  });

  it("the egress probe is not blind: a sandbox Prime lets out reaches the gateway's canary and fails it", async () => {
    const { probeEgress } = await import("./prime-materialize.js");
    const [env] = (await rt.list()).environments;
    const open = await api.createSandbox({ name: "open", dockerImage: env?.services[0]?.image ?? "" });
    try {
      await api.waitRunning(open.id);
      const probe = await probeEgress(
        {
          hostId: HOST,
          api,
          records: undefined as never,
          inFlight: new Set(),
          canaries: [gateway],
          log: () => undefined,
        },
        open.id,
        { name: "agent", uid: 1000 },
        "main",
      );
      expect(probe.ok).toBe(false);
      expect(probe.findings).toContain(EgressFindings.hostReachable("main"));
      expect(gateway.hits()).toBeGreaterThan(0);
    } finally {
      await api.deleteSandbox(open.id);
    }
  });

  it("gc deletes a labelled sandbox no record owns and the checkpoints no version records; settle rolls back a crashed deploy; release gives back everything", async () => {
    const [env] = (await rt.list()).environments;
    const labels = { [Labels.managed]: "true", [Labels.host]: HOST };
    const stray = await api.createSandbox({
      name: "stray",
      dockerImage: env?.services[0]?.image ?? "",
      labels: primeLabels({ ...labels, [Labels.command]: "cmd-crashed" }),
    });
    const crashed = await api.createSandbox({
      name: "crashed",
      dockerImage: env?.services[0]?.image ?? "",
      labels: primeLabels({ ...labels, [Labels.command]: "cmd-deploy-crashed" }),
    });
    await api.waitRunning(stray.id);
    await api.waitRunning(crashed.id);
    expect(await rt.settle({ id: "cmd-deploy-crashed", kind: "env.deploy" })).toEqual({
      done: false,
      rolledBack: true,
    });
    expect(double.server.sandboxes.get(crashed.id).status).toBe("TERMINATED");
    // The verifies' versions stay recorded; the first snapshot's checkpoint, deleted as a version
    // while it was the sandbox's newest, is no one's now.
    const { removed } = await rt.gc();
    expect(removed).toContain(`sandbox ${stray.id}`);
    expect(removed).toContain(`snapshot ${tipDeleted}`);
    expect(double.server.checkpoints.all.has(tipDeleted)).toBe(false);
    // A version whose checkpoint is no running sandbox's newest: deleted at Prime with its image.
    const versions = (await rt.list()).versions.map((v) => v.id);
    expect(versions).toHaveLength(2);
    const [older] = versions;
    const before = new Set(double.server.checkpoints.all.keys());
    await rt.deleteVersion(older ?? "");
    const [gone] = [...before].filter((id) => !double.server.checkpoints.all.has(id));
    expect(gone).toBeDefined();
    expect(docker("image", "ls", "-q", `denv-prime-${double.server.id}:${gone}`)).toEqual([]);
    const released = await rt.release();
    expect(released.removed).toContain(`environment ${ENV} (sandbox ${env?.services[0]?.container_id})`);
    expect(liveSandboxes()).toEqual([]);
    expect([...double.server.checkpoints.all.values()]).toEqual([]);
    expect(containers(`${Labels.host}=${HOST}`)).toEqual([]);
    expect(docker("image", "ls", "-q", `denv-prime-${double.server.id}`)).toEqual([]);
    expect((await rt.list()).environments).toEqual([]);
    expect((await rt.list()).versions).toEqual([]);
  });
});
