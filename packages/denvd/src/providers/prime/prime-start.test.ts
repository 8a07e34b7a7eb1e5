import { type ServicePlan, validateCompose } from "@denv/spec";
import { describe, expect, it } from "vitest";
import { serviceStart } from "./prime-start.js";

/** Service `db` of a compose file, as the validator plans it (its defaults, not a copy of them). */
function service(lines = ""): ServicePlan {
  const r = validateCompose(`services:\n  db:\n    image: db\n${lines}`, {
    env: {},
    readFile: () => undefined,
    exists: () => false,
    projectName: "demo",
  });
  if (!r.ok) throw new Error(r.refusals.join("\n"));
  const db = r.plan.services.find((x) => x.name === "db");
  if (!db) throw new Error("no service db");
  return db;
}

describe("serviceStart: what a service runs, as Docker would start its container", () => {
  it("runs the image's ENTRYPOINT with its CMD, as its USER in its WORKDIR", () => {
    expect(
      serviceStart(service(), { entrypoint: ["/e"], cmd: ["--a", "b"], user: "redis", workdir: "/data" }),
    ).toEqual({ argv: ["/e", "--a", "b"], user: "redis", workdir: "/data" });
  });

  it("compose's command replaces the CMD, its user and working_dir the image's", () => {
    expect(
      serviceStart(service("    command: run now\n    user: '1000'\n    working_dir: /w\n"), {
        entrypoint: ["/e"],
        cmd: ["ignored"],
        user: "redis",
      }),
    ).toEqual({ argv: ["/e", "/bin/sh", "-c", "run now"], user: "1000", workdir: "/w" });
  });

  it("compose's entrypoint replaces the image's and drops its CMD; a shell-form entrypoint takes no CMD", () => {
    expect(
      serviceStart(service("    entrypoint: [/mine]\n"), { entrypoint: ["/e"], cmd: ["c"] })?.argv,
    ).toEqual(["/mine"]);
    expect(serviceStart(service("    command: [x]\n"), { entrypoint: "exec /e" })?.argv).toEqual([
      "/bin/sh",
      "-c",
      "exec /e",
    ]);
  });

  it("runs nothing when neither compose nor the Dockerfile names a command, from / as the sandbox's user", () => {
    expect(serviceStart(service(), {})).toBeUndefined();
    expect(serviceStart(service("    command: [sleep, '1']\n"), {})).toEqual({
      argv: ["sleep", "1"],
      workdir: "/",
    });
  });
});
