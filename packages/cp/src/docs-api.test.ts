import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  ControlPlaneMessages,
  GithubMessages,
  HOSTS_PAGE,
  HostMessages,
  JoinTokenMessages,
} from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestCp, type TestCp } from "./testing/harness.js";

/**
 * docs/reference/api.md against the code: it documents exactly the routes the server has, every
 * HTTP route has an example, the quoted messages are the spec's, and every `sh example` block
 * runs (curl, top to bottom) against a control plane with a host joined.
 */

const repo = fileURLToPath(new URL("../../../", import.meta.url));
const docPath = join(repo, "docs/reference/api.md");

interface Section {
  routes: string[];
  examples: string[];
  websocket: boolean;
}

function sections(doc: string): Section[] {
  const out: Section[] = [];
  for (const part of doc.split(/^### /m).slice(1)) {
    const heading = part.split("\n", 1)[0] as string;
    const routes: string[] = [];
    for (const m of heading.matchAll(/`([^`]+)`/g)) {
      const text = m[1] as string;
      const full = /^(GET|POST|PUT|DELETE) (\S+)$/.exec(text);
      if (full) routes.push(text);
      else if (text.startsWith("/") && routes.length > 0) {
        // "`POST .../stop` and `/start`": the same route with its last segment replaced.
        const [method, path] = (routes.at(-1) as string).split(" ") as [string, string];
        routes.push(`${method} ${path.replace(/\/[^/]+$/, text)}`);
      }
    }
    const examples = [...part.matchAll(/```sh example\n([\s\S]*?)```/g)].map((m) => m[1] as string);
    out.push({ routes, examples, websocket: heading.includes("(WebSocket)") });
  }
  return out.filter((s) => s.routes.length > 0);
}

function run(
  script: string,
  cwd: string,
  env: Record<string, string>,
): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    const child = spawn("bash", ["-c", `set -eo pipefail\n${script}`], {
      cwd,
      env: { ...process.env, ...env },
    });
    let output = "";
    child.stdout.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.on("close", (code) => resolve({ code: code ?? 1, output }));
  });
}

describe("docs/reference/api.md", () => {
  let t: TestCp;
  let doc: string;
  let cwd: string;
  beforeAll(async () => {
    doc = await readFile(docPath, "utf8");
    t = await startTestCp();
    await t.host({ name: "h1" });
    cwd = await mkdtemp(join(tmpdir(), "denv-api-doc-"));
    await symlink(join(repo, "examples"), join(cwd, "examples"));
  });
  afterAll(async () => {
    await t.close();
    await rm(cwd, { recursive: true, force: true });
  });

  it("documents exactly the routes the control plane serves, each HTTP route with an example", async () => {
    const openapi = (await t.anon.get("/v1/openapi.json")).body as { paths: Record<string, object> };
    const served = Object.entries(openapi.paths).flatMap(([p, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${p.replace(/\{(\w+)\}/g, ":$1")}`),
    );
    const documented = sections(doc).flatMap((s) => s.routes);
    expect([...documented].sort()).toEqual([...served].sort());
    for (const s of sections(doc)) {
      if (!s.websocket) expect(s.examples.length, s.routes.join(", ")).toBeGreaterThan(0);
    }
  });

  it("quotes the spec's messages verbatim", () => {
    const flat = doc.replace(/\s+/g, " ");
    for (const m of Object.values(JoinTokenMessages)) expect(doc).toContain(`\n${m}\n`);
    expect(flat).toContain(ControlPlaneMessages.targetKindNotAvailable("<kind>"));
    expect(flat).toContain(ControlPlaneMessages.noRepo("<name>"));
    for (const m of [GithubMessages.notInstalled("OWNER/REPO"), GithubMessages.badSignature])
      expect(flat).toContain(m);
    expect(flat).toContain(ControlPlaneMessages.hostOffline("<id>"));
    expect(flat).toContain(ControlPlaneMessages.versionInUse("<id>", ["<environments>"]));
    expect(flat).toContain(ControlPlaneMessages.projectHasEnvironments("<name>", "<n>" as unknown as number));
    expect(flat).toContain(HostMessages.holdsEnvironments("<id>", "<n>" as unknown as number));
    expect(flat).toContain(HostMessages.allDraining("<target>"));
    expect(flat).toContain(HostMessages.credentialInvalid);
    expect(flat).toContain(HostMessages.credentialNotApiToken);
    expect(flat).toContain(HostMessages.pageLimit(HOSTS_PAGE.max));
    expect(flat).toContain(HostMessages.pageAfter);
  });

  it("runs every example, top to bottom, against a live control plane", async () => {
    const failures: string[] = [];
    let ran = 0;
    for (const s of sections(doc)) {
      for (const script of s.examples) {
        ran++;
        const joinToken = (await t.admin.post("/v1/targets/local/join-tokens", {})).body.token as string;
        const deployments = await t.admin.get("/v1/projects/quickstart/deployments");
        const tokens = (await t.admin.get("/v1/tokens")).body.tokens as Array<{ id: string; name: string }>;
        const env = {
          DENV_URL: t.url,
          DENV_TOKEN: t.cp.adminToken,
          JOIN_TOKEN: joinToken,
          DEPLOYMENT_ID: deployments.status === 200 ? (deployments.body.deployments[0]?.id ?? "") : "",
          TOKEN_ID: tokens.find((x) => x.name === "ci")?.id ?? "",
        };
        const r = await run(script, cwd, env);
        if (r.code !== 0) failures.push(`${s.routes.join(", ")}: exit ${r.code}\n${script}\n${r.output}`);
        else if (/"status":\s*"failed"/.test(r.output))
          failures.push(`${s.routes.join(", ")}: a failed deployment\n${r.output}`);
      }
    }
    expect(failures).toEqual([]);
    expect(ran).toBeGreaterThanOrEqual(43);
  });
});
