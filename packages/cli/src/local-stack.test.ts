import { readFileSync } from "node:fs";
import path from "node:path";
import { expect, it } from "vitest";
import { DENVD_NODE_OPTIONS } from "./local-stack.js";
import { repo } from "./testing/harness.js";

// `denv up` starts denvd with the node options a host's unit gives it, so that the local stack
// holds what a host holds (packages/denvd/README.md, "Memory").
it("starts denvd with the node options of deploy/denvd.service", () => {
  const unit = readFileSync(path.join(repo, "deploy/denvd.service"), "utf8");
  const execStart = /^ExecStart=(.*)$/m.exec(unit)?.[1]?.split(" ") ?? [];
  const node = execStart.indexOf("node");
  const binary = execStart.indexOf("/usr/local/bin/denvd");
  expect(node).toBeGreaterThanOrEqual(0);
  expect(execStart.slice(node + 1, binary)).toEqual([...DENVD_NODE_OPTIONS]);
});
