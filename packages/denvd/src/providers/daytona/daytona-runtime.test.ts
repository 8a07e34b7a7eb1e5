import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buffer } from "node:stream/consumers";
import { Daytona } from "@daytonaio/sdk";
import { EgressFindings, Protection, ProviderMessages, SpecialFileReasons } from "@denv/spec";
import { Labels } from "@denv/spec/labels";
import tar from "tar-stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packEntries } from "../../files/tar-pack.js";
import { refusal } from "../testing/refusal.js";
import { DaytonaRuntime } from "./daytona-runtime.js";
import { type DaytonaDouble, startDaytonaDouble } from "./testing/daytona-double.js";

/**
 * DaytonaRuntime against the Daytona test double (real containers on this machine's engine,
 * driven by the real `@daytonaio/sdk`). Images come from debian:bookworm-slim, local, never
 * pulled; the only addresses anything connects to are 127.0.0.1, the double's own bridge network
 * and containers this test made.
 */
const HOST = `h${randomBytes(3).toString("hex")}`;
const ENV = "shop/alpha";

let double: DaytonaDouble;
let rt: DaytonaRuntime;
let dir: string;
let canary: Server;
let hits = 0;

const DOCKERFILE = [
  "FROM debian:bookworm-slim",
  "RUN useradd -m -u 1000 agent && useradd -M -u 1001 grader && useradd -o -u 0 -M toor",
  "COPY --chown=1000 hello.txt /home/agent/hello.txt",
  "",
].join("\n");

