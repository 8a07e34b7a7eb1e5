import { describe, expect, it } from "vitest";
import {
  ComposeMessages,
  ComposeNotes,
  ComposeReasons,
  DefaultCaps,
  MAX_POOL_SIZE,
  Refusal,
} from "../messages.js";
import { accept, refusals, service } from "./compose-fixture.js";

const top = Refusal.topKey;
const R = ComposeReasons;

describe("defaults", () => {
  it("picks the only service, then main, then default", () => {
    expect(accept("services:\n  solo:\n    image: a\n").agent.service).toBe("solo");
    expect(accept("services:\n  db:\n    image: a\n  main:\n    image: b\n").agent.service).toBe("main");
    expect(accept("services:\n  db:\n    image: a\n  default:\n    image: b\n").agent.service).toBe(
      "default",
    );
    expect(accept("services:\n  main:\n    image: a\n  default:\n    image: b\n").agent.service).toBe("main");
  });

  it("takes the agent's user from x-denv, else a non-root service user, else uid 1000", () => {
    const base = "services:\n  main:\n    image: a\n";
    expect(accept(base).agent.user).toBe("1000");
    expect(accept(`${base}    user: root\n`).agent.user).toBe("1000");
    expect(accept(`${base}    user: "0:0"\n`).agent.user).toBe("1000");
    expect(accept(`${base}    user: agent\n`).agent.user).toBe("agent");
    expect(accept(`${base}    user: agent\nx-denv: {agent: {user: "2000"}}\n`).agent.user).toBe("2000");
  });

  it("takes the workdir from x-denv, else working_dir, else /workspace", () => {
    const base = "services:\n  main:\n    image: a\n";
    expect(accept(base).agent.workdir).toBe("/workspace");
    expect(accept(`${base}    working_dir: /src\n`).agent.workdir).toBe("/src");
    expect(accept(`${base}    working_dir: /src\nx-denv: {agent: {workdir: /w}}\n`).agent.workdir).toBe("/w");
  });

  it("caps every service from the file, else x-denv.resources, else DefaultCaps", () => {
    const plan = accept(`
services:
  a: {image: x, mem_limit: 256m}
  b: {image: x}
x-denv:
  agent: a
  resources: {cpus: 1, pids: 64}
`);
    expect(service(plan, "a").resources).toEqual({ memoryBytes: 256 * 1024 ** 2, cpus: 1, pids: 64 });
    expect(service(plan, "b").resources).toEqual({ memoryBytes: DefaultCaps.memoryBytes, cpus: 1, pids: 64 });
  });

  it("snapshots every named volume by default", () => {
    expect(accept("services:\n  a: {image: x}\nvolumes: {v1: , v2: }\n").snapshotVolumes).toEqual([
      "v1",
      "v2",
    ]);
  });
});

