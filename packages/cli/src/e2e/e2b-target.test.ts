import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { TargetMessages } from "@denv/spec";
import { afterAll, beforeAll, expect, it } from "vitest";
import { E2bServer } from "../../../denvd/src/providers/e2b/testing/e2b-server.js";
import { runnableLines } from "./doc-blocks.js";
import { waitUntil } from "./fixture-procs.js";
import { cli, repo, run, type Stack, startStack } from "./stack.js";

/**
 * A target of kind e2b on the real stack (`denv up`), against the E2B double (real containers on
 * this machine's engine, reached through the real `e2b` SDK by the bridge the control plane
 * starts): how-to/connect-a-target.md's e2b block runs as written (the API key in E2B_API_KEY,
 * examples/sandbox-hello deployed as one sandbox, exec'd as the agent, the target removed with
 * its bridge, examples/quickstart-single deployed and graded 0 then 1 with the verifier in a fork's
 * sandbox); a file of two services is refused at placement for what E2B lacks, creating nothing.
 * Contacts only 127.0.0.1 and containers the double made.
 */
const API_KEY = `e2b_${randomBytes(20).toString("hex")}`;

let stack: Stack;
let server: E2bServer;

beforeAll(async () => {
  [server, stack] = await Promise.all([
    new E2bServer({
      apiKey: API_KEY,
      templates: {},
      baseImages: { "debian:bookworm-slim": "debian:bookworm-slim" },
    }).start(),
    // Targets reconciled every half second: a bridge left by a crashed cp is found at once.
    startStack({ env: { DENV_CP_PROVISION_INTERVAL_MS: "500" } }),
  ]);
}, 300_000);

afterAll(async () => {
  await stack?.close();
  await server?.close();
}, 180_000);

it("how-to/connect-a-target.md's e2b block runs as written: the bridge joins, a sandbox runs the example, nothing is left", async () => {
  const env = {
    ...stack.env,
    E2B_API_KEY: API_KEY,
    E2B_API_URL: server.apiUrl,
    E2B_SANDBOX_URL: server.sandboxUrl,
  };
  const sh = (line: string) =>
    run(
      "bash",
      ["-c", `denv() { node ${JSON.stringify(cli)} "$@"; }\ncd ${JSON.stringify(repo)}\n${line}`],
      env,
    );
  const lines = runnableLines("how-to/connect-a-target.md", "e2b");
  expect(lines.length).toBeGreaterThan(5);
  let transcript = "";
  for (const [i, { line, code }] of lines.entries()) {
    const r = await sh(line);
    transcript += `$ ${line}\n${r.stdout}${r.stderr}`;
    expect(r.code, `${line}\n${r.stdout}\n${r.stderr}`).toBe(code);
    if (i === 0) {
      // The page says to deploy once the bridge is online.
      await waitUntil("the bridge's host is online", 60_000, async () => {
        const { hosts } = await stack.json<{ hosts: Array<{ target: string; status: string }> }>([
          "hosts",
          "list",
        ]);
        return hosts.some((h) => h.target === "sbx" && h.status === "online");
      });
    }
    if (line.startsWith("denv deploy")) expect(server.sandboxes.size).toBe(1);
  }
  // Stopped (E2B's pause) and started again (a resume, probed): its files are where they were.
  expect(transcript).toMatch(
    /^\$ denv env stop hello-sbx\/alpha\ndeployment \S+ succeeded in \S+: stop hello-sbx\/alpha\n/m,
  );
  expect(transcript).toMatch(
    /^\$ denv env start hello-sbx\/alpha\ndeployment \S+ succeeded in \S+: start hello-sbx\/alpha\n(.+\n)*? {2}probe done/m,
  );
  expect(transcript).toContain(
    `$ denv exec hello-sbx/alpha -- cat hello.txt\n${readFileSync(path.join(repo, "examples/sandbox-hello/hello.txt"), "utf8")}`,
  );
  // The quickstart's shop in one sandbox, graded in a fork's sandbox: 0 untouched, 1 fixed.
  const rewards = [...transcript.matchAll(/^\$ denv verify shop-sbx\/alpha\nreward +(\S+)\n/gm)].map(
    (m) => m[1],
  );
  expect(rewards, transcript).toEqual(["0", "1"]);
  expect(transcript).toMatch(/^status +graded$/m);
  // A sandbox of the project: a fork in a sandbox of its own (left for the target's removal).
  expect(transcript).toMatch(/^\$ denv sandboxes create shop-sbx --ttl 600\nid +shop-sbx\/sbx-[a-z0-9]+\n/m);
  expect(transcript).toContain("pool: miss");
  // Removing the target gave back everything its bridge made at E2B: no sandbox, no snapshot of
  // the versions, no template.
  expect(server.sandboxes.size).toBe(0);
  expect(server.snapshots.size).toBe(0);
  expect(server.templates()).toEqual([]);
  const { hosts } = await stack.json<{ hosts: Array<{ target: string }> }>(["hosts", "list"]);
  expect(hosts.filter((h) => h.target === "sbx")).toEqual([]);
}, 300_000);

