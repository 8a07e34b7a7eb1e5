import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { type FakeControlPlane, startFakeControlPlane } from "@denv/sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildCli, denv, oneJson, removeTempDirs, tempDir } from "./testing/harness.js";

/**
 * The --json contract, command by command: exactly one JSON object on stdout (progress on
 * stderr), the documented exit code, and `{"ok": false, "error": {code, message}}` on failure.
 */

let fake: FakeControlPlane;
let env: Record<string, string>;
let projectDir: string;
/** The id of the deployment the deploy row made, for the rows that show it. */
let deployment = "";
/** The id of the join token the join-token create row made. */
let joinTokenId = "";

beforeAll(async () => {
  buildCli();
  fake = await startFakeControlPlane();
  env = { DENV_URL: fake.url, DENV_TOKEN: fake.adminToken };
  projectDir = tempDir("json");
  mkdirSync(path.join(projectDir, "quickstart"));
  writeFileSync(path.join(projectDir, "quickstart", "compose.yaml"), "services: {main: {image: alpine}}\n");
});
afterAll(async () => {
  await fake?.close();
  removeTempDirs();
});

/** [args, exit code, a check of the object]. Run in order: later rows use what earlier ones made. */
const CASES: [string[], number, (o: Record<string, unknown>) => void][] = [
  [
    ["login", "--url", "URL", "--token", "TOKEN"],
    0,
    (o) => expect(o.whoami).toMatchObject({ role: "admin" }),
  ],
  [["config", "get", "url"], 0, (o) => expect(o).toMatchObject({ key: "url", source: "env" })],
  [
    ["config", "set", "project", "quickstart"],
    0,
    (o) => expect(o).toMatchObject({ key: "project", value: "quickstart" }),
  ],
  [["config", "unset", "project"], 0, (o) => expect(o.key).toBe("project")],
  [
    ["projects", "create", "other", "--kind", "service"],
    0,
    (o) => expect(o).toMatchObject({ name: "other", kind: "service" }),
  ],
  [["projects", "list"], 0, (o) => expect(o.projects).toHaveLength(2)],
  [["projects", "rm", "other"], 0, (o) => expect(o).toEqual({ deleted: "other" })],
  [
    ["deploy", "DIR"],
    0,
    (o) => {
      expect(o).toMatchObject({ kind: "deploy", status: "succeeded", environment: "quickstart/alpha" });
      deployment = String(o.id);
    },
  ],
  [["deploy", "DIR", "--env", "beta", "--no-wait"], 0, (o) => expect(o).toMatchObject({ status: "queued" })],
  [
    ["deployments", "list", "quickstart"],
    0,
    (o) => expect((o.deployments as unknown[]).length).toBeGreaterThan(0),
  ],
  [["deployments", "show", "DEP"], 0, (o) => expect(o.kind).toBe("deploy")],
  [
    ["deployments", "log", "DEP"],
    0,
    (o) => expect((o.events as { type: string }[]).at(-1)?.type).toBe("done"),
  ],
  [["env", "list", "quickstart"], 0, (o) => expect(Array.isArray(o.environments)).toBe(true)],
  [["env", "show", "quickstart/alpha"], 0, (o) => expect(o.id).toBe("quickstart/alpha")],
  [
    ["env", "fork", "quickstart/alpha", "--name", "f1"],
    0,
    (o) => expect(o.result).toMatchObject({ id: "quickstart/f1" }),
  ],
  [["env", "snapshot", "quickstart/f1"], 0, (o) => expect(o.kind).toBe("snapshot")],
  [["env", "rollback", "quickstart/f1", "--version", "1"], 0, (o) => expect(o.kind).toBe("rollback")],
  [["env", "stop", "quickstart/f1"], 0, (o) => expect(o.kind).toBe("stop")],
  [["env", "start", "quickstart/f1"], 0, (o) => expect(o.kind).toBe("start")],
  [["env", "destroy", "quickstart/f1"], 0, (o) => expect(o.kind).toBe("destroy")],
  [["versions", "list", "quickstart"], 0, (o) => expect((o.versions as unknown[]).length).toBeGreaterThan(1)],
  [["versions", "show", "quickstart@v1"], 0, (o) => expect(o.number).toBe(1)],
  [["versions", "rm", "quickstart@v99"], 1, (o) => expect(o.error).toMatchObject({ code: "not_found" })],
  [["versions", "rm", "quickstart@v1"], 0, (o) => expect(o).toEqual({ deleted: "quickstart@v1" })],
  [
    ["logs", "quickstart/alpha", "--tail", "2"],
    0,
    (o) => expect(o.stdout).toBe("quickstart/alpha all line 2\nquickstart/alpha all line 3\n"),
  ],
  [
    ["exec", "quickstart/alpha", "--", "echo", "hi"],
    0,
    (o) => expect(o).toMatchObject({ exit_code: 0, stdout: "hi\n" }),
  ],
  [["exec", "quickstart/alpha", "--", "exit", "3"], 3, (o) => expect(o.exit_code).toBe(3)],
  [["verify", "quickstart/alpha"], 0, (o) => expect(o).toMatchObject({ status: "graded", reward: 0.75 })],
  [
    ["sandboxes", "create", "quickstart", "--name", "ep-1", "--ttl", "60"],
    0,
    (o) => expect(o).toMatchObject({ sandbox: true }),
  ],
  [["sandboxes", "list"], 0, (o) => expect(o.sandboxes).toHaveLength(1)],
  [
    ["sandboxes", "rm", "quickstart/ep-1"],
    0,
    (o) =>
      expect(o).toEqual({ deleted: "quickstart/ep-1", status: "destroying", deployment: "dep_destroy_ep-1" }),
  ],
  [["targets", "ls"], 0, (o) => expect(o.targets).toHaveLength(1)],
  [
    ["targets", "add", "hosts", "pool-2"],
    0,
    (o) => expect(o).toMatchObject({ name: "pool-2", kind: "hosts" }),
  ],
  [
    ["targets", "add", "aws", "cloud"],
    1,
    (o) => expect(o.error).toMatchObject({ message: "target kind aws is not available yet" }),
  ],
  [["hosts", "list"], 0, (o) => expect(o.hosts).toHaveLength(1)],
  [
    ["join-token", "create", "--target", "local", "--uses", "2", "--ttl", "60"],
    0,
    (o) => {
      expect(o).toMatchObject({ uses_left: 2 });
      joinTokenId = String(o.id);
    },
  ],
  [
    ["join-token", "list"],
    0,
    (o) => expect(o.join_tokens).toEqual([expect.objectContaining({ uses_left: 2 })]),
  ],
  [["join-token", "revoke", "JT"], 0, (o) => expect(o).toEqual({ revoked: joinTokenId, target: "local" })],
  [
    ["join-token", "revoke", "jt_nope", "--target", "nowhere"],
    1,
    (o) => expect(o.error).toMatchObject({ code: "not_found" }),
  ],
  [["hosts", "drain", "host-1"], 0, (o) => expect(o).toMatchObject({ id: "host-1", draining: true })],
  [
    ["hosts", "rm", "host-1"],
    1,
    (o) => expect(o.error).toMatchObject({ code: "conflict", message: expect.stringContaining("--force") }),
  ],
  [
    ["hosts", "rm", "host-1", "--force"],
    0,
    (o) =>
      expect(o).toMatchObject({ id: "host-1", environments: expect.arrayContaining(["quickstart/alpha"]) }),
  ],
  [
    ["env", "show", "quickstart/nope"],
    1,
    (o) =>
      expect(o).toEqual({
        ok: false,
        error: { code: "not_found", message: "environment 'quickstart/nope' does not exist" },
      }),
  ],
  [
    ["env", "show"],
    2,
    (o) =>
      expect(o).toEqual({ ok: false, error: { code: "invalid_request", message: "missing PROJECT/ENV" } }),
  ],
  [
    ["projects", "list", "--bogus"],
    2,
    (o) => expect(o.error).toMatchObject({ message: "unknown flag '--bogus'" }),
  ],
  [["nonsense"], 2, (o) => expect(o.error).toMatchObject({ message: "unknown command 'nonsense'" })],
  [
    ["env", "nonsense"],
    2,
    (o) => expect(o.error).toMatchObject({ message: "unknown subcommand 'env nonsense'" }),
  ],
];

describe("--json prints exactly one object", () => {
  it.each(CASES.map(([args, code, check], i) => [args.join(" "), i, code, check] as const))(
    "denv %s",
    async (_name, i, code, check) => {
      const values: Record<string, string> = {
        URL: fake.url,
        TOKEN: fake.adminToken,
        DIR: path.join(projectDir, "quickstart"),
        DEP: deployment,
        JT: joinTokenId,
      };
      const args = (CASES[i]?.[0] ?? []).map((a) => values[a] ?? a);
      // Before `--`: what follows it is exec's command.
      const dashes = args.indexOf("--");
      if (dashes === -1) args.push("--json");
      else args.splice(dashes, 0, "--json");
      const run = await denv(args, { env });
      expect(run.status, run.stderr).toBe(code);
      check(oneJson(run.stdout));
    },
  );

  it("keeps the --json of a command's arguments apart from exec's command", async () => {
    const run = await denv(["exec", "quickstart/alpha", "echo", "--json"], { env });
    expect(run.status).toBe(0);
    expect(run.stdout).toBe("--json\n");
  });
});
