import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buffer } from "node:stream/consumers";
import {
  EgressFindings,
  type HostPhaseName,
  Protection,
  ProviderMessages,
  SpecialFileReasons,
} from "@denv/spec";
import { Labels } from "@denv/spec/labels";
import { Sandbox } from "e2b";
import tar from "tar-stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packEntries } from "../../files/tar-pack.js";
import type { PhaseListener } from "../../runtime/phase-listener.js";
import { refusal } from "../testing/refusal.js";
import { E2bRuntime } from "./e2b-runtime.js";
import { type E2bDouble, startE2bDouble } from "./testing/e2b-double.js";
import type { E2bServer } from "./testing/e2b-server.js";

/**
 * E2bRuntime against the E2B test double (real containers on this machine's engine, driven by
 * the real `e2b` SDK). Images come from debian:bookworm-slim, local, never pulled; the only
 * addresses anything connects to are 127.0.0.1 and containers this test made.
 */
const HOST = `h${randomBytes(3).toString("hex")}`;
const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();

let double: E2bDouble;
let server: E2bServer;
let rt: E2bRuntime;
let dir: string;
let canarySandbox: Sandbox;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };

const ENV = "shop/alpha";
const phases: string[] = [];
const recorder: PhaseListener = {
  start: (p: HostPhaseName) => void phases.push(`start ${p}`),
  end: (p: HostPhaseName) => void phases.push(`end ${p}`),
};

async function project(name: string, compose: string): Promise<string> {
  const p = join(dir, name);
  await mkdir(p, { recursive: true });
  await writeFile(
    join(p, "Dockerfile"),
    [
      "FROM debian:bookworm-slim",
      // E2B's base layer gives every template the user "user" (uid 1000 here): the agent is that uid.
      "RUN useradd -o -u 0 -M toor",
      "COPY --chown=user hello.txt /home/user/hello.txt",
      "",
    ].join("\n"),
  );
  await writeFile(join(p, "hello.txt"), "copied at build\n");
  await writeFile(join(p, "compose.yaml"), compose);
  return p;
}

const ONE_SERVICE = `services:
  main:
    build: .
x-denv:
  agent:
    user: "1000"
    workdir: /home/user
`;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "denv-e2b-runtime-"));
  // The canary sandbox the egress test listens in (debian's root; no template build needed).
  double = await startE2bDouble({ templates: { canary: "debian:bookworm-slim" } });
  server = double.server;
  opts = double.connection;
  // A listener in a sandbox on the double's open network: one a sandbox without internet access
  // must not reach, and one that a sandbox with it does (the probe is not blind).
  canarySandbox = await Sandbox.create("canary", opts);
  await canarySandbox.commands.run(
    `perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(Listen => 5, LocalPort => 7777, ReuseAddr => 1) or die; while ($c = $s->accept) { close $c }'`,
    { background: true, user: "root" },
  );
  const canaryIp = docker(
    "inspect",
    "-f",
    "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
    `denv-e2b-${server.id}-${canarySandbox.sandboxId}`,
  );
  rt = await E2bRuntime.open({
    hostId: HOST,
    stateDir: join(dir, "state"),
    connection: opts,
    egressCanaries: [double.canary, { host: canaryIp, port: 7777 }],
  });
  await rt.deploy({
    project: "shop",
    projectDir: await project("shop", ONE_SERVICE),
    command: "cmd-deploy-1",
    onPhase: recorder,
  });
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await double?.close();
  await rm(dir, { recursive: true, force: true });
  expect(double?.leftovers(), "what the test made at the double").toEqual([]);
}, 60_000);

