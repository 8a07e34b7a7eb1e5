import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { expect, it } from "vitest";
import { removeHostLeftovers, repo, run } from "./stack.js";

/** The README's first command, end to end, as a new user runs it (in a data dir of its own). */
it("scripts/quickstart deploys, forks twice, grades 1.0 and 0.0 and rolls alpha back", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "denv-quickstart-"));
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  // PREFIX: the quickstart's wrappers (scripts/install-cli) go there, not into /usr/local/bin.
  const env = {
    ...process.env,
    XDG_CONFIG_HOME: path.join(dataDir, "config"),
    PREFIX: path.join(dataDir, "prefix"),
  };
  let hostId: string | undefined;
  try {
    const r = await run(
      path.join(repo, "scripts/quickstart"),
      ["--data-dir", dataDir, "--listen", `127.0.0.1:${port}`, "--down"],
      env,
      { timeoutMs: 600_000 },
    );
    hostId = (
      JSON.parse(readFileSync(path.join(dataDir, "denvd", "host.json"), "utf8")) as { host_id: string }
    ).host_id;
    expect(r.code, r.stderr).toBe(0);
    // denv is a command afterwards.
    for (const name of ["denv", "denv-cp", "denvd"])
      expect(existsSync(path.join(dataDir, "prefix/bin", name))).toBe(true);
    expect(r.stdout).toContain("quickstart/solved:    reward 1");
    expect(r.stdout).toContain("quickstart/untouched: reward 0");
    expect(r.stdout).toMatch(
      /rolled back: +quickstart\/alpha -> quickstart@v1 +denv deployments show dep_\w+/,
    );
    expect(r.stdout).toMatch(/deployed: +quickstart\/alpha +denv deployments show dep_\w+/);
    // The step names the version the snapshot made: v4 (the two verifies made v2 and v3).
    expect(r.stdout).toContain("snapshot: quickstart@v4\n");
    expect(r.stdout).toMatch(/snapshot: +quickstart\/alpha -> quickstart@v4\n/);
    expect(r.stderr).toContain(
      "== snapshotting alpha into a new version, then rolling alpha back to quickstart@v1",
    );
    // The deploy's page in the dashboard, served by the same control plane.
    expect(r.stdout).toMatch(/\ndashboard: +http:\/\/127\.0\.0\.1:\d+\/deployments\/dep_\w+ /);
    // Phases were shown live on stderr.
    for (const phase of ["place", "build", "health", "probe", "snapshot", "switch"])
      expect(r.stderr).toContain(phase);
  } finally {
    if (hostId) await removeHostLeftovers(hostId, path.join(dataDir, "denvd"));
    rmSync(dataDir, { recursive: true, force: true });
  }
}, 600_000);
