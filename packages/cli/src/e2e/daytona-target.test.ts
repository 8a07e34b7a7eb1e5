import { Daytona } from "@daytonaio/sdk";
import { TargetMessages } from "@denv/spec";
import { afterAll, beforeAll, expect, it } from "vitest";
import {
  type DaytonaDouble,
  startDaytonaDouble,
} from "../../../denvd/src/providers/daytona/testing/daytona-double.js";
import { runnableLines } from "./doc-blocks.js";
import { waitUntil } from "./fixture-procs.js";
import { cli, repo, run, type Stack, startStack } from "./stack.js";

/**
 * A target of kind daytona on the real stack (`denv up`), against the Daytona double (real
 * containers on this machine's engine, reached through the real `@daytonaio/sdk` by the bridge
 * the control plane starts): how-to/connect-a-target.md's daytona block runs as written
 * (examples/quickstart-single deployed as one sandbox whose one user is the agent's, graded 0 then
 * 1 in a sandbox of the verifier's own, stopped and started, a sandbox of the project made, the
 * target removed with everything its bridge made); a file of two services is refused at
 * placement for what Daytona lacks, creating nothing. Contacts only 127.0.0.1 and what the
 * double made.
 */
let stack: Stack;
let double: DaytonaDouble;

beforeAll(async () => {
  [double, stack] = await Promise.all([startDaytonaDouble(), startStack()]);
}, 300_000);

afterAll(async () => {
  await stack?.close();
  await double?.close();
  expect(double?.leftovers(), "what the test made at the double").toEqual([]);
}, 180_000);

it("how-to/connect-a-target.md's daytona block runs as written: the bridge joins, the shop is graded 0 then 1, nothing is left", async () => {
  const env = { ...stack.env, DAYTONA_API_KEY: double.apiKey, DAYTONA_API_URL: double.url };
  const sh = (line: string) =>
    run(
      "bash",
      ["-c", `denv() { node ${JSON.stringify(cli)} "$@"; }\ncd ${JSON.stringify(repo)}\n${line}`],
      env,
    );
  const lines = runnableLines("how-to/connect-a-target.md", "daytona");
  expect(lines.length).toBeGreaterThan(5);
  let transcript = "";
  for (const [i, { line, code }] of lines.entries()) {
    const r = await sh(line);
    transcript += `$ ${line}\n${r.stdout}${r.stderr}`;
    expect(r.code, `${line}\n${r.stdout}\n${r.stderr}`).toBe(code);
    if (i === 0) {
      await waitUntil("the bridge's host is online", 60_000, async () => {
        const { hosts } = await stack.json<{ hosts: Array<{ target: string; status: string }> }>([
          "hosts",
          "list",
        ]);
        return hosts.some((h) => h.target === "dtn" && h.status === "online");
      });
    }
    if (line.startsWith("denv deploy")) expect(double.liveSandboxes()).toBe(1);
    if (i === 1) {
      // The place of a target that cannot run two services: refused before anything is made.
      expect((await stack.denv(["projects", "create", "shop2"])).code).toBe(0);
      const two = await stack.denv([
        "deploy",
        `${repo}/examples/quickstart`,
        "--project",
        "shop2",
        "--target",
        "dtn",
      ]);
      expect(two.code).toBe(1);
      expect(two.stderr).toContain(
        TargetMessages.capabilityMissing("dtn", "daytona", "multi_service", "a file of 2 services needs"),
      );
      expect(double.liveSandboxes()).toBe(0);
    }
  }
  expect(transcript).toMatch(/^\$ denv exec shop-dtn\/alpha -- id -u\n1000\n/m);
  const rewards = [...transcript.matchAll(/^\$ denv verify shop-dtn\/alpha\nreward +(\S+)\n/gm)].map(
    (m) => m[1],
  );
  expect(rewards, transcript).toEqual(["0", "1"]);
  expect(transcript).toMatch(/^status +graded$/m);
  expect(transcript).toMatch(/^\$ denv sandboxes create shop-dtn --ttl 600\nid +shop-dtn\/sbx-[a-z0-9]+\n/m);
  // Removing the target gave back everything its bridge made at Daytona.
  expect(double.liveSandboxes()).toBe(0);
  expect((await new Daytona(double.config).snapshot.list()).total).toBe(0);
  const { hosts } = await stack.json<{ hosts: Array<{ target: string }> }>(["hosts", "list"]);
  expect(hosts.filter((h) => h.target === "dtn")).toEqual([]);
}, 400_000);
