import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { type FakeControlPlane, startFakeControlPlane } from "@denv/sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatBytes, LiveLine } from "./live-line.js";
import { buildCli, cliPath, denv, home, oneJson, removeTempDirs, tempDir } from "./testing/harness.js";

/**
 * Progress rewritten in place (bytes uploaded, the running phase) on a terminal's stderr only:
 * the CLI runs under `script`, which gives it a pseudo-terminal, and piped as everywhere else.
 */

const ESC = String.fromCharCode(27);
const CLEAR = `\r${ESC}[2K`;

let fake: FakeControlPlane;
let env: Record<string, string>;
let dir: string;
const hasScript = spawnSync("script", ["--version"]).status === 0;

beforeAll(async () => {
  buildCli();
  fake = await startFakeControlPlane();
  env = { DENV_URL: fake.url, DENV_TOKEN: fake.adminToken };
  dir = path.join(tempDir("live"), "quickstart");
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, "compose.yaml"), "services: {main: {image: alpine}}\n");
  writeFileSync(path.join(dir, "data.txt"), "x".repeat(64 * 1024));
});
afterAll(async () => {
  await fake?.close();
  removeTempDirs();
});

/** The CLI on a pseudo-terminal 200 columns wide: what the terminal shows (stdout and stderr). */
function onTerminal(args: string[]): Promise<{ status: number | null; screen: string }> {
  const cmd = ["stty cols 200 2>/dev/null;", JSON.stringify(process.execPath), JSON.stringify(cliPath)]
    .concat(args.map((a) => JSON.stringify(a)))
    .join(" ");
  return new Promise((resolve, reject) => {
    const child = spawn("script", ["-qec", cmd, "/dev/null"], {
      env: { PATH: process.env.PATH ?? "", HOME: home(), ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let screen = "";
    child.stdout.on("data", (b: Buffer) => {
      screen += b.toString();
    });
    child.on("error", reject);
    child.on("close", (status) => resolve({ status, screen }));
  });
}

describe.skipIf(!hasScript)(
  `progress on a terminal${hasScript ? "" : " (skipped: no script(1) for a pseudo-terminal)"}`,
  () => {
    it("denv deploy shows the bytes it uploads and the running phase in place, then the usual lines", async () => {
      const r = await onTerminal(["deploy", dir]);
      expect(r.status, r.screen).toBe(0);
      // What the terminal got, with the in-place rewrite (carriage return, erase line) spelled CLEAR.
      const screen = r.screen.replaceAll(CLEAR, "CLEAR");
      expect(screen).toMatch(/CLEARuploading \d+(\.\d)? (B|KiB)/);
      expect(screen).toMatch(/CLEARuploaded \d+(\.\d)? (B|KiB)\r?\n/);
      expect(screen).toMatch(/CLEAR {2}build \d+s/);
      // The phase lines stay, each on a line of its own once the live line is wiped.
      expect(screen).toMatch(/CLEAR {2}build done \(\d+\.\ds\)\r?\n/);
      expect(r.screen).toMatch(/deployment dep_\d+ succeeded/);
    });

    it("--json shows nothing in place: one JSON object, the phase lines as before", async () => {
      const r = await onTerminal(["deploy", dir, "--json"]);
      expect(r.status, r.screen).toBe(0);
      expect(r.screen).not.toContain(CLEAR);
      expect(r.screen).not.toContain(ESC);
      expect(r.screen).not.toContain("uploaded");
      expect(r.screen).toContain("  build done");
    });
  },
);

describe("progress when piped", () => {
  it("has no carriage returns or escape sequences, and the same phase lines", async () => {
    const r = await denv(["deploy", dir], { env });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).not.toContain("\r");
    expect(r.stderr).not.toContain(ESC);
    expect(r.stderr).not.toContain("uploaded");
    expect(r.stderr).toContain(`uploading ${dir} to quickstart/alpha\n`);
    expect(r.stderr).toContain("  build ...\n  build done (0.0s)\n");
    const json = await denv(["env", "snapshot", "quickstart/alpha", "--json"], { env });
    expect(json.stderr).not.toContain("\r");
    expect(json.stderr).not.toContain(ESC);
    expect(oneJson(json.stdout)).toMatchObject({ kind: "snapshot", status: "succeeded" });
  });
});

describe("LiveLine", () => {
  it("writes nothing when disabled, rewrites and wipes its line when enabled, cut to the width", () => {
    const off: string[] = [];
    const quiet = new LiveLine((t) => off.push(t), false);
    quiet.update("uploading 1 B", { force: true });
    quiet.clear();
    expect(off).toEqual([]);
    const on: string[] = [];
    const live = new LiveLine((t) => on.push(t), true, 20);
    live.update("a".repeat(30), { force: true });
    live.update("skipped: within 100 ms of the last");
    live.update("b", { force: true });
    live.clear();
    live.clear();
    expect(on).toEqual([`${CLEAR}${"a".repeat(18)}…`, `${CLEAR}b`, CLEAR]);
    expect([formatBytes(312), formatBytes(1536), formatBytes(5 * 1024 * 1024)]).toEqual([
      "312 B",
      "1.5 KiB",
      "5.0 MiB",
    ]);
  });
});
