import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Protection, ProviderMessages, SpecialFileReasons } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { refusal } from "../testing/refusal.js";
import { E2bRuntime } from "./e2b-runtime.js";
import { processBaseline } from "./sandbox-processes.js";
import { type E2bDouble, startE2bDouble } from "./testing/e2b-double.js";
import type { E2bServer } from "./testing/e2b-server.js";

/**
 * Verify on E2B (protection 2 in one sandbox) against the E2B double, driven by the real `e2b`
 * SDK: the agent's processes killed before the snapshot and the service's kept, the verifier run
 * in a fork's sandbox as its own uid with the tests and reward directory out of the agent's reach,
 * the submission through the special-file check, and what E2B cannot do refused up front. Images
 * come from debian:bookworm-slim, never pulled; nothing connects beyond 127.0.0.1 and the test's
 * own containers.
 */

let double: E2bDouble;
let server: E2bServer;
let rt: E2bRuntime;
let dir: string;
const ENV = "graded/alpha";

const DOCKERFILE = `FROM debian:bookworm-slim
RUN useradd --uid 1001 --no-create-home --shell /usr/sbin/nologin verifier
COPY --chown=user answer.txt /home/user/answer.txt
`;

/** The service runs as the agent's uid; the verifier is the same image, as uid 1001. */
const compose = (verifier: string) => `services:
  main:
    build: .
    command: ["sh", "-c", "echo up > /tmp/service.log; exec sleep 99999"]
    healthcheck:
      test: ["CMD-SHELL", "test -f /tmp/service.log"]
x-denv:
  agent: { user: "1000", workdir: /home/user }
  verifier:
${verifier}
`;
const VERIFIER = `    build: .
    user: "1001"
    command: ["sh", "/tests/grade.sh"]
    timeout: 30
    tests: ./tests
    submission: [/home/user/answer.txt]`;

/** Grades the answer, and reports what it sees of the fork: its uid, the service, agent leftovers. */
const GRADE = `#!/bin/sh
answer=$(cat "$SUBMISSION_DIR/home/user/answer.txt" 2>/dev/null)
seen() { for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < "$f" 2>/dev/null; echo; done | grep -q "$1" && echo 1 || echo 0; }
[ "$answer" = 42 ] && r=1 || r=0
echo "{\\"reward\\": $r, \\"uid\\": $(id -u), \\"service\\": $(seen 'sleep 9999[9]'), \\"left\\": $(seen 'sleep 424[2]')}" > "$REWARD_DIR/reward.json"
echo "graded $r"
`;

async function project(name: string, composeText: string): Promise<string> {
  const p = join(dir, name);
  await mkdir(join(p, "tests"), { recursive: true });
  await writeFile(join(p, "Dockerfile"), DOCKERFILE);
  await writeFile(join(p, "answer.txt"), "41\n");
  await writeFile(join(p, "tests", "grade.sh"), GRADE);
  await writeFile(join(p, "compose.yaml"), composeText);
  return p;
}

const agentSh = (shell: string) => rt.exec(ENV, { shell });

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "denv-e2b-verify-"));
  double = await startE2bDouble();
  server = double.server;
  rt = await E2bRuntime.open({
    hostId: `h${randomBytes(3).toString("hex")}`,
    stateDir: join(dir, "state"),
    connection: double.connection,
    egressCanaries: [double.canary],
  });
  await rt.deploy({ project: "graded", projectDir: await project("graded", compose(VERIFIER)) });
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await double?.close();
  await rm(dir, { recursive: true, force: true });
  expect(double?.leftovers(), "what the test made at the double").toEqual([]);
}, 60_000);

