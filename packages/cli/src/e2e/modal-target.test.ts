import { ProviderMessages, TargetMessages } from "@denv/spec";
import { afterAll, beforeAll, expect, it } from "vitest";
import {
  type ModalDouble,
  startModalDouble,
} from "../../../denvd/src/providers/modal/testing/modal-double.js";
import { runnableLines } from "./doc-blocks.js";
import { waitUntil } from "./fixture-procs.js";
import { cli, repo, run, type Stack, startStack } from "./stack.js";

/**
 * A target of kind modal on the real stack (`denv up`), against the Modal double (Modal's gRPC API
 * on 127.0.0.1 as the official `modal` SDK calls it, sandboxes as real containers on this
 * machine's engine, reached by the bridge the control plane starts with the target's token as
 * TOKEN_ID:TOKEN_SECRET and its base_url as the SDK's MODAL_SERVER_URL):
 * how-to/connect-a-target.md's modal block runs as written (examples/quickstart-single built by
 * Modal's image API from its Dockerfile commands and deployed as one sandbox, graded 0 then 1 in a
 * fork's sandbox as uid 1001, stop refused, a sandbox of the project made, the target removed
 * leaving no sandbox nor snapshot); a file of two services is refused at placement for what Modal
 * lacks, creating nothing. quickstart-single's Dockerfile installs python3, so the double's image
 * builds get the engine's default network (Debian's package mirrors, as the Prime double's builds
 * of it); the sandboxes reach nothing (blockNetwork).
 */
let stack: Stack;
let double: ModalDouble;

/** The double's sandboxes that have not ended. */
const liveSandboxes = () => [...double.server.sandboxes.all.values()].filter((s) => !s.result).length;

/** How many calls that make something at Modal (an image, a sandbox) the double has served. */
const makingCalls = () =>
  double.server.calls.filter((c) => ["ImageGetOrCreate", "SandboxCreate", "SandboxCreateV2"].includes(c))
    .length;

beforeAll(async () => {
  [double, stack] = await Promise.all([startModalDouble({ buildNetwork: "default" }), startStack()]);
}, 300_000);

afterAll(async () => {
  await stack?.close();
  await double?.close();
  expect(double?.leftovers(), "what the test made at the double").toEqual([]);
}, 180_000);

it("how-to/connect-a-target.md's modal block runs as written: the bridge joins, the shop is graded 0 then 1, nothing is left", async () => {
  const env = { ...stack.env, ...double.sdkEnv };
  const sh = (line: string) =>
    run(
      "bash",
      ["-c", `denv() { node ${JSON.stringify(cli)} "$@"; }\ncd ${JSON.stringify(repo)}\n${line}`],
      env,
    );
  const lines = runnableLines("how-to/connect-a-target.md", "modal");
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
        return hosts.some((h) => h.target === "mdl" && h.status === "online");
      });
    }
    if (line.startsWith("denv deploy")) expect(liveSandboxes()).toBe(1);
    if (line.startsWith("denv env stop")) {
      expect(r.stderr).toContain(
        ProviderMessages.unsupportedVerb("Modal", "stop", ProviderMessages.noPause("Modal")),
      );
    }
    if (i === 1) {
      // The place of a target that cannot run two services: refused before anything is made.
      const before = makingCalls();
      expect((await stack.denv(["projects", "create", "shop2"])).code).toBe(0);
      const two = await stack.denv([
        "deploy",
        `${repo}/examples/quickstart`,
        "--project",
        "shop2",
        "--target",
        "mdl",
      ]);
      expect(two.code).toBe(1);
      expect(two.stderr).toContain(
        TargetMessages.capabilityMissing("mdl", "modal", "multi_service", "a file of 2 services needs"),
      );
      expect(liveSandboxes()).toBe(0);
      expect(makingCalls()).toBe(before);
    }
  }
  expect(transcript).toMatch(/^\$ denv exec shop-mdl\/alpha -- id -u\n1000\n/m);
  const rewards = [...transcript.matchAll(/^\$ denv verify shop-mdl\/alpha\nreward +(\S+)\n/gm)].map(
    (m) => m[1],
  );
  expect(rewards, transcript).toEqual(["0", "1"]);
  expect(transcript).toMatch(/^status +graded$/m);
  expect(transcript).toMatch(/^\$ denv sandboxes create shop-mdl --ttl 600\nid +shop-mdl\/sbx-[a-z0-9]+\n/m);
  // The image was built through Modal's image API.
  expect(double.server.calls).toContain("ImageJoinStreaming");
  // Removing the target gave back what its bridge made at Modal: no sandbox, and every snapshot
  // taken (the versions') deleted; the images built for the deploy stay, as at Modal.
  expect(liveSandboxes()).toBe(0);
  const snapshots = double.server.calls.filter((c) => c === "TaskSnapshotFilesystem").length;
  expect(snapshots).toBeGreaterThan(0);
  expect(double.server.images.deleted.size).toBe(snapshots);
  const { hosts } = await stack.json<{ hosts: Array<{ target: string }> }>(["hosts", "list"]);
  expect(hosts.filter((h) => h.target === "mdl")).toEqual([]);
}, 400_000);
