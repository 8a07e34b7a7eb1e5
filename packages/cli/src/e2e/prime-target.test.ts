import { ProviderMessages } from "@denv/spec";
import { Labels } from "@denv/spec/labels";
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
 * gateway on 127.0.0.1, sandboxes as real containers on this machine's engine, private networks
 * as Docker networks with no address of the host's, reached by the bridge the control plane
 * starts): how-to/connect-a-target.md's prime block runs as written (the whole examples/quickstart,
 * its app, db and verifier images built by Prime's image API, deployed as a sandbox per service on
 * a private network, graded 0 then 1 by the verifier in a sandbox of its own image on the fork's
 * network as uid 1001, stop refused, a sandbox of the project made, the target removed with
 * everything its bridge made). The quickstart's Dockerfiles install Debian packages, so the
 * double's image builds get the engine's default network (Debian's package mirrors, as the E2B and
 * Daytona doubles' builds); the sandboxes reach nothing outside their network.
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
    if (line.startsWith("denv deploy")) {
      // A sandbox per service, on one private network of the environment's.
      expect(liveSandboxes()).toBe(2);
      expect(double.server.networks.all.size).toBe(1);
    }
    if (line.startsWith("denv env stop")) {
      expect(r.stderr).toContain(
        ProviderMessages.unsupportedVerb("Prime", "stop", ProviderMessages.noPause("Prime")),
      );
    }
  }
  expect(transcript).toMatch(/^\$ denv exec shop-prm\/alpha -- id -u\n1000\n/m);
  const rewards = [...transcript.matchAll(/^\$ denv verify shop-prm\/alpha\nreward +(\S+)\n/gm)].map(
    (m) => m[1],
  );
  expect(rewards, transcript).toEqual(["0", "1"]);
  // The app resolves db at its member's address on the network; the verifier ran in its own sandbox.
  expect(transcript).toMatch(/^\$ denv exec shop-prm\/alpha -- getent hosts db\n\S+ +db\n/m);
  // Each verify graded in a sandbox of the verifier's own image, none of a service's.
  const made = [...double.server.sandboxes.all.values()];
  const of = (role: string) => made.filter((s) => s.labels.includes(`${Labels.role}=${role}`));
  const serviceImages = new Set(of("service").map((s) => s.dockerImage));
  expect(of("verifier")).toHaveLength(2);
  for (const v of of("verifier")) expect(serviceImages.has(v.dockerImage)).toBe(false);
  expect(transcript).toMatch(/^status +graded$/m);
  expect(transcript).toMatch(/^\$ denv sandboxes create shop-prm --ttl 600\nid +shop-prm\/sbx-[a-z0-9]+\n/m);
  // Removing the target gave back everything its bridge made at Prime: no sandbox, no checkpoint.
  expect(liveSandboxes()).toBe(0);
  expect([...double.server.checkpoints.all.keys()]).toEqual([]);
  expect(double.server.networks.all.size).toBe(0);
  const { hosts } = await stack.json<{ hosts: Array<{ target: string }> }>(["hosts", "list"]);
  expect(hosts.filter((h) => h.target === "prm")).toEqual([]);
}, 400_000);
