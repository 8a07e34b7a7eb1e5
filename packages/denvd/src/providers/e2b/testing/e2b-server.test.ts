import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  AuthenticationError,
  BuildError,
  CommandExitError,
  FileNotFoundError,
  Sandbox,
  SandboxNotFoundError,
  Template,
  TimeoutError,
  waitForFile,
} from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { E2bServer } from "./e2b-server.js";

/**
 * The E2B test double driven by the real `e2b` SDK, nothing mocked: sandboxes are containers on
 * this machine's engine, of an image built here from debian:bookworm-slim (local; never pulled).
 */
const API_KEY = `e2b_${randomBytes(20).toString("hex")}`;
const IMAGE = `denv-e2b-test:${randomBytes(4).toString("hex")}`;
const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();

let server: E2bServer;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };

beforeAll(async () => {
  const dir = await mkdtemp(join(tmpdir(), "denv-e2b-"));
  try {
    await writeFile(
      join(dir, "Dockerfile"),
      "FROM debian:bookworm-slim\nRUN useradd -m -u 1000 -s /bin/bash user\n",
    );
    docker(
      "build",
      "-q",
      "--pull=false",
      "--label",
      "ai.denv.managed=true",
      "--label",
      "ai.denv.test=e2b-server",
      "-t",
      IMAGE,
      dir,
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  server = await new E2bServer({
    apiKey: API_KEY,
    templates: { base: IMAGE },
    baseImages: { "debian:bookworm-slim": "debian:bookworm-slim" },
  }).start();
  opts = { apiKey: API_KEY, apiUrl: server.apiUrl, sandboxUrl: server.sandboxUrl };
}, 120_000);

afterAll(async () => {
  try {
    await server?.close();
  } finally {
    docker("rmi", "-f", IMAGE);
  }
  for (const kind of ["ps -a", "network ls", "image ls -a"])
    for (const label of ["ai.denv.test=e2b-server", `ai.denv.e2b.server=${server?.id}`]) {
      const left = docker(...kind.split(" "), "-q", "--filter", `label=${label}`);
      expect(left, `docker ${kind} still lists what the test made (${label})`).toBe("");
    }
}, 120_000);

describe("E2bServer with the e2b SDK", { timeout: 90_000 }, () => {
  it("runs commands as the asked user, cwd and envs, streaming output, exit codes as CommandExitError", async () => {
    const sbx = await Sandbox.create("base", { ...opts, envs: { FROM_CREATE: "sandbox-wide" } });
    try {
      expect((await sbx.commands.run("id -u")).stdout.trim()).toBe("1000");
      expect((await sbx.commands.run("id -u", { user: "user" })).stdout.trim()).toBe("1000");
      expect((await sbx.commands.run("id -u", { user: "root" })).stdout.trim()).toBe("0");
      expect((await sbx.commands.run("pwd")).stdout.trim()).toBe("/home/user");

      const r = await sbx.commands.run('pwd; echo "$GREETING $FROM_CREATE"', {
        cwd: "/tmp",
        envs: { GREETING: "hello" },
      });
      expect(r.stdout).toBe("/tmp\nhello sandbox-wide\n");

      const out: string[] = [];
      const err: string[] = [];
      const streamed = await sbx.commands.run("echo one; sleep 0.3; echo two >&2; echo three", {
        onStdout: (d) => void out.push(d),
        onStderr: (d) => void err.push(d),
      });
      expect(out.join("")).toBe("one\nthree\n");
      expect(err.join("")).toBe("two\n");
      expect(streamed.stderr).toBe("two\n");
      expect(streamed.exitCode).toBe(0);

      const failed = await sbx.commands.run("echo bad >&2; exit 7").catch((e: unknown) => e);
      expect(failed).toBeInstanceOf(CommandExitError);
      expect((failed as CommandExitError).exitCode).toBe(7);
      expect((failed as CommandExitError).stderr).toBe("bad\n");

      const slow = await sbx.commands.run("sleep 31", { timeoutMs: 1500 }).catch((e: unknown) => e);
      expect(slow).toBeInstanceOf(TimeoutError);
      const running = async () => (await sbx.commands.run("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")).stdout;
      await expect.poll(running, { timeout: 5_000 }).not.toContain("sleep 31");
      expect(await running()).toContain("sleep infinity");
    } finally {
      await sbx.kill();
    }
  });

  it("writes and reads files as their user, and lists and stats them", async () => {
    const sbx = await Sandbox.create("base", opts);
    try {
      const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      const info = await sbx.files.write("data/blob.bin", new Uint8Array(bytes).buffer);
      expect(info.path).toBe("/home/user/data/blob.bin");
      expect(Buffer.from(await sbx.files.read("data/blob.bin", { format: "bytes" }))).toEqual(bytes);
      expect((await sbx.commands.run("stat -c '%U:%G %s' /home/user/data/blob.bin")).stdout.trim()).toBe(
        "user:user 256",
      );

      await sbx.files.write("/root/secret.txt", "root's", { user: "root" });
      expect(await sbx.files.read("/root/secret.txt", { user: "root" })).toBe("root's");
      expect((await sbx.commands.run("stat -c %U /root/secret.txt", { user: "root" })).stdout.trim()).toBe(
        "root",
      );
      await expect(sbx.files.read("/root/secret.txt")).rejects.toThrow(
        "403: user 'user' cannot read '/root/secret.txt'",
      );
      await expect(sbx.files.exists("/root/secret.txt")).rejects.toThrow(/permission_denied|cannot see/);
      await expect(sbx.files.write("/root/other.txt", "no")).rejects.toThrow(/cannot write/);
      await expect(sbx.files.read("/nope.txt")).rejects.toBeInstanceOf(FileNotFoundError);

      expect(await sbx.files.exists("data/blob.bin")).toBe(true);
      expect(await sbx.files.exists("data/missing")).toBe(false);
      const listed = await sbx.files.list("data");
      expect(listed.map((e) => [e.name, e.type, e.size, e.owner])).toEqual([
        ["blob.bin", "file", 256, "user"],
      ]);
    } finally {
      await sbx.kill();
    }
  });

  it("snapshots a sandbox; a sandbox from the snapshot has its files and forks apart", async () => {
    const original = await Sandbox.create("base", opts);
    const snap = await original.createSnapshot({ name: "with-file" });
    expect(snap.names).toEqual(["local/with-file:default"]);
    expect(docker("image", "ls", "-q", "--filter", `label=ai.denv.e2b.server=${server.id}`)).not.toBe("");
    await original.kill();

    const base = await Sandbox.create("base", opts);
    await base.files.write("state.txt", "before");
    const { snapshotId } = await base.createSnapshot();
    const fork = await Sandbox.create(snapshotId, opts);
    try {
      expect(await fork.files.read("state.txt")).toBe("before");
      await fork.files.write("state.txt", "changed in the fork");
      expect(await base.files.read("state.txt")).toBe("before");
      expect(await fork.files.read("state.txt")).toBe("changed in the fork");
      expect((await Sandbox.getInfo(fork.sandboxId, opts)).templateId).toBe(snapshotId);
    } finally {
      await fork.kill();
      await base.kill();
    }
    expect(await Sandbox.deleteSnapshot(snapshotId, opts)).toBe(true);
    expect(await Sandbox.deleteSnapshot(snapshotId, opts)).toBe(false);
  });

  it("kills, lists, times out, and refuses a wrong API key", async () => {
    const a = await Sandbox.create("base", { ...opts, metadata: { run: "list-me" } });
    const b = await Sandbox.create("base", { ...opts, metadata: { run: "list-me" }, timeoutMs: 60_000 });
    const listed = [];
    const pages = Sandbox.list({ ...opts, query: { metadata: { run: "list-me" } }, limit: 1 });
    while (pages.hasNext) listed.push(...(await pages.nextItems()));
    expect(listed.map((s) => s.sandboxId).sort()).toEqual([a.sandboxId, b.sandboxId].sort());

    expect(await a.isRunning()).toBe(true);
    await a.kill();
    await expect(Sandbox.getInfo(a.sandboxId, opts)).rejects.toBeInstanceOf(SandboxNotFoundError);
    await expect(Sandbox.connect(a.sandboxId, opts)).rejects.toBeInstanceOf(SandboxNotFoundError);
    expect(docker("ps", "-a", "-q", "--filter", `label=ai.denv.e2b.sandbox=${a.sandboxId}`)).toBe("");
    expect(await Sandbox.kill(a.sandboxId, opts)).toBe(false);

    expect((await b.getInfo()).endAt.getTime() - Date.now()).toBeGreaterThan(30_000);
    await b.setTimeout(3_000);
    const end = (await b.getInfo()).endAt.getTime();
    expect(end - Date.now()).toBeLessThanOrEqual(3_000);
    expect(await b.isRunning()).toBe(true);
    await new Promise((r) => setTimeout(r, end - Date.now() + 1_000));
    await expect(b.getInfo()).rejects.toBeInstanceOf(SandboxNotFoundError);
    // The sandbox is gone from the API at once; its container's removal may take the engine a
    // while on a loaded machine (CI at b8b8757 still saw it 1 s past the timeout).
    const containerOf = () =>
      docker("ps", "-a", "-q", "--filter", `label=ai.denv.e2b.sandbox=${b.sandboxId}`);
    for (let i = 0; i < 150 && containerOf() !== ""; i++) await new Promise((r) => setTimeout(r, 200));
    expect(containerOf()).toBe("");

    await expect(Sandbox.create("base", { ...opts, apiKey: "e2b_wrong" })).rejects.toBeInstanceOf(
      AuthenticationError,
    );
  });

  it("puts a sandbox without internet access on an internal network: it cannot reach other sandboxes", async () => {
    const listener = await Sandbox.create("base", opts);
    const open = await Sandbox.create("base", opts);
    const closed = await Sandbox.create("base", { ...opts, allowInternetAccess: false });
    try {
      const networkOf = (id: string) =>
        docker(
          "inspect",
          "-f",
          "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{$v.IPAddress}}{{end}}",
          `denv-e2b-${server.id}-${id}`,
        ).split(" ");
      const [internal] = networkOf(closed.sandboxId);
      expect(internal).toBe(`denv-e2b-${server.id}-internal`);
      expect(docker("network", "inspect", "-f", "{{.Internal}}", String(internal))).toBe("true");
      expect(networkOf(open.sandboxId)[0]).toBe(`denv-e2b-${server.id}-open`);
      expect((await Sandbox.getInfo(closed.sandboxId, opts)).allowInternetAccess).toBe(false);

      const accepted: string[] = [];
      const serve = await listener.commands.run(
        `perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(Listen => 5, LocalPort => 7777, ReuseAddr => 1) or die; $| = 1; print "up\\n"; while ($c = $s->accept) { print "accepted\\n"; close $c }'`,
        { background: true, onStdout: (d) => void accepted.push(d) },
      );
      await expect.poll(() => accepted.join(""), { timeout: 10_000 }).toContain("up");
      const ip = networkOf(listener.sandboxId)[1];
      const probe = `timeout 5 bash -c 'echo hi > /dev/tcp/${ip}/7777'`;
      await open.commands.run(probe);
      await expect.poll(() => accepted.join("").split("accepted").length - 1).toBe(1);
      const refused = await closed.commands.run(probe).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(CommandExitError);
      expect(accepted.join("").split("accepted").length - 1).toBe(1);
      expect((await listener.commands.list()).map((p) => p.pid)).toContain(serve.pid);
      expect(await serve.kill()).toBe(true);
      await expect(serve.wait()).rejects.toBeInstanceOf(CommandExitError);
    } finally {
      await listener.kill();
      await open.kill();
      await closed.kill();
    }
  });

  it("builds a template (copy, RUN, workdir, user, envs, start command) whose sandboxes start as it left them; refuses a wrong API key", async () => {
    const context = await mkdtemp(join(tmpdir(), "denv-e2b-context-"));
    try {
      await writeFile(join(context, "hello.txt"), "hello from the context\n");
      const template = Template({ fileContextPath: context })
        .fromImage("debian:bookworm-slim")
        .setUser("root")
        .runCmd("useradd -m -u 1500 -s /bin/bash builder && mkdir -p /srv/app && chown builder /srv/app")
        .setWorkdir("/srv/app")
        .copy("hello.txt", "hello.txt", { user: "builder", mode: 0o640 })
        .setEnvs({ GREETING: 'hi "$there"' })
        .runCmd('echo "built as $(whoami) in $(pwd)" > built.txt', { user: "builder" })
        .setUser("builder")
        .setStartCmd("echo started > /tmp/started; exec sleep 3600", waitForFile("/tmp/started"));
      await expect(
        Template.build(template, { alias: "app", ...opts, apiKey: "e2b_wrong" }),
      ).rejects.toBeInstanceOf(AuthenticationError);
      const built = await Template.build(template, { alias: "app", ...opts });
      expect(await Template.exists("app", opts)).toBe(true);
      const images = () =>
        docker("image", "ls", "-aq", "--filter", `label=ai.denv.e2b.template=${built.templateId}`);
      expect(
        docker(
          "image",
          "ls",
          "-q",
          "--filter",
          `label=ai.denv.e2b.server=${server.id}`,
          "--filter",
          `label=ai.denv.e2b.build=${built.buildId}`,
        ),
      ).not.toBe("");

      const sbx = await Sandbox.create("app", opts);
      try {
        const r = await sbx.commands.run(
          'whoami; pwd; echo "$GREETING"; cat hello.txt built.txt /tmp/started; stat -c "%U %a" hello.txt',
        );
        expect(r.stdout).toBe(
          'builder\n/srv/app\nhi "$there"\nhello from the context\nbuilt as builder in /srv/app\nstarted\nbuilder 640\n',
        );
        expect((await sbx.commands.run("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")).stdout).toContain(
          "sleep 3600",
        );
        expect(await sbx.files.read("/srv/app/hello.txt")).toBe("hello from the context\n");
        expect((await sbx.getInfo()).templateId).toBe(built.templateId);
      } finally {
        await sbx.kill();
      }
      // DELETE /templates/{id} (the SDK's only caller of it is deleteSnapshot).
      expect(await Sandbox.deleteSnapshot(built.templateId, opts)).toBe(true);
      expect(await Template.exists("app", opts)).toBe(false);
      expect(images()).toBe("");
    } finally {
      await rm(context, { recursive: true, force: true });
    }
  });

  it("fails a build whose RUN step fails, with the step's output, leaving nothing of it; refuses unknown bases", async () => {
    const ours = (kind: string) =>
      docker(
        ...kind.split(" "),
        "-q",
        "--filter",
        `label=ai.denv.e2b.server=${server.id}`,
        "--filter",
        "label=ai.denv.e2b.build",
      );
    const before = ours("image ls -a");
    const failing = Template()
      .fromImage("debian:bookworm-slim")
      .runCmd("echo preparing")
      .runCmd("echo 'the step says why' >&2; exit 3");
    const logs: string[] = [];
    const failed = await Template.build(failing, {
      alias: "broken",
      ...opts,
      onBuildLogs: (e) => void logs.push(`${e.level} ${e.message}`),
    }).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(BuildError);
    expect((failed as BuildError).message).toMatch(
      /^step 2 \(RUN .*exit 3\) failed: .*code: 3\nthe step says why$/,
    );
    expect(logs).toEqual(
      expect.arrayContaining([
        "info [step 1/2] RUN echo preparing",
        "info preparing",
        "info the step says why",
      ]),
    );
    expect(ours("image ls -a")).toBe(before);
    expect(ours("ps -a")).toBe("");
    await expect(Sandbox.create("broken", opts)).rejects.toThrow(/no ready build/);

    await expect(
      Template.build(Template().fromImage("python:3").runCmd("true"), { alias: "py", ...opts }),
    ).rejects.toThrow("fromImage 'python:3' is not one of this test double's baseImages");
  });
});