describe("E2bRuntime on the E2B double", { timeout: 60_000 }, () => {
  it("deploys a one-service project as one sandbox from a template of its Dockerfile, labelled, without internet access", async () => {
    expect(phases).toEqual([
      "start validate",
      "end validate",
      "start build",
      "end build",
      "start place",
      "end place",
      "end start",
      "start probe",
      "end probe",
    ]);
    const [env] = (await rt.list()).environments;
    expect(env?.id).toBe(ENV);
    expect(env?.agent).toEqual({ service: "main", user: "1000", workdir: "/home/user" });
    const sandboxId = env?.services[0]?.container_id ?? "";
    const info = await Sandbox.getInfo(sandboxId, opts);
    expect(info.allowInternetAccess).toBe(false);
    expect(info.metadata).toMatchObject({
      [Labels.managed]: "true",
      [Labels.host]: HOST,
      [Labels.project]: "shop",
      [Labels.environment]: ENV,
      [Labels.command]: "cmd-deploy-1",
    });
    expect(env?.services[0]?.image).toMatch(new RegExp(`^denv-${HOST}-shop-[0-9a-f]{16}$`));
    expect(await rt.has(ENV)).toBe(true);
  });

  it("execs as the agent (uid 1000) with exit codes, cwd, env, stdin, streaming, output caps and timeouts; root refused on the resolved uid", async () => {
    const run = (o: Parameters<E2bRuntime["exec"]>[1]) => rt.exec(ENV, o);
    const id = await run({ shell: 'id -u; pwd; cat hello.txt; echo "$GREETING"', env: { GREETING: "hi" } });
    expect(id.stdout.toString()).toBe("1000\n/home/user\ncopied at build\nhi\n");
    expect((await run({ cmd: ["sh", "-c", 'echo "it\'s $0" >&2; exit 7', "quoted arg"] })).exitCode).toBe(7);
    expect((await run({ cmd: ["sh", "-c", 'echo "it\'s $0"', "quoted arg"] })).stdout.toString()).toBe(
      "it's quoted arg\n",
    );
    expect((await run({ cmd: ["no-such-binary"] })).exitCode).toBe(127);
    expect((await run({ cmd: ["cat"], stdin: Buffer.from("piped\n") })).stdout.toString()).toBe("piped\n");
    const streamed: string[] = [];
    const capped = await run({
      shell: "echo one; head -c 100 /dev/zero | tr '\\0' a",
      outputLimit: 10,
      onStdout: (b) => void streamed.push(b.toString()),
    });
    expect(capped.stdout.toString()).toBe("one\naaaaaa");
    expect(capped.truncated).toBe(true);
    expect(streamed.join("")).toBe(`one\n${"a".repeat(100)}`);
    const slow = await run({ cmd: ["sleep", "30"], timeout: 1 });
    expect(slow).toMatchObject({ exitCode: 124, timedOut: true });
    expect(slow.durationMs).toBeLessThan(10_000);
    // What the command moved out of its session (setsid, a double fork) dies with it too.
    const escaping = await run({ shell: "setsid sh -c 'sleep 4343' & (sleep 4344 &); sleep 30", timeout: 1 });
    expect(escaping.timedOut).toBe(true);
    const ps = await run({ shell: "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done" });
    expect(ps.stdout.toString()).not.toMatch(/sleep 434[34]/);

    for (const user of ["root", "0", "0:0", "toor"]) {
      const e = await refusal(run({ cmd: ["id"], user }));
      expect(e.code).toBe("agent_root");
      expect(e.message).toBe(Protection.agentRoot("main"));
    }
    expect((await run({ cmd: ["id", "-un"], user: "1000" })).stdout.toString()).toBe("user\n");
    expect((await refusal(run({ cmd: ["id"], tty: true }))).message).toBe(
      ProviderMessages.unsupportedOption("E2B", "tty", "the runtime does not open E2B PTYs yet"),
    );
  });

  it("puts and gets files as the agent; a device or an escaping symlink is refused before anything is written", async () => {
    const put = await rt.putFiles(
      ENV,
      "/home/user/up",
      await packEntries([
        { name: "d", type: "directory" },
        { name: "d/a.txt", content: "uploaded\n", mode: 0o640 },
        { name: "d/link", type: "symlink", linkname: "a.txt" },
      ]),
    );
    expect(put.entries).toBe(3);
    const seen = await rt.exec(ENV, {
      shell: "stat -c '%U %a' up/d/a.txt; readlink up/d/link; cat up/d/link",
    });
    expect(seen.stdout.toString()).toBe("user 640\na.txt\nuploaded\n");

    const got = await buffer(await rt.getFiles(ENV, "/home/user/up"));
    const entries: Record<string, string> = {};
    const extract = tar.extract();
    extract.on("entry", (h, s, next) => {
      void buffer(s).then((b) => {
        entries[h.name] =
          h.type === "symlink" ? `-> ${h.linkname}` : h.type === "file" ? b.toString() : h.type;
        next();
      });
    });
    extract.end(got);
    await new Promise<void>((r) => extract.on("finish", () => r()));
    expect(entries).toEqual({
      "up/": "directory",
      "up/d/": "directory",
      "up/d/a.txt": "uploaded\n",
      "up/d/link": "-> a.txt",
    });

    const device = await refusal(
      rt.putFiles(
        ENV,
        "/home/user/bad",
        await packEntries([{ name: "ok.txt" }, { name: "null", type: "character-device" }]),
      ),
    );
    expect(device.message).toBe(Protection.specialFile("null", SpecialFileReasons.device));
    const link = await refusal(
      rt.putFiles(
        ENV,
        "/home/user/bad",
        await packEntries([{ name: "evil", type: "symlink", linkname: "../../../etc/passwd" }]),
      ),
    );
    expect(link.message).toBe(Protection.specialFile("evil", SpecialFileReasons.symlinkEscapes));
    expect((await rt.exec(ENV, { cmd: ["ls", "/home/user/bad"] })).exitCode).not.toBe(0);

    await rt.exec(ENV, { cmd: ["mkfifo", "/home/user/pipe"] });
    expect((await refusal(rt.getFiles(ENV, "/home/user/pipe"))).message).toBe(
      Protection.specialFile("/home/user/pipe", SpecialFileReasons.unsupported),
    );
    // A 2 GiB file (sparse: no disk) is over the check's limit by E2B's listing: refused before
    // a byte of it is read, so that what a sandbox holds never has to fit in denvd's memory.
    await rt.exec(ENV, { shell: "mkdir -p big && echo small > big/a.txt && truncate -s 2G big/b.bin" });
    const reads = server.fileReads.length;
    expect((await refusal(rt.getFiles(ENV, "/home/user/big"))).message).toBe(
      Protection.specialFile("/home/user/big/b.bin", SpecialFileReasons.tooLarge),
    );
    expect(server.fileReads.slice(reads)).toEqual([]);
    await rt.exec(ENV, { shell: "rm -r big" });
    expect(
      (await refusal(rt.putFiles(ENV, "/tmp", await packEntries([{ name: "x" }]), { user: "root" }))).code,
    ).toBe("agent_root");
  });

  it("snapshots, forks apart from the original, and leaves nothing in the double after destroy and deleteVersion", async () => {
    await rt.exec(ENV, { shell: "echo before > state.txt" });
    const v = await rt.snapshot(ENV, { number: 1, command: "cmd-snap-1" });
    expect(v).toMatchObject({
      id: "shop@v1",
      project: "shop",
      number: 1,
      host_id: HOST,
      source_environment: ENV,
    });
    const fork = await rt.fork("shop@v1", { name: "fork1", command: "cmd-fork-1" });
    expect(fork).toMatchObject({ id: "shop/fork1", parent_version: "shop@v1" });
    const forkSandbox = fork.services[0]?.container_id ?? "";
    expect((await rt.exec("shop/fork1", { cmd: ["cat", "state.txt"] })).stdout.toString()).toBe("before\n");
    expect((await rt.exec("shop/fork1", { cmd: ["id", "-u"] })).stdout.toString()).toBe("1000\n");
    await rt.exec("shop/fork1", { shell: "echo changed > state.txt" });
    expect((await rt.exec(ENV, { cmd: ["cat", "state.txt"] })).stdout.toString()).toBe("before\n");
    expect((await rt.list()).versions.map((x) => x.id)).toEqual(["shop@v1"]);

    await rt.destroy("shop/fork1");
    expect(server.sandboxes.has(forkSandbox)).toBe(false);
    expect(await rt.has("shop/fork1")).toBe(false);
    await rt.deleteVersion("shop@v1");
    expect(server.snapshots.size).toBe(0);
    expect(
      docker(
        "image",
        "ls",
        "-aq",
        "--filter",
        `label=ai.denv.e2b.server=${server.id}`,
        "--filter",
        "label=ai.denv.e2b.snapshot",
      ),
    ).toBe("");
    expect((await refusal(rt.version("shop@v1"))).code).toBe("not_found");
  });

  it("refuses a file of two services, and verbs E2B has no way to do, before anything is created", async () => {
    const sandboxes = server.sandboxes.size;
    const images = () =>
      docker("image", "ls", "-aq", "--filter", `label=ai.denv.e2b.server=${server.id}`).split("\n").sort();
    const before = images();
    const projectDir = await project(
      "two",
      'services:\n  main:\n    build: .\n  db:\n    image: debian:bookworm-slim\nx-denv:\n  agent:\n    service: main\n    user: "1000"\n',
    );
    const e = await refusal(rt.deploy({ project: "two", projectDir }));
    expect(e.message).toBe(ProviderMessages.lacks("E2B", "multi_service", "a file of 2 services needs"));
    expect(server.sandboxes.size).toBe(sandboxes);
    expect(images()).toEqual(before);
    expect(await rt.has("two/alpha")).toBe(false);

    expect((await refusal(rt.logs(ENV))).message).toMatch(
      /^refused: logs is not available on a host bridging to E2B \(/,
    );
  });

  it("stops an environment by E2B's pause and starts it by a resume, processes and files kept, probed again", async () => {
    const sandboxId = (await rt.list()).environments.find((e) => e.id === ENV)?.services[0]?.container_id;
    const paused = () =>
      docker("inspect", "-f", "{{.State.Paused}}", server.sandboxes.get(sandboxId ?? "")?.containerId ?? "");
    await rt.exec(ENV, { shell: "echo kept > kept.txt; setsid sleep 5151 >/dev/null 2>&1 </dev/null &" });
    phases.length = 0;
    const stopped = await rt.stop(ENV, { onPhase: recorder });
    expect(stopped.status).toBe("stopped");
    expect(phases).toEqual(["start stop", "end stop"]);
    expect(paused()).toBe("true");
    // Stopped: nothing runs in it, and a stop again changes nothing.
    for (const call of [
      () => rt.exec(ENV, { cmd: ["true"] }),
      () => rt.getFiles(ENV, "/home/user/kept.txt"),
      () => rt.snapshot(ENV),
      () => rt.verify(ENV),
    ]) {
      expect((await refusal(call())).message).toBe(ProviderMessages.paused("E2B", ENV));
    }
    expect((await rt.stop(ENV)).status).toBe("stopped");
    expect((await rt.list()).environments.find((e) => e.id === ENV)?.status).toBe("stopped");

    phases.length = 0;
    const started = await rt.start(ENV, { onPhase: recorder });
    expect(started.status).toBe("running");
    expect(phases).toEqual(["start start", "end start", "end health", "start probe", "end probe"]);
    expect(paused()).toBe("false");
    const r = await rt.exec(ENV, {
      shell:
        "cat kept.txt; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -c '^sleep 5151'",
    });
    expect(r.stdout.toString()).toBe("kept\n1\n");
    expect(started.evidence.probe).toMatchObject({ ok: true, findings: [] });
    await rt.exec(ENV, {
      shell:
        "rm kept.txt; for d in /proc/[0-9]*; do grep -q '^sleep.5151' $d/cmdline 2>/dev/null && kill $(basename $d); done; true",
    });
  });

  it("probes egress from inside the sandbox: no canary reached under E2B's policy; a sandbox allowed out is found reaching one", async () => {
    const probe = await rt.probeEgress(ENV);
    expect(probe.findings).toEqual([]);
    expect(probe.ok).toBe(true);
    expect(probe.network).toEqual({
      name: "e2b network policy (allowInternetAccess: false)",
      internal: true,
      reject_rule: false,
    });
    expect(probe.services[0]).toMatchObject({ service: "main", canary_reached: false });
    expect(double.canary.hits()).toBe(0);

    // A service project may allow egress: its sandbox is on the open network, and the same probe
    // reaches the canary sandbox there and says so.
    const open = await rt.deploy({
      project: "svc",
      projectDir: await project("svc", `${ONE_SERVICE}  kind: service\n  egress: allow\n`),
      command: "cmd-deploy-svc",
    });
    try {
      const leak = await rt.probeEgress(open.id);
      expect(leak.ok).toBe(false);
      expect(leak.findings).toEqual([
        ProviderMessages.internetAllowed(open.services[0]?.container_id ?? ""),
        EgressFindings.hostReachable("main"),
      ]);
    } finally {
      await rt.destroy(open.id);
    }
  });

  it("reuses the template of the same content; gc kills a sandbox carrying this host's id that no record owns and keeps the recorded ones", async () => {
    const templates = () =>
      docker(
        "image",
        "ls",
        "-aq",
        "--filter",
        `label=ai.denv.e2b.server=${server.id}`,
        "--filter",
        "label=ai.denv.e2b.template",
      )
        .split("\n")
        .sort();
    const before = templates();
    const digests: Record<string, string>[] = [];
    const beta = await rt.deploy({
      project: "shop",
      environment: "beta",
      projectDir: join(dir, "shop"),
      onPhase: {
        start: () => undefined,
        end: (p, e) =>
          void (p === "build" && digests.push((e as { digests: Record<string, string> }).digests)),
      },
    });
    const alpha = (await rt.list()).environments.find((e) => e.id === ENV);
    expect(digests).toEqual([{ main: alpha?.services[0]?.image }]);
    expect(beta.services[0]?.image_id).toBe(alpha?.services[0]?.image_id);
    expect(templates()).toEqual(before);
    const stray = await Sandbox.create((await rt.list()).environments[0]?.services[0]?.image ?? "", {
      ...opts,
      metadata: { [Labels.managed]: "true", [Labels.host]: HOST, [Labels.command]: "cmd-lost" },
    });
    const other = await Sandbox.create("canary", {
      ...opts,
      metadata: { [Labels.managed]: "true", [Labels.host]: "another-host" },
    });
    // Paused, as a stop leaves a sandbox: gc lists paused ones too.
    await stray.pause();
    try {
      expect(await rt.gc()).toEqual({ removed: [`sandbox ${stray.sandboxId}`] });
      expect(server.sandboxes.has(stray.sandboxId)).toBe(false);
      expect(server.sandboxes.has(other.sandboxId)).toBe(true);
      expect((await rt.exec(ENV, { cmd: ["true"] })).exitCode).toBe(0);
    } finally {
      await other.kill();
    }
    await rt.destroy(ENV);
    await rt.destroy("shop/beta");
    await canarySandbox.kill();
    expect(server.sandboxes.size).toBe(0);
  });
});
