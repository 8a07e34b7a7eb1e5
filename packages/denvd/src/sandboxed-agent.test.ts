import { spawn } from "node:child_process";
import { HostRefusals, Protection } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { requireEnvironment } from "./runtime/host-context.js";
import type { Runtime } from "./runtime/runtime.js";
import { hostListener, leftovers, openTestRuntime, writeProject } from "./testing/harness.js";

/**
 * An agent that must be root, confined by gVisor (x-denv.agent.sandbox: gvisor): root inside
 * gVisor's kernel, nothing on the host. The attack rows of protections 1 and 5 hold for it, its
 * processes are stopped through runsc (never by host pid), and snapshot, fork and a root
 * verifier work on it.
 */

const COMPOSE = `
services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    volumes: [data:/data]
  kv:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
volumes:
  data: {}
x-denv:
  agent: {service: main, user: root, workdir: /app, sandbox: gvisor}
  verifier:
    image: debian:bookworm-slim
    user: root
    command: >-
      test "$$(cat /submission/app/answer)" = 42 &&
      test "$$(stat -c %u /submission/app/answer)" = 0 &&
      echo 1 > $$REWARD_DIR/reward.txt || echo 0 > $$REWARD_DIR/reward.txt
    submission: [/app]
`;

describe("a root agent confined by gVisor", () => {
  let rt: Runtime & AsyncDisposable;
  const env = "caged/alpha";
  let listener: Awaited<ReturnType<typeof hostListener>>;

  beforeAll(async () => {
    rt = await openTestRuntime();
    listener = await hostListener();
    const dir = await writeProject({ "compose.yaml": COMPOSE });
    await rt.deploy({ project: "caged", projectDir: dir });
  }, 240_000);
  afterAll(async () => {
    await listener.close();
    await rt[Symbol.asyncDispose]();
  });

  const sh = async (script: string, o: { user?: string; timeout?: number; service?: string } = {}) => {
    const r = await rt.exec(env, { shell: script, ...o });
    return { code: r.exitCode, out: r.stdout.toString().trim(), err: r.stderr.toString().trim() };
  };

  it("is root inside gVisor's kernel, and the evidence says what confined it", async () => {
    expect(await sh("id -u")).toMatchObject({ code: 0, out: "0" });
    // gVisor's kernel answers, not the host's.
    expect((await sh("uname -r")).out).not.toBe((await import("node:os")).release());
    const rec = await requireEnvironment(rt.host, env);
    // What placement counts the environment as using: the sum of its services' caps.
    expect(rec.evidence.caps).toEqual({ memory_bytes: 2 * 2 * 1024 ** 3, cpus: 4, pids: 2048 });
    expect(rec.evidence.agent).toEqual({
      service: "main",
      user: "root",
      uid: 0,
      root: true,
      confinement: "gvisor",
      runtime: "runsc",
    });
    // The other services are plain containers: root stays refused there as anywhere else.
    const kv = await rt.host.docker.containers.inspect(rec.containers.kv as string);
    expect(kv?.hostConfig.runtime).toBe("runc");
    const main = await rt.host.docker.containers.inspect(rec.containers.main as string);
    expect(main?.hostConfig.runtime).toBe("runsc");
  });

  it("does what a task's solution does as root: installs into /usr, owns files, binds port 80", async () => {
    const r = await sh(
      "exec bash -c 'mkdir -p /app && echo 42 > /app/answer && cp /bin/true /usr/local/bin/solved && chown 1000 /data && " +
        "(exec 3<>/dev/tcp/127.0.0.1/1 2>/dev/null; true) && stat -c %u /data'",
    );
    expect(r, r.err).toMatchObject({ code: 0, out: "1000" });
  });

  it("cannot reach the host, see its processes or mount anything", async () => {
    const rec = await requireEnvironment(rt.host, env);
    const gateway = rec.network.gateway;
    const dial = await sh(
      `timeout 5 bash -c 'exec 3<>/dev/tcp/${gateway}/${listener.port}' && echo open || echo closed`,
    );
    expect(dial.out).toBe("closed");
    expect(listener.hits).toEqual([]);
    // Only the sandbox's own processes: the host's init is not there.
    const procs = await sh("cat /proc/[0-9]*/cmdline | tr '\\0' ' '");
    expect(procs.out).toContain("sleep infinity");
    expect(procs.out).not.toMatch(/dockerd|containerd|node/);
    expect((await sh("mount -t tmpfs none /mnt")).code).not.toBe(0);
    // Protection 5 for a sandbox: the probe ran and passed.
    expect(rec.evidence.probe).toMatchObject({ ok: true });
  });

  it("kills what a timed-out exec left in the sandbox and never signals a host pid", async () => {
    const host = spawn("sleep", ["600"], { stdio: "ignore" });
    try {
      const r = await sh("setsid sleep 500 & sleep 300", { timeout: 1 });
      expect(r.code).not.toBe(0);
      const left = await sh(
        "for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\\0' ' '; echo; done",
      );
      expect(left.out).not.toMatch(/sleep (500|300)/);
      expect(host.exitCode).toBeNull();
      expect(host.signalCode).toBeNull();
    } finally {
      host.kill();
    }
  });

  it("snapshots, forks and is graded by a root verifier on a fork, the agent stopped first", async () => {
    await sh("setsid sleep 900 >/dev/null 2>&1 < /dev/null &");
    const result = await rt.verify(env);
    expect(result).toMatchObject({ status: "graded", reward: 1 });
    expect(result.evidence.agent).toBeDefined();
    const left = await sh("for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\\0' ' '; echo; done");
    expect(left.out).not.toMatch(/sleep 900/);
    // A fork of the verified snapshot: the agent's files and its volume are there, root again.
    const fork = await rt.fork(result.version, { name: "again", command: "t" });
    const r = await rt.exec(fork.id, { shell: "cat /app/answer; stat -c %u /data; id -u" });
    expect(r.stdout.toString().split("\n").slice(0, 3)).toEqual(["42", "1000", "0"]);
    const forkRec = await requireEnvironment(rt.host, fork.id);
    expect(forkRec.evidence.agent).toMatchObject({ confinement: "gvisor", root: true });
  }, 240_000);

  it("stops an agent that keeps forking before the verify, through runsc", async () => {
    await sh("setsid bash -c 'while true; do sleep 700 & sleep 0.02; done' >/dev/null 2>&1 < /dev/null &");
    await new Promise((r) => setTimeout(r, 500));
    const result = await rt.verify(env);
    expect(result.status).toBe("graded");
    expect(result.evidence.agent?.killed).toBeGreaterThan(1);
    const left = await sh("for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\\0' ' '; echo; done");
    expect(left.out).not.toMatch(/sleep 700|while true/);
  }, 240_000);

  it("is refused, with nothing created, on an engine without the runtime", async () => {
    const bare = await openTestRuntime({ gvisorRuntime: "denv-no-such-runtime" });
    try {
      const dir = await writeProject({ "compose.yaml": COMPOSE });
      await expect(bare.deploy({ project: "caged", projectDir: dir })).rejects.toThrow(
        HostRefusals.sandboxUnavailable("gvisor", "denv-no-such-runtime"),
      );
      expect(await leftovers(bare)).toBe(0);
    } finally {
      await bare[Symbol.asyncDispose]();
    }
  }, 240_000);

  it("adds SYS_ADMIN of gVisor's kernel when the file asks: namespaces inside, nothing on the host", async () => {
    const dir = await writeProject({
      "compose.yaml": COMPOSE.replace("sandbox: gvisor}", "sandbox: gvisor, capabilities: [SYS_ADMIN]}"),
    });
    const info = await rt.deploy({ project: "admin", projectDir: dir });
    const rec = await requireEnvironment(rt.host, info.id);
    expect(rec.evidence.agent).toMatchObject({ confinement: "gvisor", capabilities: ["SYS_ADMIN"] });
    const run = async (shell: string) => {
      const r = await rt.exec(info.id, { shell });
      return { code: r.exitCode, out: r.stdout.toString().trim(), err: r.stderr.toString().trim() };
    };
    // CAP_SYS_ADMIN is bit 21 of the effective set; the default sandbox (above) has it clear.
    const capEff = (text: string) => BigInt(`0x${/CapEff:\s*([0-9a-f]+)/.exec(text)?.[1] ?? "0"}`);
    expect(capEff((await run("cat /proc/self/status")).out) & (1n << 21n)).toBe(1n << 21n);
    expect(capEff((await sh("cat /proc/self/status")).out) & (1n << 21n)).toBe(0n);
    // A session in a PID namespace of its own (Karotte's), and a mount, both in gVisor's kernel.
    const pidns = await run(
      'unshare --pid --fork --mount-proc sh -c \'echo $$; cat /proc/[0-9]*/cmdline | tr "\\0" " "\'',
    );
    expect(pidns, pidns.err).toMatchObject({ code: 0 });
    expect(pidns.out.split("\n")[0]).toBe("1");
    // The sandbox's own `sleep infinity` is outside the new namespace, so not in its /proc.
    expect(pidns.out).not.toContain("sleep infinity");
    const mounted = await run("mkdir -p /mnt/m && mount -t tmpfs none /mnt/m && stat -f -c %T /mnt/m");
    expect(mounted, mounted.err).toMatchObject({ code: 0, out: "tmpfs" });
    const { readFileSync } = await import("node:fs");
    expect(readFileSync("/proc/mounts", "utf8")).not.toMatch(/ \/mnt\/m /);
    // The attack rows still hold: the host's listener is not reached, its processes not seen.
    const dial = await run(
      `timeout 5 bash -c 'exec 3<>/dev/tcp/${rec.network.gateway}/${listener.port}' && echo open || echo closed`,
    );
    expect(dial.out).toBe("closed");
    expect(listener.hits).toEqual([]);
    expect((await run("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")).out).not.toMatch(/dockerd|containerd|node/);
    await rt.destroy(info.id);
  }, 240_000);

  it("grades an environment whose sandbox died: there is no agent process left to stop", async () => {
    const dir = await writeProject({ "compose.yaml": COMPOSE });
    const info = await rt.deploy({ project: "died", projectDir: dir });
    expect((await rt.exec(info.id, { shell: "mkdir -p /app && echo 42 > /app/answer" })).exitCode).toBe(0);
    const rec = await requireEnvironment(rt.host, info.id);
    const main = rec.containers.main as string;
    // The test's own sandbox, killed from the host as a crash of gVisor's kernel would end it.
    const { execFileSync } = await import("node:child_process");
    const state = JSON.parse(
      execFileSync("runsc", ["--root", "/var/run/docker/runtime-runc/moby", "state", main], {
        encoding: "utf8",
      }),
    ) as { pid: number };
    process.kill(state.pid, "SIGKILL");
    const result = await rt.verify(info.id);
    expect(result).toMatchObject({ status: "graded", reward: 1 });
    expect(result.evidence.agent).toEqual({ killed: 0, survivors: 0 });
    await rt.destroy(info.id);
  }, 240_000);

  it("keeps root refused in an agent that is not sandboxed", async () => {
    const plain = await writeProject({
      "compose.yaml": COMPOSE.replace(", sandbox: gvisor", "").replace("user: root, ", ""),
    });
    await rt.deploy({ project: "plain", projectDir: plain });
    await expect(rt.exec("plain/alpha", { shell: "id", user: "0" })).rejects.toThrow(
      Protection.agentRoot("main"),
    );
  }, 240_000);

  it("installs from Debian as root at agent time through the mirror proxy, and reaches nothing else", async () => {
    const dir = await writeProject({
      "compose.yaml": `services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
x-denv:
  agent: {user: root, sandbox: gvisor}
  egress: mirrors
  verifier:
    image: debian:bookworm-slim
    command: "echo 1 > $$REWARD_DIR/reward.txt"
`,
    });
    const info = await rt.deploy({ project: "apt", projectDir: dir });
    const rec = await requireEnvironment(rt.host, info.id);
    expect(rec.evidence.egress).toEqual({
      mode: "mirrors",
      mirrors: [...rt.host.settings.buildMirrors],
      proxy: `http://${rec.network.gateway}:${rec.egressProxyPort}`,
    });
    const install = await rt.exec(info.id, {
      shell:
        "apt-get update -qq && apt-get install -y -qq --no-install-recommends jq >/dev/null && jq -n '1 + 1'",
    });
    expect({ code: install.exitCode, out: install.stdout.toString().trim() }).toEqual({ code: 0, out: "2" });
    // The proxy forwards to the mirrors only, and nothing but the proxy is open on the host.
    const refused = await rt.exec(info.id, {
      cmd: [
        "bash",
        "-c",
        `exec 3<>/dev/tcp/${rec.network.gateway}/${rec.egressProxyPort}; printf 'CONNECT denv-not-a-mirror.invalid:443 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' >&3; head -1 <&3`,
      ],
    });
    expect(refused.stdout.toString()).toMatch(/^HTTP\/1\.1 403/);
    // Nor does it reach the host through the proxy: loopback, the gateway or the proxy itself.
    const gw = rec.network.gateway;
    for (const target of [
      `CONNECT 127.0.0.1:${listener.port} HTTP/1.1`,
      `GET http://localhost:${listener.port}/ HTTP/1.1`,
      `GET http://${gw}:${listener.port}/ HTTP/1.1`,
      `GET http://${gw}:${rec.egressProxyPort}/ HTTP/1.1`,
    ]) {
      const r = await rt.exec(info.id, {
        cmd: [
          "bash",
          "-c",
          `exec 3<>/dev/tcp/${gw}/${rec.egressProxyPort}; printf '${target}\\r\\nHost: x\\r\\n\\r\\n' >&3; head -1 <&3`,
        ],
      });
      expect(r.stdout.toString(), target).toMatch(/^HTTP\/1\.1 (403|400)/);
    }
    const dial = await rt.exec(info.id, {
      shell: `timeout 5 bash -c 'exec 3<>/dev/tcp/${rec.network.gateway}/${listener.port}' && echo open || echo closed`,
    });
    expect(dial.stdout.toString().trim()).toBe("closed");
    expect(listener.hits).toEqual([]);
    const verdict = await rt.verify(info.id);
    const agentEgress = verdict.evidence.agent_egress as {
      requests: Array<{ host: string; status: number }>;
    };
    expect(agentEgress.requests).toContainEqual(
      expect.objectContaining({ host: "deb.debian.org", status: 200 }),
    );
    expect(agentEgress.requests).toContainEqual(
      expect.objectContaining({ host: "denv-not-a-mirror.invalid", status: 403 }),
    );
    await rt.destroy(info.id);
    expect(rt.host.agentEgress.has(info.id)).toBe(false);
  }, 300_000);
});
