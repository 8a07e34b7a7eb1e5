import type { ServicePlan } from "@denv/spec";
import { describe, expect, it } from "vitest";
import { serviceStart } from "./prime-start.js";

const service = (o: Partial<ServicePlan> = {}): ServicePlan => ({
  name: "db",
  image: "db",
  environment: {},
  volumes: [],
  tmpfs: [],
  dependsOn: [],
  expose: [],
  labels: {},
  capDrop: [],
  aliases: [],
  resources: { memoryBytes: 512 * 1024 ** 2, cpus: 1, pids: 256 },
  ports: [],
  dnsOpt: [],
  ...o,
});

describe("serviceStart: what a service runs, as Docker would start its container", () => {
  it("runs the image's ENTRYPOINT with its CMD, as its USER in its WORKDIR", () => {
    expect(
      serviceStart(service(), { entrypoint: ["/e"], cmd: ["--a", "b"], user: "redis", workdir: "/data" }),
    ).toEqual({ argv: ["/e", "--a", "b"], user: "redis", workdir: "/data" });
  });

  it("compose's command replaces the CMD, its user and working_dir the image's", () => {
    expect(
      serviceStart(service({ command: "run now", user: "1000", workingDir: "/w" }), {
        entrypoint: ["/e"],
        cmd: ["ignored"],
        user: "redis",
      }),
    ).toEqual({ argv: ["/e", "/bin/sh", "-c", "run now"], user: "1000", workdir: "/w" });
  });

  it("compose's entrypoint replaces the image's and drops its CMD; a shell-form entrypoint takes no CMD", () => {
    expect(
      serviceStart(service({ entrypoint: ["/mine"] }), { entrypoint: ["/e"], cmd: ["c"] })?.argv,
    ).toEqual(["/mine"]);
    expect(serviceStart(service({ command: ["x"] }), { entrypoint: "exec /e" })?.argv).toEqual([
      "/bin/sh",
      "-c",
      "exec /e",
    ]);
  });

  it("runs nothing when neither compose nor the Dockerfile names a command, from / as the sandbox's user", () => {
    expect(serviceStart(service(), {})).toBeUndefined();
    expect(serviceStart(service({ command: ["sleep", "1"] }), {})).toEqual({
      argv: ["sleep", "1"],
      workdir: "/",
    });
  });
});
