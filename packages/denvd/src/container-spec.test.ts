import { validateCompose } from "@denv/spec";
import { describe, expect, it } from "vitest";
import { containerSpec } from "./container-spec.js";

/** The create options of service `main` of a compose file (no engine needed). */
function spec(yaml: string) {
  const result = validateCompose(yaml, {
    env: {},
    readFile: () => undefined,
    exists: (rel) => rel === ".",
    projectName: "demo",
    source: "compose.yaml",
  });
  if (!result.ok) throw new Error(result.refusals.join("\n"));
  const service = result.plan.services.find((s) => s.name === "main");
  if (!service) throw new Error("no service main");
  return containerSpec({
    plan: result.plan,
    service,
    image: "a",
    containerName: "c",
    networkName: "n",
    volumeNames: {},
    labels: {},
  });
}

const main = "services:\n  main:\n    image: a\n    user: '1000'\n";

describe("containerSpec: no-new-privileges", () => {
  it("is on for every rl-environment service, whatever the file says", () => {
    expect(spec(main).HostConfig?.SecurityOpt).toEqual(["no-new-privileges:true"]);
    const withDb = `${main}  db:\n    image: b\n`;
    expect(spec(withDb).HostConfig?.SecurityOpt).toEqual(["no-new-privileges:true"]);
  });

  it("is on for a service project only where the file asks", () => {
    // Without it, `exec --user root` in a container whose user is not root keeps root's
    // capabilities (the engine applies no-new-privileges to exec'd processes too).
    expect(spec(`${main}x-denv: {kind: service}\n`).HostConfig?.SecurityOpt).toEqual([]);
    const asked = `${main}    security_opt: ['no-new-privileges:true']\nx-denv: {kind: service}\n`;
    expect(spec(asked).HostConfig?.SecurityOpt).toEqual(["no-new-privileges:true"]);
  });
});
