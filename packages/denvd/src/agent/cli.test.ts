import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenvdMessages } from "@denv/spec/messages";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildDenvd, denvd } from "./testing/agent-harness.js";
import { FakeCp } from "./testing/fake-cp.js";

/** The denvd binary's verbs, run as an operator would run them. */

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

describe("denvd verbs", () => {
  let cp: FakeCp;
  let dir = "";

  beforeAll(async () => {
    await buildDenvd();
    cp = await FakeCp.start();
    dir = await mkdtemp(join(tmpdir(), "denvd-cli-"));
  });
  afterAll(async () => {
    await cp?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("join trades the token for a credential kept in a 0600 host.json", async () => {
    const stateDir = join(dir, "a");
    const r = await denvd([
      "join",
      "--url",
      cp.url,
      "--token",
      cp.token,
      "--name",
      "builder-1",
      "--label",
      "zone=eu",
      "--label",
      "gpu=none",
      "--state-dir",
      stateDir,
      "--json",
    ]);
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout) as Record<string, string>;
    expect(out).toEqual({
      host_id: cp.hostId,
      target: "default",
      url: cp.url,
      host_file: join(stateDir, "host.json"),
    });
    expect(r.stdout).not.toContain(cp.credential);
    expect(r.stdout + r.stderr).not.toContain(cp.token);
    expect(cp.joins.at(-1)).toEqual({
      token: cp.token,
      name: "builder-1",
      labels: { zone: "eu", gpu: "none" },
    });
    const file = join(stateDir, "host.json");
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect(JSON.parse(await readFile(file, "utf8"))).toEqual({
      url: cp.url,
      host_id: cp.hostId,
      credential: cp.credential,
      target: "default",
    });

    const again = await denvd(["join", "--url", cp.url, "--token", cp.token, "--state-dir", stateDir]);
    expect(again.code).toBe(1);
    expect(again.stderr).toBe(
      `denvd: this host already joined target default as ${cp.hostId} (${file}): pass --force to join again\n`,
    );
  });

  it("join says what the control plane said when it refuses the token", async () => {
    const r = await denvd(["join", "--url", cp.url, "--token", "wrong", "--state-dir", join(dir, "b")]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      "denvd: the control plane refused to join this host (401): the join token is unknown or expired: create a new one\n",
    );
  });

  it("join says when the control plane cannot be reached", async () => {
    const url = `http://127.0.0.1:${await freePort()}`;
    const r = await denvd(["join", "--token", "t", "--state-dir", join(dir, "c")], { DENVD_URL: url });
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `denvd: cannot reach the control plane at ${url} (ECONNREFUSED): check --url and that denv-cp is running\n`,
    );
  });

  it("status shows the host from its state dir", async () => {
    const r = await denvd(["status", "--json"], { DENVD_STATE_DIR: join(dir, "a") });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      host_id: cp.hostId,
      target: "default",
      url: cp.url,
      state_dir: join(dir, "a"),
      environments: [],
      versions: [],
      journal: { done: 0, unfinished: [] },
    });
    const text = await denvd(["status", "--state-dir", join(dir, "a")]);
    expect(text.stdout).toContain(`host          ${cp.hostId} (target default)`);
    const none = await denvd(["status", "--state-dir", join(dir, "none")]);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/has not joined a target .* run denvd join --url URL --token JOIN_TOKEN/);
  });

  it("doctor checks this machine, one line per check", async () => {
    const r = await denvd(["doctor", "--json", "--state-dir", join(dir, "doctor")]);
    const report = JSON.parse(r.stdout) as { ok: boolean; checks: Array<{ name: string; status: string }> };
    expect(report.checks.map((c) => c.name)).toEqual([
      "root",
      "docker",
      "docker dns",
      "ip6tables",
      "iptables",
      "nsenter",
      "btrfs",
      "loop devices",
      "state dir",
      "cgroups",
      "node",
    ]);
    // The test machine runs the runtime's own tests: everything they need is there.
    for (const name of ["root", "docker", "ip6tables", "iptables", "nsenter", "state dir"]) {
      expect(report.checks.find((c) => c.name === name)?.status).toBe("ok");
    }
    expect(r.code).toBe(report.ok ? 0 : 1);
    const bad = await denvd([
      "doctor",
      "--docker-socket",
      join(dir, "no.sock"),
      "--state-dir",
      join(dir, "doctor"),
    ]);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/^fail docker +no Docker Engine at .*no\.sock/m);
    expect(bad.stdout).toContain("-> apt-get install docker.io && systemctl enable --now docker");
  });

  it("exits 0 on --help, 2 on a usage error", async () => {
    const help = await denvd(["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("denvd join --url URL --token JOIN_TOKEN");
    expect((await denvd(["launch"])).code).toBe(2);
    const flag = await denvd(["status", "--bogus"]);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain("denvd status: Unknown option '--bogus'");
    const store = await denvd(["run", "--store", "zfs"]);
    expect(store.code).toBe(2);
    expect(store.stderr).toContain("--store / DENVD_STORE");
    const missing = await denvd(["join", "--url", cp.url, "--state-dir", join(dir, "d")]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("join needs --token JOIN_TOKEN (or DENVD_TOKEN)");
    // A bridge to a provider without the user's key there: refused before anything starts.
    const keyless = await denvd(["run", "--provider", "e2b", "--state-dir", join(dir, "e")]);
    expect(keyless.code).toBe(2);
    expect(keyless.stderr.trim()).toBe(`denvd: ${DenvdMessages.providerKeyMissing("e2b")}`);
    // release is a bridge's: refused on a host of denv's own runtime, and without the key.
    const own = await denvd(["release", "--state-dir", join(dir, "e")]);
    expect(own.code).toBe(2);
    expect(own.stderr.trim()).toBe(`denvd: ${DenvdMessages.releaseNeedsProvider()}`);
    const keylessRelease = await denvd(["release", "--provider", "e2b", "--state-dir", join(dir, "e")]);
    expect(keylessRelease.code).toBe(2);
    expect(keylessRelease.stderr.trim()).toBe(`denvd: ${DenvdMessages.providerKeyMissing("e2b")}`);
    // Modal's key is its token's id and secret joined by a colon: one without is refused, unrepeated.
    for (const verb of ["run", "release"]) {
      const colonless = await denvd([verb, "--provider", "modal", "--state-dir", join(dir, "e")], {
        DENVD_PROVIDER_API_KEY: "ak-only",
      });
      expect(colonless.code).toBe(2);
      expect(colonless.stderr.trim()).toBe(`denvd: ${DenvdMessages.modalKeyMalformed()}`);
    }
    const unknown = await denvd(["run", "--provider", "lambda"], { DENVD_PROVIDER_API_KEY: "k" });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("--provider / DENVD_PROVIDER");
  });
});