/** A verifier that grades /home/agent/answer, and says who it ran as. */
const CHECK = `id -u
test "$(id -u)" = 1001 && test "$(cat /submission/home/agent/answer)" = 42 && echo 1 > "$REWARD_DIR/reward.txt" || echo 0 > "$REWARD_DIR/reward.txt"
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

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "denv-daytona-runtime-"));
  double = await startDaytonaDouble();
  // A listener on the double's open bridge network: a sandbox with networkBlockAll must not reach
  // it, one without does (the probe is not blind).
  canary = createServer((s) => {
    hits += 1;
    s.destroy();
  });
  await new Promise<void>((r) => canary.listen(0, double.gateway, r));
  rt = await DaytonaRuntime.open({
    hostId: HOST,
    stateDir: join(dir, "state"),
    connection: { apiKey: double.apiKey, apiUrl: double.url },
    egressCanaries: [{ host: double.gateway, port: (canary.address() as { port: number }).port }],
  });
  await rt.deploy({ project: "shop", projectDir: await project("shop", SHOP), command: "cmd-deploy-1" });
}, 240_000);

afterAll(async () => {
  await rt?.release().catch(() => undefined);
  await rt?.close();
  await new Promise<void>((r) => (canary ? canary.close(() => r()) : r()));
  await double?.close();
  await rm(dir, { recursive: true, force: true });
  expect(double?.leftovers(), "what the test made at the double").toEqual([]);
}, 120_000);

describe("DaytonaRuntime on the Daytona double", { timeout: 120_000 }, () => {
  it("deploys a one-service project as one sandbox whose one user is the agent's, its service started, without network", async () => {
    const [env] = (await rt.list()).environments;
    expect(env?.id).toBe(ENV);
    expect(env?.evidence.probe).toMatchObject({ ok: true, findings: [] });
    const sbx = await new Daytona(double.config).get(env?.services[0]?.container_id ?? "");
    expect(sbx.networkBlockAll).toBe(true);
    expect(sbx.labels).toMatchObject({
      [Labels.host]: HOST,
      [Labels.environment]: ENV,
      [Labels.command]: "cmd-deploy-1",
    });
    const r = await rt.exec(ENV, { shell: "id -u; pwd; cat hello.txt; cat /tmp/up" });
    expect(r.stdout.toString()).toBe("1000\n/home/agent\ncopied at build\nup\n");
    expect(hits).toBe(0);
  });

  it("execs as the agent with exit codes, stderr apart, env, stdin and timeouts; another user or root refused", async () => {
    const run = (o: Parameters<DaytonaRuntime["exec"]>[1]) => rt.exec(ENV, o);
    const r = await run({
      cmd: ["sh", "-c", 'echo "out $0 $GREETING"; echo err >&2; exit 7', "it's"],
      env: { GREETING: "hi" },
    });
    expect(r).toMatchObject({ exitCode: 7, timedOut: false });
    expect(r.stdout.toString()).toBe("out it's hi\n");
    expect(r.stderr.toString()).toBe("err\n");
    expect((await run({ cmd: ["cat"], stdin: Buffer.from("piped\n") })).stdout.toString()).toBe("piped\n");
    const slow = await run({ shell: "setsid sh -c 'sleep 4343' & sleep 30", timeout: 1 });
    expect(slow).toMatchObject({ exitCode: 124, timedOut: true });
    const ps = await run({ shell: "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done" });
    expect(ps.stdout.toString()).not.toMatch(/sleep 4343/);
    for (const user of ["root", "0", "toor"]) {
      const e = await refusal(run({ cmd: ["id"], user }));
      expect(e.message).toBe(Protection.agentRoot("main"));
    }
    expect((await refusal(run({ cmd: ["id"], user: "grader" }))).message).toBe(
      ProviderMessages.unsupportedOption(
        "Daytona",
        "user 'grader'",
        "a Daytona sandbox runs every call as its one OS user, here uid 1000 (1000)",
      ),
    );
    expect((await run({ cmd: ["id", "-u"], user: "agent" })).stdout.toString()).toBe("1000\n");
  });

  it("puts and gets files through the special-file check; a FIFO is refused on the way out", async () => {
    const put = await rt.putFiles(
      ENV,
      "/home/agent/up",
      await packEntries([
        { name: "d", type: "directory" },
        { name: "d/a.txt", content: "uploaded\n", mode: 0o640 },
      ]),
    );
    expect(put).toMatchObject({ entries: 2 });
    const check = await rt.exec(ENV, { shell: "stat -c '%u %a' up/d/a.txt; cat up/d/a.txt" });
    expect(check.stdout.toString()).toBe("1000 640\nuploaded\n");
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
    await rt.exec(ENV, { shell: "mkfifo /home/agent/up/pipe" });
    const e = await refusal(rt.getFiles(ENV, "/home/agent/up"));
    expect(e.message).toBe(Protection.specialFile("/home/agent/up/pipe", SpecialFileReasons.fifo));
    await rt.exec(ENV, { shell: "rm /home/agent/up/pipe" });
  });

  it("snapshots the sandbox's filesystem as a version and forks a new sandbox from it, the agent's again", async () => {
    await rt.exec(ENV, { shell: "echo kept > /home/agent/kept.txt" });
    const v = await rt.snapshot(ENV, { command: "cmd-snap-1" });
    expect(v).toMatchObject({ id: "shop@v1", method: "daytona-snapshot", source_environment: ENV });
    const fork = await rt.fork(v.id, { name: "copy", command: "cmd-fork-1" });
    const r = await rt.exec(fork.id, { shell: "id -u; cat kept.txt; cat /tmp/up" });
    expect(r.stdout.toString()).toBe("1000\nkept\nup\n");
    expect(fork.parent_version).toBe(v.id);
    await rt.destroy(fork.id);
    expect(await rt.has(fork.id)).toBe(false);
  });

  it("grades on a sandbox of the verifier's own: the agent stopped with its sandbox, the verifier as uid 1001", async () => {
    await rt.exec(ENV, { shell: "echo 41 > answer; setsid sleep 4545 > /dev/null 2>&1 < /dev/null &" });
    const wrong = await rt.verify(ENV, { command: "cmd-verify-0" });
    expect(wrong).toMatchObject({ status: "graded", reward: 0 });
    await rt.exec(ENV, { shell: "echo 42 > answer" });
    const right = await rt.verify(ENV, { command: "cmd-verify-1" });
    expect(right, right.log).toMatchObject({ status: "graded", reward: 1 });
    expect(right.log).toContain("1001");
    expect(right.evidence.verifier?.isolation).toMatch(/^daytona: a sandbox of its own .* as uid 1001/);
    expect(right.evidence.submission).toEqual([expect.objectContaining({ path: "/home/agent" })]);
    // The episode's sandbox runs again, its service too, and the agent's process is gone.
    const after = await rt.exec(ENV, {
      shell: "cat /tmp/up; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done",
    });
    expect(after.stdout.toString()).toMatch(/^up\n/);
    expect(after.stdout.toString()).not.toMatch(/sleep 4545/);
    // The verify's sandboxes are gone.
    expect(double.liveSandboxes()).toBe(1);
  });

  it("stops and starts an environment with Daytona's stop: processes end, files stay, calls refused meanwhile", async () => {
    const stopped = await rt.stop(ENV);
    expect(stopped.status).toBe("stopped");
    expect((await refusal(rt.exec(ENV, { cmd: ["true"] }))).message).toBe(
      ProviderMessages.paused("Daytona", ENV, "stopped"),
    );
    const started = await rt.start(ENV);
    expect(started.status).toBe("running");
    const r = await rt.exec(ENV, { shell: "cat answer /tmp/up" });
    expect(r.stdout.toString()).toBe("42\nup\n");
  });

  it("refuses up front, creating nothing, what a Daytona sandbox cannot be: several services, a root agent", async () => {
    const before = double.liveSandboxes();
    const two = await project(
      "two",
      'services:\n  main:\n    build: .\n  db:\n    build: .\nx-denv:\n  agent: { user: "1000" }\n',
    );
    expect((await refusal(rt.deploy({ project: "two", projectDir: two }))).message).toBe(
      ProviderMessages.lacks("Daytona", "multi_service", "a file of 2 services needs"),
    );
    // A name the file cannot tell is root (toor is uid 0 in the image): refused on the uid
    // Daytona runs it as, read from the kernel, before any command of the agent's.
    const toor = await project(
      "toor",
      'services:\n  main:\n    build: .\nx-denv:\n  agent: { user: "toor" }\n',
    );
    expect((await refusal(rt.deploy({ project: "toor", projectDir: toor }))).message).toBe(
      Protection.agentRoot("main"),
    );
    // An image that lets the agent write where root takes its programs from in the verify's
    // sandbox (the agent's filesystem): refused before any command of the agent's.
    const open = await project("open", SHOP);
    await writeFile(join(open, "Dockerfile"), `${DOCKERFILE}RUN chmod 777 /usr/bin\n`);
    expect((await refusal(rt.deploy({ project: "open", projectDir: open }))).message).toBe(
      ProviderMessages.agentWritesSystem("main", "1000", "/bin"),
    );
    expect(double.liveSandboxes()).toBe(before);
  });

  it("two deploys of the same content at once share one snapshot: the second takes the first's build", async () => {
    const dir2 = await project("twin", SHOP.replace("echo up", "echo twin"));
    const [a, b] = await Promise.all([
      rt.deploy({ project: "twin", projectDir: dir2, environment: "one" }),
      rt.deploy({ project: "twin", projectDir: dir2, environment: "two" }),
    ]);
    const snapshot = a.services[0]?.image_id ?? "";
    expect(b.services[0]?.image_id).toBe(snapshot);
    const { items } = await new Daytona(double.config).snapshot.list();
    expect(items.filter((s) => s.name === snapshot).map((s) => s.state)).toEqual(["active"]);
    await rt.destroy(a.id);
    await rt.destroy(b.id);
  });

  it("the egress probe is not blind: a sandbox with the network open reaches the canary and fails it", async () => {
    const { probeEgress } = await import("./daytona-materialize.js");
    const client = new Daytona(double.config);
    const [env] = (await rt.list()).environments;
    const open = await client.create({
      snapshot: env?.services[0]?.image_id ?? "",
      user: "1000",
      networkBlockAll: false,
    });
    try {
      const probe = await probeEgress(
        {
          hostId: HOST,
          client,
          records: undefined as never,
          inFlight: new Set(),
          canaries: [{ host: double.gateway, port: (canary.address() as { port: number }).port }],
          log: () => undefined,
        },
        open,
        "main",
      );
      expect(probe.ok).toBe(false);
      expect(probe.findings).toContain(EgressFindings.hostReachable("main"));
    } finally {
      await open.delete();
    }
  });

  it("gc deletes a labelled sandbox no record owns; release gives back everything", async () => {
    const client = new Daytona(double.config);
    const [env] = (await rt.list()).environments;
    const stray = await client.create({
      snapshot: env?.services[0]?.image_id ?? "",
      labels: { [Labels.managed]: "true", [Labels.host]: HOST, [Labels.command]: "cmd-crashed" },
    });
    const { removed } = await rt.gc();
    expect(removed).toContain(`sandbox ${stray.id}`);
    const released = await rt.release();
    expect(released.removed).toContain(`environment ${ENV} (sandbox ${env?.services[0]?.container_id})`);
    expect(double.liveSandboxes()).toBe(0);
    expect((await rt.list()).environments).toEqual([]);
  });
});
