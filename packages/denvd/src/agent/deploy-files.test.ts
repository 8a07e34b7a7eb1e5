import { chmod, cp, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { run } from "../host/run.js";
import { REPO } from "./testing/agent-harness.js";

/** deploy/denvd.service and deploy/install.sh: parsed, verified by systemd, and dry-run. */

const UNIT = join(REPO, "deploy/denvd.service");
const INSTALL = join(REPO, "deploy/install.sh");

function sections(text: string): Record<string, Record<string, string[]>> {
  const out: Record<string, Record<string, string[]>> = {};
  let current: Record<string, string[]> | undefined;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const head = /^\[(\w+)\]$/.exec(line);
    if (head) {
      current = {};
      out[head[1] as string] = current;
      continue;
    }
    const eq = line.indexOf("=");
    if (!current || eq < 0) throw new Error(`not a unit line: ${line}`);
    const key = line.slice(0, eq);
    current[key] = [...(current[key] ?? []), line.slice(eq + 1)];
  }
  return out;
}

describe("the systemd unit", () => {
  it("starts denvd run after Docker, restarts it, and stops it gently", async () => {
    const unit = sections(await readFile(UNIT, "utf8"));
    expect(Object.keys(unit)).toEqual(["Unit", "Service", "Install"]);
    expect(unit.Unit?.After?.[0]?.split(" ")).toContain("docker.service");
    expect(unit.Unit?.Requires).toEqual(["docker.service"]);
    expect(unit.Service).toMatchObject({
      ExecStart: ["/usr/bin/env node --max-semi-space-size=1 /usr/local/bin/denvd run"],
      Restart: ["always"],
      KillMode: ["mixed"],
      Environment: ["DENVD_STATE_DIR=/var/lib/denvd"],
      StateDirectory: ["denvd"],
      User: ["root"],
    });
    expect(unit.Install?.WantedBy).toEqual(["multi-user.target"]);
  });

  describe("systemd-analyze verify", () => {
    let root = "";
    const available = run("systemd-analyze", ["--version"]).then(
      (r) => r.code === 0,
      () => false,
    );
    beforeAll(async () => {
      // A root of its own: the system's unit files, the unit, and stand-ins for the binaries
      // (verify insists that ExecStart exists), so nothing is installed on the test machine.
      root = await mkdtemp(join(tmpdir(), "denvd-unit-"));
      await mkdir(join(root, "lib/systemd"), { recursive: true });
      await mkdir(join(root, "etc/systemd/system"), { recursive: true });
      await mkdir(join(root, "usr/local/bin"), { recursive: true });
      await mkdir(join(root, "usr/bin"), { recursive: true });
      await cp("/lib/systemd/system", join(root, "lib/systemd/system"), {
        recursive: true,
        verbatimSymlinks: true,
      });
      for (const bin of ["usr/local/bin/denvd", "usr/bin/env"]) {
        await writeFile(join(root, bin), "#!/bin/sh\n");
        await chmod(join(root, bin), 0o755);
      }
    });
    afterAll(async () => {
      if (root) await rm(root, { recursive: true, force: true });
    });

    async function verify(unitText: string): Promise<{ code: number; stderr: string }> {
      await writeFile(join(root, "etc/systemd/system/denvd.service"), unitText);
      return run("systemd-analyze", ["verify", `--root=${root}`, "denvd.service"]);
    }

    it("finds nothing to say about the unit", async (ctx) => {
      if (!(await available)) ctx.skip(true, "systemd-analyze is not installed (apt-get install systemd)");
      const r = await verify(await readFile(UNIT, "utf8"));
      expect(r).toMatchObject({ code: 0, stderr: "" });
    });

    it("does complain about a broken copy (so the check above means something)", async (ctx) => {
      if (!(await available)) ctx.skip(true, "systemd-analyze is not installed (apt-get install systemd)");
      const broken = (await readFile(UNIT, "utf8")).replace("KillMode=mixed", "KillMode=gently");
      const r = await verify(broken);
      expect(r.stderr).toContain("Failed to parse kill mode specification");
    });
  });
});

describe("install.sh", () => {
  it("is valid bash", async () => {
    const r = await run("bash", ["-n", INSTALL]);
    expect(r).toMatchObject({ code: 0, stderr: "" });
  });

  it("--dry-run prints every step in order, never the token, and changes nothing", async () => {
    const r = await run("bash", [
      INSTALL,
      "--dry-run",
      "--url",
      "http://cp.example:8080",
      "--token",
      "s3cret-join-token",
      "--name",
      "gpu-1",
      "--label",
      "zone=eu",
    ]);
    expect(r.code).toBe(0);
    expect(r.stdout).not.toContain("s3cret-join-token");
    const steps = r.stdout
      .split("\n")
      .filter((l) => l.startsWith("+ "))
      .map((l) => l.slice(2));
    expect(steps).toEqual([
      "apt-get update",
      "env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker.io iptables btrfs-progs util-linux ca-certificates",
      "systemctl enable --now docker.service",
      "npm ci --no-audit --no-fund",
      "node scripts/build-info.mjs",
      "npx tsc -b packages/spec packages/denvd",
      "node packages/denvd/scripts/bundle.mjs",
      `install -D -m 0755 ${REPO}packages/denvd/dist/bundle/denvd.mjs /usr/local/lib/denvd/denvd.mjs`,
      "ln -sfn /usr/local/lib/denvd/denvd.mjs /usr/local/bin/denvd",
      "install -d -m 0700 /var/lib/denvd",
      `install -m 0644 ${REPO}deploy/denvd.service /etc/systemd/system/denvd.service`,
      "DENVD_TOKEN=*** /usr/local/bin/denvd join --url http://cp.example:8080 --state-dir /var/lib/denvd --name gpu-1 --label zone=eu",
      "systemctl daemon-reload",
      "systemctl enable denvd.service",
      "systemctl restart denvd.service",
      "/usr/local/bin/denvd doctor --state-dir /var/lib/denvd",
    ]);
  });

  it("without a join it enables the unit and says how to join", async () => {
    const r = await run("bash", [INSTALL, "--dry-run", "--state-dir", "/srv/denvd"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(
      "+ write /etc/systemd/system/denvd.service.d/state-dir.conf: [Service] Environment=DENVD_STATE_DIR=/srv/denvd",
    );
    expect(r.stdout).not.toContain("DENVD_TOKEN=");
    expect(r.stdout).toContain(
      "# not joined yet: run 'denvd join --url URL --token JOIN_TOKEN', then 'systemctl start denvd'",
    );
  });

  it("--insecure passes the flag to the join and to the unit (a drop-in), for a plain http:// control plane", async () => {
    const r = await run("bash", [
      INSTALL,
      "--dry-run",
      "--insecure",
      "--url",
      "http://cp.example:7070",
      "--token",
      "t0k",
    ]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(
      "+ write /etc/systemd/system/denvd.service.d/insecure.conf: [Service] Environment=DENVD_INSECURE=1",
    );
    expect(r.stdout).toContain("join --url http://cp.example:7070 --state-dir /var/lib/denvd --insecure");
    expect(r.stdout).not.toContain("t0k");
  });

  it("refuses a URL without a token, and unknown arguments", async () => {
    const r = await run("bash", [INSTALL, "--dry-run", "--url", "http://cp"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe("install.sh: --url needs --token JOIN_TOKEN (or DENVD_TOKEN)\n");
    expect((await run("bash", [INSTALL, "--frobnicate"])).code).toBe(2);
  });
});
