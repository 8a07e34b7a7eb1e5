import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { leftovers, openTestRuntime, writeProject } from "../testing/harness.js";
import { NOT_STARTED } from "./materialize.js";
import type { Runtime } from "./runtime.js";

/**
 * x-denv.verifier.services: false, against the default, on a real engine: the same project twice,
 * told apart only by that key. The agent service appends a line to its volume each time it
 * starts, and the verifier reports how many lines it got and which network interfaces it has.
 */
const compose = (services: boolean) => `
services:
  main:
    image: debian:bookworm-slim
    command: ["sh", "-c", "echo up >> /data/starts; exec sleep infinity"]
    init: true
    volumes: [data:/data]
volumes:
  data: {}
x-denv:
  verifier:
    image: debian:bookworm-slim
    ${services ? "" : "services: false"}
    command: ["sh", "-c", 'echo "starts=$$(wc -l < /submission/data/starts) nets=$$(ls /sys/class/net | tr "\\n" " ")"; echo 1 > $$REWARD_DIR/reward.txt']
    submission: [/data/starts]
`;

describe("a verifier that reads only the fork's files", () => {
  let rt: Runtime & AsyncDisposable;
  beforeAll(async () => {
    rt = await openTestRuntime();
  });
  afterAll(async () => rt[Symbol.asyncDispose]());

  it("grades a fork none of whose services started, with no network; the default starts them", async () => {
    const filesOnly = await rt.deploy({
      project: "files",
      projectDir: await writeProject({ "compose.yaml": compose(false) }),
    });
    const started = await rt.deploy({
      project: "served",
      projectDir: await writeProject({ "compose.yaml": compose(true) }),
    });

    const a = await rt.verify(filesOnly.id);
    expect([a.status, a.reward]).toEqual(["graded", 1]);
    // The snapshot holds the one start of the episode; the fork added none; only loopback.
    expect(a.log).toContain("starts=1 nets=lo \n");
    expect(a.evidence.fork.probe).toEqual({ skipped: NOT_STARTED });

    const b = await rt.verify(started.id);
    expect([b.status, b.reward]).toEqual(["graded", 1]);
    // By default the fork's services start (a second line) and the verifier joins its network.
    expect(b.log).toMatch(/starts=2 nets=eth0 lo \n/);
    expect(b.evidence.fork.probe).toMatchObject({ ok: true });

    for (const id of [filesOnly.id, started.id]) await rt.destroy(id);
    for (const v of [a.version, b.version]) await rt.deleteVersion(v);
    expect(await leftovers(rt)).toBe(0);
  });
});
