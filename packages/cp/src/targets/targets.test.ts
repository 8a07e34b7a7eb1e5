import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  CAPABILITY_MEANINGS,
  ControlPlaneMessages,
  TARGET_CAPABILITIES,
  TARGET_KINDS,
  TARGET_SETTINGS,
  TargetKindName,
  TargetMessages,
} from "@denv/spec";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Log } from "../log.js";
import { FakeHost } from "../testing/fake-host.js";
import { deployed, startTestCp, type TestCp } from "../testing/harness.js";
import { HetznerTestServer } from "../testing/hetzner-server.js";

/**
 * Targets through the API: the capability table, settings and credentials (sealed at rest, never
 * returned or logged), and the hetzner driver end to end against a Hetzner Cloud API on loopback.
 */

const REPO = fileURLToPath(new URL("../../../../", import.meta.url));
const TOKEN = `hcloud-${randomBytes(24).toString("hex")}`;
const lines: string[] = [];
const capture: Log = {
  debug: (m, f) => lines.push(JSON.stringify({ m, f })),
  info: (m, f) => lines.push(JSON.stringify({ m, f })),
  warn: (m, f) => lines.push(JSON.stringify({ m, f })),
  error: (m, f) => lines.push(JSON.stringify({ m, f })),
};

/** Every byte the cp's SQLite database holds on disk (the file and its WAL). */
async function dbBytes(dataDir: string): Promise<string> {
  const names = (await readdir(dataDir)).filter((n) => n.startsWith("denv.db"));
  return (await Promise.all(names.map((n) => readFile(join(dataDir, n), "latin1")))).join("");
}

