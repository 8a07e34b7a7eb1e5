import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { DescribeInstancesCommand } from "@aws-sdk/client-ec2";
import { TargetMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestCp, type TestCp, waitFor } from "../testing/harness.js";
import { HetznerTestServer } from "../testing/hetzner-server.js";
import { MotoServer } from "../testing/moto-server.js";

/**
 * docs/how-to/connect-a-target.md, sections 6 and 7: their `run: hetzner` and `run: aws` blocks,
 * line by line, with the built `denv` CLI (a process, as a user runs it) against this control
 * plane and a Hetzner Cloud API on loopback (HCLOUD_ENDPOINT) or moto's server mode
 * (AWS_ENDPOINT), the credentials in the variables the page names.
 */

const REPO = fileURLToPath(new URL("../../../../", import.meta.url));
const CLI = join(REPO, "packages/cli/dist/main.js");
const TOKEN = "hcloud-docs-token-0123456789abcdef";

/** The lines of the page's ```sh blocks marked `<!-- run: TAG -->`; `# exits N` gives the exit code. */
function runnableLines(page: string, tag: string): Array<{ line: string; code: number }> {
  const text = readFileSync(join(REPO, "docs", page), "utf8");
  const out: Array<{ line: string; code: number }> = [];
  for (const block of text.split(`<!-- run: ${tag} -->\n\`\`\`sh\n`).slice(1)) {
    for (const line of block.slice(0, block.indexOf("```")).split("\n")) {
      if (line.trim() === "") continue;
      out.push({ line, code: Number(/# exits (\d+)/.exec(line)?.[1] ?? 0) });
    }
  }
  return out;
}

/** bash -c SCRIPT, without blocking this process (the control plane answers from it). */
function run(
  script: string,
  env: NodeJS.ProcessEnv,
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", ["-c", script], { env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.on("error", reject);
    child.on("close", (status) => resolve({ status, stdout, stderr }));
  });
}

describe("how-to/connect-a-target.md: a cloud account (Hetzner)", () => {
  let t: TestCp;
  let hz: HetznerTestServer;
  beforeAll(async () => {
    hz = await new HetznerTestServer(TOKEN).start();
    t = await startTestCp({ provisionIntervalMs: 3_600_000 });
  });
  afterAll(async () => {
    await t?.close();
    await hz?.close();
  });

  it("runs every command of the page's hetzner block", async () => {
    const lines = runnableLines("how-to/connect-a-target.md", "hetzner");
    expect(lines.length).toBeGreaterThan(5);
    const env = {
      PATH: process.env.PATH,
      HOME: t.dataDir,
      DENV_URL: t.url,
      DENV_TOKEN: t.cp.adminToken,
      HCLOUD_TOKEN: TOKEN,
      HCLOUD_ENDPOINT: hz.url,
    };
    const outputs: string[] = [];
    for (const { line, code } of lines) {
      const r = await run(`denv() { node ${JSON.stringify(CLI)} "$@"; }\n${line}`, env);
      outputs.push(r.stdout + r.stderr);
      expect([line, r.status, r.stderr]).toEqual([line, code, code === 0 ? "" : r.stderr]);
    }
    const all = outputs.join("\n");
    // What the page says each command shows.
    expect(all).toContain("target cloud created (hetzner)");
    expect(all).toContain(TargetMessages.badSetting("hetzner", "max_machines", "0", "a whole number >= 1"));
    expect(all).toContain(TargetMessages.targetInUse("cloud", 1));
    expect(all).toContain("credentials   api_token (stored encrypted)");
    expect(all).not.toContain(TOKEN);
    // min_machines=1 created one server, with denv's labels and the page's; rm --force deleted it.
    expect(hz.requests.filter((r) => r === "POST /v1/servers")).toHaveLength(1);
    expect(hz.requests.some((r) => r.startsWith("DELETE /v1/servers/"))).toBe(true);
    expect(hz.servers.size).toBe(0);
    expect((await t.admin.get("/v1/targets")).body.targets.map((x: { name: string }) => x.name)).toEqual([
      "local",
    ]);
  });
});

describe("how-to/connect-a-target.md: a cloud account (AWS)", () => {
  let t: TestCp;
  let moto: MotoServer;
  beforeAll(async () => {
    moto = await new MotoServer().start();
    t = await startTestCp({ provisionIntervalMs: 3_600_000 });
  });
  afterAll(async () => {
    await t?.close();
    await moto?.close();
  });

  it("runs every command of the page's aws block", async () => {
    const lines = runnableLines("how-to/connect-a-target.md", "aws");
    expect(lines.length).toBeGreaterThan(4);
    const secret = "docs-secret-access-key-0123456789";
    const env = {
      PATH: process.env.PATH,
      HOME: t.dataDir,
      DENV_URL: t.url,
      DENV_TOKEN: t.cp.adminToken,
      AWS_ACCESS_KEY_ID: "AKIADOCSPAGE0000",
      AWS_SECRET_ACCESS_KEY: secret,
      AWS_ENDPOINT: moto.url,
    };
    const outputs: string[] = [];
    for (const { line, code } of lines) {
      const r = await run(`denv() { node ${JSON.stringify(CLI)} "$@"; }\n${line}`, env);
      outputs.push(r.stdout + r.stderr);
      expect([line, r.status, r.stderr]).toEqual([line, code, code === 0 ? "" : r.stderr]);
      // The first instance is asked for right after the answer (a few ms here; the SDK loads
      // first, which took over 10 s on a loaded CI machine): the page's next commands show it once it is.
      if (line.startsWith("denv targets add aws fleet ")) {
        await waitFor(
          async () => (await t.admin.get("/v1/targets/fleet/machines")).body.machines.length > 0,
          60_000,
        );
      }
    }
    const all = outputs.join("\n");
    expect(all).toContain("target fleet created (aws)");
    expect(all).toContain(TargetMessages.badSetting("aws", "image", "debian-13", "an AMI id (ami-...)"));
    expect(all).toContain(TargetMessages.targetInUse("fleet", 1));
    expect(all).toContain("credentials   access_key_id, secret_access_key (stored encrypted)");
    expect(all).toMatch(/aws\/c6i\.xlarge\/eu-central-1[a-z]/);
    expect(all).not.toContain(secret);
    // min_machines=1 made one instance with the page's tags; rm --force terminated it.
    const ec2 = moto.ec2("eu-central-1");
    const made = (await ec2.send(new DescribeInstancesCommand({}))).Reservations?.flatMap(
      (r) => r.Instances ?? [],
    );
    ec2.destroy();
    expect(made).toHaveLength(1);
    expect(made?.[0]?.State?.Name).toBe("terminated");
    expect(Object.fromEntries((made?.[0]?.Tags ?? []).map((x) => [x.Key, x.Value]))).toMatchObject({
      team: "rl",
      "ai.denv.target": "fleet",
    });
    expect((await t.admin.get("/v1/targets")).body.targets.map((x: { name: string }) => x.name)).toEqual([
      "local",
    ]);
  });
});
