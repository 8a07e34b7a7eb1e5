import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { Labels } from "@denv/spec/labels";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { leftovers, openTestRuntime, writeProject } from "../testing/harness.js";
import type { Runtime } from "./runtime.js";

/**
 * A host that deploys a project again and again builds its image again and again: each build takes
 * the project's tag, and the one before is left untagged. gc removes those once nothing uses them
 * (no environment, no version, no container) and they are older than the host's grace (0 here, so
 * that the test need not wait); a build still in use, or still tagged, stays.
 */
const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();
const COMPOSE = `services:
  main:
    build: .
    command: ["sleep", "infinity"]
    init: true
`;
const dockerfile = (mark: string) => `FROM debian:bookworm-slim\nRUN echo ${mark} > /mark\n`;

let rt: Runtime & AsyncDisposable;
let dir: string;

beforeAll(async () => {
  rt = await openTestRuntime({ buildGraceS: 0 });
  dir = await writeProject({
    "compose.yaml": COMPOSE,
    Dockerfile: dockerfile(randomBytes(4).toString("hex")),
  });
}, 120_000);

afterAll(async () => {
  await rt?.close();
  expect(await leftovers(rt)).toBe(0);
}, 120_000);

describe("gc of builds", () => {
  it("removes a build that lost its tag once nothing uses it, and keeps the tagged one", async () => {
    const builds = () =>
      docker(
        "image",
        "ls",
        "-q",
        "--no-trunc",
        "--filter",
        `label=${Labels.host}=${rt.host.hostId}`,
        "--filter",
        `label=${Labels.role}=build`,
      )
        .split("\n")
        .filter(Boolean)
        .sort();
    const alpha = await rt.deploy({ project: "rebuilt", projectDir: dir });
    const first = alpha.services[0]?.image_id ?? "";
    await writeFile(join(dir, "Dockerfile"), dockerfile(randomBytes(4).toString("hex")));
    const beta = await rt.deploy({ project: "rebuilt", environment: "beta", projectDir: dir });
    const second = beta.services[0]?.image_id ?? "";
    expect(second).not.toBe(first);
    expect(builds()).toEqual([first, second].sort());

    // alpha still runs the first build: it stays.
    expect((await rt.gc()).removed.filter((r) => r.includes("untagged build"))).toEqual([]);
    expect(builds()).toEqual([first, second].sort());

    await rt.destroy(alpha.id);
    const { removed } = await rt.gc();
    expect(removed).toContain(`image ${first.slice(0, 19)} (an untagged build)`);
    expect(builds()).toEqual([second]);
    await rt.destroy(beta.id);
    // The tagged build is the project's current one: it stays for the next deploy to reuse.
    expect((await rt.gc()).removed.filter((r) => r.includes("untagged build"))).toEqual([]);
    expect(builds()).toEqual([second]);
    docker("image", "rm", second);
  });

  it("leaves no image of a multi-stage build's earlier stage behind", async () => {
    // The classic builder keeps each earlier stage's image, untagged and unlabelled: 754 MB of
    // openenv-counter's venv stage per deploy, until the build removed them.
    const mark = randomBytes(4).toString("hex");
    const staged = await writeProject({
      "compose.yaml": COMPOSE,
      Dockerfile: `FROM debian:bookworm-slim AS stage\nRUN echo ${mark} > /x\nFROM debian:bookworm-slim\nCOPY --from=stage /x /x\n`,
    });
    const env = await rt.deploy({ project: "staged", projectDir: staged });
    const got = await rt.exec(env.id, { cmd: ["cat", "/x"] });
    expect(got.stdout.toString()).toBe(`${mark}\n`);
    const stageImages = docker("image", "ls", "-aq", "--no-trunc")
      .split("\n")
      .filter(Boolean)
      .filter((id) =>
        docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", id).includes(`echo ${mark}`),
      );
    expect(stageImages).toEqual([]);
    await rt.destroy(env.id);
  });
});