describe("targets", () => {
  let t: TestCp;
  let hz: HetznerTestServer;
  let bundleDir: string;
  const bundle = `// denvd bundle for the test ${randomBytes(8).toString("hex")}\n`;

  beforeAll(async () => {
    hz = await new HetznerTestServer(TOKEN).start();
    bundleDir = await mkdtemp(join(tmpdir(), "denv-bundle-"));
    await writeFile(join(bundleDir, "denvd.mjs"), bundle);
    t = await startTestCp({
      log: capture,
      denvdBundle: join(bundleDir, "denvd.mjs"),
      provisionIntervalMs: 3_600_000,
    });
  });
  afterAll(async () => {
    await t?.close();
    await hz?.close();
    await rm(bundleDir, { recursive: true, force: true });
  });

  const hetzner = (name: string, settings: Record<string, unknown> = {}) =>
    t.admin.post("/v1/targets", {
      name,
      kind: "hetzner",
      settings: { base_url: hz.url, ...settings },
      credentials: { api_token: TOKEN },
    });

  it("GET /v1/targets/kinds serves the capability table of packages/spec", async () => {
    const r = await t.admin.get("/v1/targets/kinds");
    expect(r.status).toBe(200);
    expect(r.body.kinds.map((k: { kind: string }) => k.kind)).toEqual(TargetKindName.options);
    for (const k of r.body.kinds) {
      const kind = k.kind as TargetKindName;
      expect(k.capabilities).toEqual(TARGET_KINDS[kind].capabilities);
      expect(k.settings).toEqual(Object.keys(TARGET_SETTINGS[kind].settings));
    }
    const available = r.body.kinds
      .filter((k: { available: boolean }) => k.available)
      .map((k: { kind: string }) => k.kind);
    // Every kind has its driver: modal, the last one, through a bridge as e2b, daytona and prime.
    expect(available).toEqual(TargetKindName.options);
  });

  it("bad settings and credentials are refused with one line naming them, and nothing is created", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [
        { settings: { region: "eu" } },
        TargetMessages.unknownSetting("hetzner", "region", Object.keys(TARGET_SETTINGS.hetzner.settings)),
      ],
      [
        { settings: { max_machines: "0" } },
        TargetMessages.badSetting("hetzner", "max_machines", "0", "a whole number >= 1"),
      ],
      [{ settings: { min_machines: 3, max_machines: 2 } }, TargetMessages.minAboveMax(3, 2)],
      [
        { settings: { labels: "team=a,bad key=x" } },
        TargetMessages.badSetting(
          "hetzner",
          "labels",
          "team=a,bad key=x",
          "k=v pairs separated by commas, keys and values of letters, digits, '.', '-' and '_'",
        ),
      ],
      [{ credentials: {} }, TargetMessages.missingCredential("hetzner", "api_token", "HCLOUD_TOKEN")],
      [
        { credentials: { api_token: TOKEN, secret: "x" } },
        TargetMessages.unknownCredential("hetzner", "secret", ["api_token"]),
      ],
    ];
    for (const [body, message] of cases) {
      const r = await t.admin.post("/v1/targets", {
        name: "bad",
        kind: "hetzner",
        settings: body.settings ?? {},
        credentials: body.credentials ?? { api_token: TOKEN },
      });
      expect([r.status, r.body.error.message]).toEqual([400, message]);
    }
    // A hosted kind's credentials are checked as a provisioned one's: modal takes two, both needed
    // (its bridge's key is the two joined), and a kind this control plane does not know is refused.
    const modal = await t.admin.post("/v1/targets", {
      name: "bad",
      kind: "modal",
      settings: {},
      credentials: { token_id: "ak-modal_id" },
    });
    expect([modal.status, modal.body.error.message]).toEqual([
      400,
      TargetMessages.missingCredential("modal", "token_secret", "MODAL_TOKEN_SECRET"),
    ]);
    const unknown = await t.admin.post("/v1/targets", { name: "bad", kind: "lambda", settings: {} });
    expect([unknown.status, unknown.body.error.code]).toEqual([400, "invalid_request"]);
    expect(unknown.body.error.message).toMatch(/^invalid request: kind: /);
    expect((await t.admin.get("/v1/targets")).body.targets.map((x: { name: string }) => x.name)).toEqual([
      "local",
    ]);
    expect(hz.servers.size).toBe(0);
  });

  it("a hetzner target keeps min_machines: servers with denv's labels and user data that joins with a single-use token", async () => {
    const r = await hetzner("cloud", { min_machines: 1, max_machines: 2, labels: "team=rl" });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({ name: "cloud", kind: "hetzner", credentials: ["api_token"] });
    expect(r.body.settings).toMatchObject({
      location: "fsn1",
      server_type: "cx22",
      min_machines: 1,
      max_machines: 2,
    });
    const machine = await waitForMachine("cloud", (m) => m.status === "running");
    const server = [...hz.servers.values()][0];
    expect(server?.name).toBe(machine.id);
    expect(server?.labels).toMatchObject({
      team: "rl",
      "ai.denv.managed": "true",
      "ai.denv.target": "cloud",
      "ai.denv.machine": machine.id,
    });
    expect(machine.cost_class).toBe("hetzner/cx22/fsn1 (0.0060/h gross)");
    // The user data fetches this cp's install script and carries the machine's join token.
    const userData = server?.user_data ?? "";
    expect(userData.startsWith("#cloud-config\n")).toBe(true);
    expect(userData).toContain(`curl -fsSL '${t.url}/v1/install/install.sh' | sh`);
    const token = /DENVD_TOKEN='(denvj_[^']+)'/.exec(userData)?.[1] ?? "";
    expect(token).not.toBe("");
    // The machine joins with it as the install script does (denvd join --name MACHINE --label ai.denv.machine=MACHINE).
    const h = await FakeHost.join(t.url, token, {
      name: machine.id,
      labels: { "ai.denv.machine": machine.id },
    });
    expect([h.id, h.target]).toEqual([machine.id, "cloud"]);
    await expect(FakeHost.join(t.url, token, { name: "again" })).rejects.toThrow(/join token/);
    await reconcile();
    const joined = await waitForMachine("cloud", (m) => m.status === "joined");
    expect(joined.host_id).toBe(machine.id);
    // Still one server: the minimum is met.
    expect(hz.servers.size).toBe(1);
  });

  it("the reconcile loop deletes a server with denv's labels that no record accounts for", async () => {
    const cpLabel = [...hz.servers.values()][0]?.labels["ai.denv.cp"] ?? "";
    const stray = await fetch(`${hz.url}/servers`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({
        name: "cloud-stray1",
        server_type: "cx22",
        image: "debian-13",
        location: "fsn1",
        labels: { "ai.denv.managed": "true", "ai.denv.cp": cpLabel, "ai.denv.target": "cloud" },
      }),
    });
    expect(stray.status).toBe(201);
    // Someone else's server in the same project (no denv labels) is left alone.
    await fetch(`${hz.url}/servers`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({
        name: "web-1",
        server_type: "cx22",
        image: "debian-13",
        location: "fsn1",
        labels: {},
      }),
    });
    await reconcile();
    const names = [...hz.servers.values()].map((s) => s.name).sort();
    expect(names).not.toContain("cloud-stray1");
    expect(names).toContain("web-1");
    const rows = (await t.admin.get("/v1/targets/cloud/machines")).body.machines;
    expect(rows.find((m: { id: string }) => m.id === "cloud-stray1")).toMatchObject({
      status: "deleted",
      error: "found at the provider with denv's labels and no record of it: deleted",
    });
  });

  it("a deploy that finds no host asks the driver for a machine, within max_machines", async () => {
    await hetzner("grow", { max_machines: 1 });
    await t.admin.post("/v1/projects", { name: "shop" });
    const deploy = () =>
      t.admin.upload(
        "POST",
        "/v1/projects/shop/deploy?environment=alpha&target=grow&wait=true",
        tarOf({ "compose.yaml": ONE }),
      );
    const first = await deploy();
    expect(first.body.status).toBe("failed");
    const machines = (await t.admin.get("/v1/targets/grow/machines")).body.machines;
    expect(machines).toHaveLength(1);
    expect(first.body.error.message).toBe(TargetMessages.machineStarting("grow", machines[0].id));
    const again = await deploy();
    expect(again.body.error.message).toBe(TargetMessages.machineStarting("grow", machines[0].id));
    expect((await t.admin.get("/v1/targets/grow/machines")).body.machines).toHaveLength(1);
    // A target with machines is not removed.
    const rm1 = await t.admin.del("/v1/targets/grow");
    expect([rm1.status, rm1.body.error.message]).toEqual([409, TargetMessages.targetInUse("grow", 1)]);
  });

  it("a file that needs a capability the target's kind lacks is refused at placement, before anything is created", async () => {
    // The row is written directly: a target added through the API would start its bridge.
    const db = new Database(join(t.dataDir, "denv.db"));
    db.prepare("insert into targets (name, kind, created_at, settings) values (?, ?, ?, ?)").run(
      "sbx",
      "e2b",
      new Date().toISOString(),
      "{}",
    );
    db.close();
    const r = await t.admin.upload(
      "POST",
      "/v1/projects/shop/deploy?environment=beta&target=sbx&wait=true",
      tarOf({ "compose.yaml": THREE }),
    );
    expect(r.body.status).toBe("failed");
    expect(r.body.error.message).toBe(
      TargetMessages.capabilityMissing("sbx", "e2b", "multi_service", "a file of 3 services needs"),
    );
    expect(r.body.phases.find((p: { name: string }) => p.name === "place")?.status).toBe("failed");
    expect((await t.admin.get("/v1/environments/shop/beta")).status).toBe(404);
  });

  it("the place phase's evidence names the target's kind and what enforced the protections", async () => {
    await t.host();
    const d = await deployed(t, "inv");
    expect(d.phases.find((p: { name: string }) => p.name === "place")?.evidence.target).toEqual({
      name: "local",
      kind: "hosts",
      enforced_by: "denvd",
    });
  });

  it("credentials are sealed at rest, never returned and never logged", async () => {
    const listed = JSON.stringify((await t.admin.get("/v1/targets")).body);
    const shown = JSON.stringify((await t.admin.get("/v1/targets/cloud")).body);
    const machines = JSON.stringify((await t.admin.get("/v1/targets/cloud/machines")).body);
    for (const answer of [listed, shown, machines]) expect(answer).not.toContain(TOKEN);
    expect(JSON.parse(shown).credentials).toEqual(["api_token"]);
    expect(await dbBytes(t.dataDir)).not.toContain(TOKEN);
    const db = new Database(join(t.dataDir, "denv.db"), { readonly: true });
    const row = db.prepare("select credentials from targets where name = 'cloud'").get() as {
      credentials: string;
    };
    db.close();
    expect(row.credentials).toMatch(/^denvc1\.[0-9a-f]{8}\./);
    expect(lines.join("\n")).not.toContain(TOKEN);
    expect(lines.length).toBeGreaterThan(0);
    // Every call to Hetzner carried it, and only there.
    expect(new Set(hz.authorizations)).toEqual(new Set([`Bearer ${TOKEN}`]));
  });

  it("a rotation: restarted with a new key and the old one as previous, credentials are resealed and still open", async () => {
    const oldKey = (await readFile(join(t.dataDir, "credential-key"), "utf8")).trim();
    const newKey = randomBytes(32).toString("base64");
    await t.restart({ credentialKey: newKey, credentialKeysPrevious: [oldKey] });
    const db = new Database(join(t.dataDir, "denv.db"), { readonly: true });
    const row = db.prepare("select credentials from targets where name = 'cloud'").get() as {
      credentials: string;
    };
    db.close();
    await t.restart({ credentialKey: newKey, credentialKeysPrevious: [] });
    const before = hz.requests.length;
    await reconcile();
    expect(hz.requests.length).toBeGreaterThan(before);
    expect(hz.authorizations.at(-1)).toBe(`Bearer ${TOKEN}`);
    expect(row.credentials.split(".")[1]).toBe(
      createHash("sha256").update(Buffer.from(newKey, "base64")).digest("hex").slice(0, 8),
    );
  });

  it("the cp serves the install script and the denvd bundle at stable URLs, without a token", async () => {
    const script = await t.anon.get("/v1/install/install.sh");
    expect(script.status).toBe(200);
    const sha = createHash("sha256").update(bundle).digest("hex");
    expect(script.body).toContain(`SHA256='${sha}'`);
    expect(script.body).toContain(`CP_URL='${t.url}'`);
    execFileSync("sh", ["-n"], { input: script.body });
    const b = await fetch(`${t.url}/v1/install/denvd.mjs`);
    expect([b.status, b.headers.get("x-denv-sha256"), await b.text()]).toEqual([200, sha, bundle]);
    await rm(join(bundleDir, "denvd.mjs"));
    const missing = await t.anon.get("/v1/install/denvd.mjs");
    expect([missing.status, missing.body.error.message]).toEqual([
      404,
      TargetMessages.bundleMissing(join(bundleDir, "denvd.mjs")),
    ]);
    await writeFile(join(bundleDir, "denvd.mjs"), bundle);
  });

  it("targets show, machines and rm: one-line refusals, and rm of an empty target", async () => {
    expect((await t.admin.get("/v1/targets/nope")).body.error.message).toBe("target nope not found");
    const local = await t.admin.get("/v1/targets/local/machines");
    expect([local.status, local.body.error.message]).toEqual([
      400,
      TargetMessages.notProvisioned("local", "hosts"),
    ]);
    const rmLocal = await t.admin.del("/v1/targets/local");
    expect([rmLocal.status, rmLocal.body.error.message]).toEqual([409, TargetMessages.localTarget]);
    expect((await hetzner("empty")).status).toBe(201);
    expect((await t.admin.del("/v1/targets/empty")).status).toBe(204);
    expect((await t.admin.get("/v1/targets/empty")).status).toBe(404);
  });

  async function reconcile(): Promise<void> {
    // The loop's tick, without waiting for its interval: a restart runs none, so ask directly.
    const { status } = await t.admin.post("/v1/targets/cloud/reconcile");
    expect(status).toBe(204);
  }

  async function waitForMachine(
    target: string,
    ok: (m: { status: string }) => boolean,
  ): Promise<{ id: string; status: string; cost_class: string; host_id?: string }> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const ms = (await t.admin.get(`/v1/targets/${target}/machines`)).body.machines ?? [];
      const m = ms.find(ok);
      if (m) return m;
      if (Date.now() > deadline) throw new Error(`no machine of ${target} matched: ${JSON.stringify(ms)}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }
});

const ONE = "services:\n  main:\n    image: busybox\n";
const THREE =
  "services:\n  main:\n    image: busybox\n  db:\n    image: busybox\n  cache:\n    image: busybox\n";

/** A plain tar of `files` (the tar binary, as the CLI's upload is a tar). */
function tarOf(files: Record<string, string>): Buffer {
  const dir = execFileSync("mktemp", ["-d"]).toString().trim();
  for (const [name, text] of Object.entries(files))
    execFileSync("sh", ["-c", `cat > "${dir}/${name}"`], { input: text });
  const out = execFileSync("tar", ["-C", dir, "-cf", "-", "."]);
  execFileSync("rm", ["-rf", dir]);
  return out;
}

describe("docs/reference/targets.md", () => {
  const page = readFileSync(join(REPO, "docs", "reference/targets.md"), "utf8");

  it("prints the capability table of packages/spec, row by row", () => {
    const section = page.slice(page.indexOf("## Capabilities"), page.indexOf("## Settings"));
    const rows = section
      .split("\n")
      .filter((l) => /^\| (`[a-z_]+`|available) /.test(l))
      .map((l) =>
        l
          .split("|")
          .slice(1, -1)
          .map((c) => c.trim().replaceAll("`", "")),
      );
    const kinds = TargetKindName.options;
    const want = [
      ...TARGET_CAPABILITIES.map((c) => [
        c,
        ...kinds.map((k) => (TARGET_KINDS[k].capabilities[c] ? "yes" : "no")),
        CAPABILITY_MEANINGS[c],
      ]),
      ["available", ...kinds.map((k) => (TARGET_KINDS[k].available ? "yes" : "no"))],
    ];
    expect(rows.map((r) => r.slice(0, want[0]?.length))).toEqual(
      want.map((w, i) => (i === want.length - 1 ? [...w, rows.at(-1)?.at(-1)] : w)),
    );
    const header = page.split("\n").find((l) => l.startsWith("| capability "));
    expect(
      header
        ?.split("|")
        .slice(2, 2 + kinds.length)
        .map((c) => c.trim()),
    ).toEqual(kinds.map((k) => `\`${k}\``));
  });

  it("quotes the capability refusal and the provisioned target's refusals as spec has them", () => {
    const flat = page.replace(/\s+/g, " ");
    for (const m of [
      TargetMessages.capabilityMissing("<target>", "<kind>", "<capability>", "<why>"),
      TargetMessages.capabilityMissing("sbx", "e2b", "multi_service", "a file of 3 services needs"),
      TargetMessages.machineStarting("<target>", "<id>"),
      TargetMessages.atMaxMachines("<target>", "<n>" as unknown as number),
      TargetMessages.installFailed("<id>", "<why>"),
      ControlPlaneMessages.targetKindNotAvailable("<kind>"),
    ]) {
      expect(flat.includes(m), m).toBe(true);
    }
  });
});