it("refuses a file of two services on E2B at placement, creating nothing; a removal the bridge cannot release (key revoked) keeps the target", async () => {
  const add = await run(
    process.execPath,
    [cli, "targets", "add", "e2b", "sbx2", `base_url=${server.apiUrl}`, `sandbox_url=${server.sandboxUrl}`],
    { ...stack.env, E2B_API_KEY: API_KEY },
  );
  expect(add.code, add.stderr).toBe(0);
  await waitUntil("the bridge's host is online", 60_000, async () => {
    const { hosts } = await stack.json<{ hosts: Array<{ target: string; status: string }> }>([
      "hosts",
      "list",
    ]);
    return hosts.some((h) => h.target === "sbx2" && h.status === "online");
  });
  expect((await stack.denv(["projects", "create", "shop2"])).code).toBe(0);
  const shop = await stack.denv([
    "deploy",
    path.join(repo, "examples/quickstart"),
    "--project",
    "shop2",
    "--target",
    "sbx2",
  ]);
  expect(shop.code).toBe(1);
  expect(shop.stderr).toContain(
    TargetMessages.capabilityMissing("sbx2", "e2b", "multi_service", "a file of 2 services needs"),
  );
  expect(server.sandboxes.size).toBe(0);
  // With the key revoked at E2B the bridge cannot give back what it holds: the target stays,
  // with the reason; once E2B takes the key again, the removal goes through.
  server.setApiKey("revoked");
  const refused = await stack.denv(["targets", "rm", "sbx2", "--force"]);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain(TargetMessages.removeFailed("sbx2", "bridge sbx2-"));
  expect(refused.stderr).toContain("Invalid API key");
  expect((await stack.denv(["targets", "show", "sbx2"])).code).toBe(0);
  server.setApiKey(API_KEY);
  const removed = await stack.denv(["targets", "rm", "sbx2", "--force"]);
  expect(removed.code, removed.stderr).toBe(0);
}, 300_000);

it("a bridge that a crashed control plane left running is adopted, never started twice", async () => {
  const add = await run(
    process.execPath,
    [cli, "targets", "add", "e2b", "sbx3", `base_url=${server.apiUrl}`, `sandbox_url=${server.sandboxUrl}`],
    { ...stack.env, E2B_API_KEY: API_KEY },
  );
  expect(add.code, add.stderr).toBe(0);
  const online = async () => {
    const { hosts } = await stack.json<{ hosts: Array<{ target: string; status: string }> }>([
      "hosts",
      "list",
    ]);
    return hosts.some((h) => h.target === "sbx3" && h.status === "online");
  };
  await waitUntil("the bridge's host is online", 60_000, online);
  const bridges = path.join(stack.dataDir, "cp", "bridges");
  const [machine] = readdirSync(bridges);
  if (machine === undefined) throw new Error("no bridge folder");
  const stateDir = path.join(bridges, machine, "state");
  // Every process running that bridge (its state folder in its command line).
  const processes = () =>
    readdirSync("/proc")
      .filter((n) => /^\d+$/.test(n))
      .filter((pid) => {
        try {
          return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").includes(stateDir);
        } catch {
          return false;
        }
      });
  const before = processes();
  expect(before).toHaveLength(1);

  // The control plane dies without stopping its bridge, and comes up again.
  process.kill(Number(readFileSync(path.join(stack.dataDir, "cp.pid"), "utf8")), "SIGKILL");
  const url = new URL(stack.url);
  const up = await stack.denv(["up", "--data-dir", stack.dataDir, "--listen", `${url.hostname}:${url.port}`]);
  expect(up.code, up.stderr).toBe(0);
  await waitUntil("the bridge is online again", 60_000, online);
  // Several reconciles later, still the one process it was.
  await new Promise((r) => setTimeout(r, 2_000));
  expect(processes()).toEqual(before);

  expect((await stack.denv(["targets", "rm", "sbx3", "--force"])).code).toBe(0);
  expect(processes()).toEqual([]);
}, 300_000);
