import { ProviderMessages, TargetMessages } from "@denv/spec";
import { afterAll, beforeAll, expect, it } from "vitest";
import {
  type PrimeDouble,
  startPrimeDouble,
} from "../../../denvd/src/providers/prime/testing/prime-double.js";
import { runnableLines } from "./doc-blocks.js";
import { waitUntil } from "./fixture-procs.js";
import { cli, repo, run, type Stack, startStack } from "./stack.js";

/**
 * A target of kind prime on the real stack (`denv up`), against the Prime double (Prime's API and
 * gateway on 127.0.0.1, sandboxes as real containers on this machine's engine, reached by the
 * bridge the control plane starts): how-to/connect-a-target.md's prime block runs as written
 * (examples/quickstart-single built by Prime's image API and deployed as one sandbox, graded 0
 * then 1 in a fork's sandbox as uid 1001, stop refused, a sandbox of the project made, the target
 * removed with everything its bridge made); a file of two services is refused at placement for
 * what Prime lacks, creating nothing. quickstart-single's Dockerfile installs python3, so the
 * double's image builds get the engine's default network (Debian's package mirrors, as the E2B
 * and Daytona doubles' builds of it); the sandboxes reach nothing.
 */
let stack: Stack;
let double: PrimeDouble;

/** The double's sandboxes that are not deleted. */
const liveSandboxes = () =>
  [...double.server.sandboxes.all.values()].filter((s) => s.status !== "TERMINATED").length;

beforeAll(async () => {
  [double, stack] = await Promise.all([startPrimeDouble({ buildNetwork: "default" }), startStack()]);
}, 300_000);

afterAll(async () => {
  await stack?.close();
  await double?.close();
  expect(double?.leftovers(), "what the test made at the double").toEqual([]);
}, 180_000);

it("how-to/connect-a-target.md's prime block runs as written: the bridge joins, the shop is graded 0 then 1, nothing is left", async () => {
  const env = { ...stack.env, ...double.sdkEnv };
  const sh = (line: string) =>
    run(
      "bash",
      ["-c", `denv() { node ${JSON.stringify(cli)} "$@"; }\ncd ${JSON.stringify(repo)}\n${line}`],
      env,
    );
  const lines = runnableLines("how-to/connect-a-target.md", "prime");
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
        return hosts.some((h) => h.target === "prm" && h.status === "online");
      });
    }
    if (line.startsWith("denv deploy")) expect(liveSandboxes()).toBe(1);
    if (line.startsWith("denv env stop")) {
      expect(r.stderr).toContain(
        ProviderMessages.unsupportedVerb("Prime", "stop", ProviderMessages.noPause("Prime")),
      );
    }
    if (i === 1) {
      // The place of a target that cannot run two services: refused before anything is made.
      expect((await stack.denv(["projects", "create", "shop2"])).code).toBe(0);
      const two = await stack.denv([
        "deploy",
        `${repo}/examples/quickstart`,
        "--project",
        "shop2",
        "--target",
        "prm",
      ]);
      expect(two.code).toBe(1);
      expect(two.stderr).toContain(
        TargetMessages.capabilityMissing("prm", "prime", "multi_service", "a file of 2 services needs"),
      );
      expect(liveSandboxes()).toBe(0);
      expect(double.server.images.builds.size).toBe(0);
    }
  }
  expect(transcript).toMatch(/^\$ denv exec shop-prm\/alpha -- id -u\n1000\n/m);
  const rewards = [...transcript.matchAll(/^\$ denv verify shop-prm\/alpha\nreward +(\S+)\n/gm)].map(
    (m) => m[1],
  );
  expect(rewards, transcript).toEqual(["0", "1"]);
  expect(transcript).toMatch(/^status +graded$/m);
  expect(transcript).toMatch(/^\$ denv sandboxes create shop-prm --ttl 600\nid +shop-prm\/sbx-[a-z0-9]+\n/m);
  // Removing the target gave back everything its bridge made at Prime: no sandbox, no checkpoint.
  expect(liveSandboxes()).toBe(0);
  expect([...double.server.checkpoints.all.keys()]).toEqual([]);
  const { hosts } = await stack.json<{ hosts: Array<{ target: string }> }>(["hosts", "list"]);
  expect(hosts.filter((h) => h.target === "prm")).toEqual([]);
}, 400_000);