describe("verify on E2B", { timeout: 60_000 }, () => {
  it("kills what the agent left running and keeps the service; grades 0.0, then 1.0 after the fix, as uid 1001 in a fork's sandbox", async () => {
    await agentSh("echo 41 > answer.txt; setsid sleep 4242 >/dev/null 2>&1 </dev/null & echo started");
    const wrong = await rt.verify(ENV, { command: "cmd-verify-1" });
    expect(wrong.status, wrong.log).toBe("graded");
    expect(wrong.rewards).toEqual({ reward: 0, uid: 1001, service: 1, left: 0 });
    expect(wrong.evidence.agent?.killed).toBeGreaterThanOrEqual(1);
    expect(wrong.evidence.verifier.isolation).toMatch(
      /^e2b: the fork's sandbox \S+, as uid 1001 \(verifier\); \/tests and \/logs\/verifier are that uid's alone$/,
    );
    expect(wrong.evidence.submission).toEqual([{ path: "/home/user/answer.txt", entries: 1, bytes: 3 }]);
    // In the episode's own sandbox: the agent's process is gone, the service's is not.
    const ps = await agentSh("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done");
    expect(ps.stdout.toString()).not.toContain("sleep 4242");
    expect(ps.stdout.toString()).toContain("sleep 99999");

    await agentSh("echo 42 > answer.txt");
    const right = await rt.verify(ENV);
    expect(right.status, right.log).toBe("graded");
    expect(right.reward).toBe(1);
    expect(right.evidence.agent).toEqual({ killed: 0, survivors: 0 });
    // Each verify's fork is gone; its version stays, as on denvd's own runtime.
    expect((await rt.list()).environments.map((e) => e.id)).toEqual([ENV]);
    expect((await rt.list()).versions.map((v) => v.id)).toEqual([wrong.version, right.version]);
  });

  it("holds the agent still across a snapshot and records what it ran, which a fork's baseline leaves out", async () => {
    // E2B's snapshot keeps memory: a fork resumes what the agent ran, and must count it as the agent's.
    const entry = async () =>
      (
        await agentSh(
          `for d in /proc/[0-9]*; do [ "$(tr '\\0' ' ' < $d/cmdline 2>/dev/null)" = "sleep 4343 " ] || continue; read -r l < $d/stat; set -- \${l##*") "}; echo "\${d#/proc/}:\${20} $1"; done`,
        )
      ).stdout
        .toString()
        .trim();
    await agentSh("setsid sleep 4343 >/dev/null 2>&1 </dev/null & echo started");
    const [running, state] = (await entry()).split(" ");
    expect(state).toBe("S");
    const v = await rt.snapshot(ENV);
    const rec = JSON.parse(
      await readFile(join(dir, "state", "e2b", "versions", `${encodeURIComponent(v.id)}.json`), "utf8"),
    ) as { agentProcesses?: string[] };
    expect(rec.agentProcesses).toContain(running);
    // Held only across the capture: it runs on in the episode.
    expect(await entry()).toBe(`${running} S`);

    // A sandbox's baseline leaves out what its version names as the agent's, and keeps the service.
    const { Sandbox } = await import("e2b");
    const envRec = JSON.parse(
      await readFile(join(dir, "state", "e2b", "environments", `${encodeURIComponent(ENV)}.json`), "utf8"),
    ) as { sandboxId: string; baseline: string[] };
    const sbx = await Sandbox.connect(envRec.sandboxId, double.connection);
    const baseline = await processBaseline(sbx, rec.agentProcesses);
    expect(baseline).not.toContain(running);
    expect(baseline).toEqual(expect.arrayContaining(envRec.baseline));

    // A fork of it is made and graded (the double's snapshot keeps files only: nothing to resume).
    const fork = await rt.fork(v.id, { name: "from-held" });
    try {
      const r = await rt.verify(fork.id);
      expect(r.status, r.log).toBe("graded");
      expect(r.rewards).toMatchObject({ reward: 1, service: 1, left: 0 });
    } finally {
      await rt.destroy(fork.id);
      await rt.deleteVersion(v.id);
    }
  });

  it("refuses the agent the verifier's uid, by number or name, for exec and files: what it left there would run as the verifier", async () => {
    // As uid 1001 the agent could leave a ~/.profile for the verifier's login shell (E2B runs
    // every command through bash -l) that writes a reward of 1 and exits before it grades.
    const fake = `mkdir -p ~ && echo 'echo {\\"reward\\": 1} > $REWARD_DIR/reward.json; exit 0' > ~/.profile`;
    for (const user of ["1001", "verifier"]) {
      const e = await refusal(rt.exec(ENV, { user, shell: fake }));
      expect(e.code).toBe("forbidden");
      expect(e.message).toBe(ProviderMessages.agentAsVerifier("main", user, 1001));
    }
    const files = await refusal(rt.getFiles(ENV, "/etc/hostname", { user: "verifier" }));
    expect(files.message).toBe(ProviderMessages.agentAsVerifier("main", "verifier", 1001));
    // Another user of the image is still the agent's to use (as on denvd's own runtime).
    expect((await rt.exec(ENV, { user: "nobody", cmd: ["id", "-u"] })).stdout.toString()).toBe("65534\n");
    await agentSh("echo 41 > answer.txt");
    const r = await rt.verify(ENV);
    expect(r.status, r.log).toBe("graded");
    expect(r.reward).toBe(0);
    await agentSh("echo 42 > answer.txt");
  });

  it("keeps the tests and the reward directory out of the agent's uid in the fork", async () => {
    const r = await rt.verify(ENV, { keepFork: true });
    expect(r.reward).toBe(1);
    try {
      for (const shell of [
        "cat /tests/grade.sh",
        "ls /logs/verifier",
        "echo 1 > /logs/verifier/reward.json",
      ]) {
        const got = await rt.exec(r.fork, { shell });
        expect(got.exitCode, shell).not.toBe(0);
        expect(got.stderr.toString(), shell).toMatch(/Permission denied/);
      }
    } finally {
      await rt.destroy(r.fork);
    }
  });

  it("runs a verifier that reads only files (services: false) in a sandbox of its own, from its own image", async () => {
    const p = await project(
      "files",
      compose(VERIFIER.replace("build: .", "build: ./verifier").concat("\n    services: false")),
    );
    await mkdir(join(p, "verifier"));
    await writeFile(
      join(p, "verifier", "Dockerfile"),
      "FROM debian:bookworm-slim\nRUN useradd --uid 1001 --no-create-home verifier && echo own > /etc/verifier-image\n",
    );
    // Its own image: the mark is there; its own sandbox: the fork's service is not.
    await writeFile(
      join(p, "tests", "grade.sh"),
      GRADE.replace(
        "\\\"left\\\": $(seen 'sleep 424[2]')",
        '\\"mark\\": $(test -f /etc/verifier-image && echo 1 || echo 0)',
      ),
    );
    const env = await rt.deploy({ project: "files", projectDir: p });
    const sandboxes = server.sandboxes.size;
    try {
      await rt.exec(env.id, { shell: "echo 42 > answer.txt" });
      const r = await rt.verify(env.id);
      expect(r.status, r.log).toBe("graded");
      expect(r.rewards).toEqual({ reward: 1, uid: 1001, service: 0, mark: 1 });
      expect(r.evidence.verifier.isolation).toMatch(
        /^e2b: a sandbox of its own \S+ from the verifier's template, as uid 1001 \(verifier\), without internet access$/,
      );
      expect(r.evidence.verifier.container_id).not.toBe(env.services[0]?.container_id);
      expect(server.sandboxes.size).toBe(sandboxes);
    } finally {
      await rt.destroy(env.id);
    }
  });

  it("refuses a submission that is a link out of it, with protection 3's message: reward 0, nothing run", async () => {
    await agentSh("rm answer.txt && ln -s /tests/grade.sh answer.txt");
    const r = await rt.verify(ENV);
    expect(r.status).toBe("refused");
    expect(r.reward).toBe(0);
    expect(r.message).toBe(
      Protection.specialFile("/home/user/answer.txt", SpecialFileReasons.symlinkEscapes),
    );
    expect(r.evidence.verifier.exit_code).toBeNull();
    expect((await rt.list()).environments.map((e) => e.id)).toEqual([ENV]);
  });

  it("refuses, leaving nothing, a verifier E2B cannot run in the fork's sandbox, an agent that can become root or write what root runs", async () => {
    const sandboxes = server.sandboxes.size;
    const cases: Array<[string, string]> = [
      [
        VERIFIER.replace("build: .", "image: debian:bookworm-slim"),
        ProviderMessages.lacks(
          "E2B",
          "a verifier container of its own",
          "x-denv.verifier with an image other than service 'main''s needs while it reaches the services (the verifier runs in the fork's sandbox: build it as the service is built, or set services: false)",
        ),
      ],
    ];
    for (const [i, [verifier, message]] of cases.entries()) {
      const e = await refusal(
        rt.deploy({ project: `v${i}`, projectDir: await project(`v${i}`, compose(verifier)) }),
      );
      expect(e.message).toBe(message);
    }
    // An image whose root has no password hands the agent root through su (E2B has no
    // no-new-privileges): refused when the sandbox is made, and the sandbox killed.
    const rooted = await project("rooted", compose(VERIFIER));
    await writeFile(join(rooted, "Dockerfile"), `${DOCKERFILE}RUN passwd -d root\n`);
    const e = await refusal(rt.deploy({ project: "rooted", projectDir: rooted }));
    expect(e.message).toBe(
      ProviderMessages.agentBecomesRoot("main", "user", "su with an empty root password"),
    );
    // An image that lets the agent write where root takes its programs from (root prepares the
    // verifier in the fork's sandbox, from the agent's filesystem): refused the same way.
    const open = await project("open", compose(VERIFIER));
    await writeFile(join(open, "Dockerfile"), `${DOCKERFILE}RUN chmod 777 /usr/bin\n`);
    const w = await refusal(rt.deploy({ project: "open", projectDir: open }));
    expect(w.message).toBe(ProviderMessages.agentWritesSystem("main", "user", "/bin"));
    expect(server.sandboxes.size).toBe(sandboxes);
  });

  it("leaves nothing: destroy, version deletes and gc remove every sandbox, snapshot and tests archive", async () => {
    await rt.destroy(ENV);
    for (const v of (await rt.list()).versions) await rt.deleteVersion(v.id);
    await rt.gc();
    expect(server.sandboxes.size).toBe(0);
    expect(server.snapshots.size).toBe(0);
    expect(await readdir(join(dir, "state", "e2b", "tests"))).toEqual([]);
  });
});