describe("x-denv", () => {
  const base = "services:\n  main:\n    image: a\n";

  it("names the agent refusal literally", () => {
    expect(refusals("services:\n  api:\n    image: a\n  db:\n    image: b\n")).toEqual([
      "'x-denv.agent' is needed: the file has 2 services (api, db) and none is named 'main' or 'default'; set x-denv.agent to the service the agent works in",
    ]);
  });

  it("refuses unknown keys, bad kinds and egress allow on an rl-environment", () => {
    expect(refusals(`${base}x-denv: {kind: game, egress: allow, colour: blue}\n`)).toEqual([
      top("x-denv.kind", R.kind("game")),
      top("x-denv.egress", R.egressAllowOnRlEnvironment),
      top("x-denv.colour", R.unknownKey),
    ]);
  });

  it("refuses an explicit root agent on an rl-environment, and allows it on a service project", () => {
    expect(refusals(`${base}x-denv: {agent: {user: root}}\n`)).toEqual([
      "'x-denv.agent.user' is refused: the agent is never root on an rl-environment (protection 1); give a non-root user, or confine it with x-denv.agent.sandbox: gvisor",
    ]);
    expect(refusals(`${base}x-denv: {agent: {user: "00:0", sandbox: none}}\n`)).toEqual([
      top("x-denv.agent.sandbox", R.agentSandbox("none")),
      top("x-denv.agent.user", R.agentRoot),
    ]);
    expect(accept(`${base}x-denv: {kind: service, agent: {user: "0"}}\n`).agent.user).toBe("0");
  });

  it("lets the agent be root only inside a gVisor sandbox", () => {
    const agent = accept(`${base}x-denv: {agent: {user: root, sandbox: gvisor}}\n`).agent;
    expect(agent).toEqual({ service: "main", user: "root", workdir: "/workspace", sandbox: "gvisor" });
    // Without a sandbox the plan has none: the runtime never sees the key.
    expect(accept(base).agent.sandbox).toBeUndefined();
  });

  it("adds SYS_ADMIN and SYS_PTRACE only to a sandboxed agent, and nothing else", () => {
    const caps = "[sys_admin, CAP_SYS_PTRACE, SYS_ADMIN]";
    expect(
      accept(`${base}x-denv: {agent: {user: root, sandbox: gvisor, capabilities: ${caps}}}\n`).agent,
    ).toEqual({
      service: "main",
      user: "root",
      workdir: "/workspace",
      sandbox: "gvisor",
      capabilities: ["SYS_ADMIN", "SYS_PTRACE"],
    });
    expect(refusals(`${base}x-denv: {agent: {capabilities: [SYS_ADMIN]}}\n`)).toEqual([
      "'x-denv.agent.capabilities' is refused: capabilities are added only inside an agent sandbox, whose kernel is not the host's (protection 1): set x-denv.agent.sandbox: gvisor",
    ]);
    expect(refusals(`${base}x-denv: {agent: {sandbox: gvisor, capabilities: [NET_ADMIN, ALL]}}\n`)).toEqual([
      "'x-denv.agent.capabilities' is refused: 'NET_ADMIN' cannot be added to the agent: a sandboxed agent may add SYS_ADMIN or SYS_PTRACE",
      top("x-denv.agent.capabilities", R.agentCapability("ALL", ["SYS_ADMIN", "SYS_PTRACE"])),
    ]);
    expect(refusals(`${base}x-denv: {agent: {sandbox: gvisor, capabilities: SYS_ADMIN}}\n`)).toEqual([
      top("x-denv.agent.capabilities", R.expected("a list of capabilities", 'the string "SYS_ADMIN"')),
    ]);
  });

  it("takes egress mirrors on an rl-environment (the host's package mirrors through the proxy)", () => {
    expect(accept(`${base}x-denv: {egress: mirrors}\n`).egress).toBe("mirrors");
    expect(refusals(`${base}x-denv: {egress: public}\n`)).toEqual([top("x-denv.egress", R.egress("public"))]);
  });

  it("refuses an agent service that is not defined", () => {
    expect(refusals(`${base}x-denv: {agent: ghost}\n`)).toEqual([
      top("x-denv.agent", R.undefinedService("ghost")),
    ]);
  });

  it("validates snapshot volumes and placement", () => {
    const plan = accept(
      `${base}volumes: {a: , b: }\nx-denv: {snapshot: {volumes: [b]}, placement: {region: eu, gpu: false}}\n`,
    );
    expect(plan.snapshotVolumes).toEqual(["b"]);
    expect(plan.placement).toEqual({ region: "eu", gpu: "false" });
    expect(refusals(`${base}x-denv: {snapshot: {volumes: [ghost]}}\n`)).toEqual([
      top("x-denv.snapshot.volumes", R.undeclaredSnapshotVolume("ghost")),
    ]);
  });

  it("reads x-denv.pool: a whole number of warm forks from 0 to MAX_POOL_SIZE", () => {
    expect(accept(`${base}x-denv: {pool: 4}\n`).pool).toBe(4);
    expect(accept(base).pool).toBeUndefined();
    const got: Record<string, string> = {
      "65": "the number 65",
      "-1": "the number -1",
      two: 'the string "two"',
      "1.5": "the number 1.5",
    };
    for (const [bad, described] of Object.entries(got)) {
      expect(refusals(`${base}x-denv: {pool: ${bad}}\n`)).toEqual([
        top("x-denv.pool", R.expected(`a whole number of forks from 0 to ${MAX_POOL_SIZE}`, described)),
      ]);
    }
  });

  it("normalizes the verifier", () => {
    const plan = accept(
      `${base}x-denv:
  resources: {memory: 1g}
  verifier:
    image: python:3.12
    command: sh /tests/test.sh
    timeout: 10m
    tests: ./tests/
    submission: [/workspace/out/, /workspace/./log.txt]
    environment: [MODE=strict]
    resources: {cpus: 1}
`,
      { files: { "tests/test.sh": "" } },
    );
    expect(plan.verifier).toEqual({
      image: "python:3.12",
      command: "sh /tests/test.sh",
      timeoutSec: 600,
      tests: "tests",
      submission: ["/workspace/out", "/workspace/log.txt"],
      user: "1001",
      environment: { MODE: "strict" },
      resources: { memoryBytes: 1024 ** 3, cpus: 1, pids: DefaultCaps.pids },
    });
    expect(
      accept(`${base}x-denv: {verifier: {image: v, command: [x], timeout: 30}}\n`).verifier?.timeoutSec,
    ).toBe(30);
  });

  it("takes a verifier that asks for root in its own container, and egress to the mirrors", () => {
    const v = accept(
      `${base}x-denv: {verifier: {image: v, command: [x], user: root, egress: mirrors}}\n`,
    ).verifier;
    expect({ user: v?.user, egress: v?.egress }).toEqual({ user: "root", egress: "mirrors" });
    expect(accept(`${base}x-denv: {verifier: {image: v, command: [x]}}\n`).verifier?.egress).toBeUndefined();
  });

  it("reads x-denv.verifier.smoke: true, false, or a reward to expect; refuses anything else", () => {
    const smoke = (v: string) =>
      accept(`${base}x-denv: {verifier: {image: v, command: [x], smoke: ${v}}}\n`).verifier?.smoke;
    expect(smoke("true")).toEqual({});
    expect(smoke("false")).toBeUndefined();
    expect(smoke("{expect: 0}")).toEqual({ expect: 0 });
    expect(smoke("{expect: 0.5}")).toEqual({ expect: 0.5 });
    expect(accept(`${base}x-denv: {verifier: {image: v, command: [x]}}\n`).verifier?.smoke).toBeUndefined();
    const refused = (v: string) =>
      refusals(`${base}x-denv: {verifier: {image: v, command: [x], smoke: ${v}}}\n`);
    expect(refused("yes")).toEqual([top("x-denv.verifier.smoke", R.smoke('the string "yes"'))]);
    expect(refused("{expect: one}")).toEqual([top("x-denv.verifier.smoke", R.smoke("a mapping"))]);
    expect(refused("{reward: 1}")).toEqual([top("x-denv.verifier.smoke", R.smoke("a mapping"))]);
  });

  it("reads x-denv.verifier.services: false (the fork's files only); refuses anything else, and with egress: mirrors", () => {
    const services = (v: string) =>
      accept(`${base}x-denv: {verifier: {image: v, command: [x], services: ${v}}}\n`).verifier?.services;
    expect(services("false")).toBe(false);
    expect(services("true")).toBeUndefined();
    expect(
      accept(`${base}x-denv: {verifier: {image: v, command: [x]}}\n`).verifier?.services,
    ).toBeUndefined();
    expect(refusals(`${base}x-denv: {verifier: {image: v, command: [x], services: none}}\n`)).toEqual([
      top("x-denv.verifier.services", R.verifierServices('the string "none"')),
    ]);
    expect(
      refusals(`${base}x-denv: {verifier: {image: v, command: [x], services: false, egress: mirrors}}\n`),
    ).toEqual([top("x-denv.verifier.services", R.verifierServicesEgress)]);
  });

  it("refuses a verifier that shares the agent's uid, or reaches outside", () => {
    expect(
      refusals(`${base}x-denv:
  verifier:
    image: v
    command: [x]
    egress: allow
    tests: ../tests
    submission: [relative, /a/../b, /]
    network: host
`),
    ).toEqual([
      top("x-denv.verifier.egress", R.verifierEgress("allow")),
      top("x-denv.verifier.tests", R.climbsOut("../tests")),
      top("x-denv.verifier.submission", R.submissionPath("relative")),
      top("x-denv.verifier.submission", R.submissionPath("/a/../b")),
      top("x-denv.verifier.submission", R.submissionPath("/")),
      top("x-denv.verifier.network", R.unknownKey),
    ]);
    expect(refusals(`${base}x-denv: {verifier: {image: v, command: [x], user: "1000"}}\n`)).toEqual([
      top("x-denv.verifier.user", R.verifierSameUser("1000")),
    ]);
    expect(refusals(`${base}x-denv: {verifier: {tests: tests}}\n`)).toEqual([
      top("x-denv.verifier.tests", R.notFound("tests")),
      ComposeMessages.topMissing("x-denv.verifier.image", "give 'image' or 'build'"),
      "'x-denv.verifier.command' is missing: the verifier needs a command, e.g. [sh, /tests/test.sh]",
    ]);
  });

  it("notes an unset verifier variable", () => {
    const plan = accept(
      "services:\n  main: {image: a}\nx-denv: {verifier: {image: v, command: [x], environment: [KEY]}}\n",
    );
    expect(plan.notes).toEqual([ComposeNotes.verifierEnvironmentUnset("KEY")]);
  });
});
