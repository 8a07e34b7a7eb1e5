import { HostRefusals } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Runtime } from "./runtime/runtime.js";
import { hostListener, leftovers, openTestRuntime, writeProject } from "./testing/harness.js";

/**
 * Attacks through a project's own files (compose file, Dockerfile, tests) and its agent's
 * submission, one row each, with the exact refusal or the evidence that the protection held.
 * See attacks.test.ts for the principal, image and network rows.
 */

describe("attacks through a project", () => {
  let rt: Runtime & AsyncDisposable;

  beforeAll(async () => {
    rt = await openTestRuntime();
  });
  afterAll(async () => rt[Symbol.asyncDispose]());

  describe("reading the host through the compose file", () => {
    it("interpolation never sees denvd's own environment", async () => {
      process.env.DENV_ATTACK_SECRET = "s3cret";
      try {
        const dir = await writeProject({
          "compose.yaml": `services:\n  main:\n    image: debian:bookworm-slim\n    command: ["sleep", "infinity"]\n    environment:\n      LEAK: "\${DENV_ATTACK_SECRET:-unset}"\n`,
        });
        await rt.deploy({ project: "interp", projectDir: dir });
        const r = await rt.exec("interp/alpha", { shell: 'echo "$LEAK"' });
        expect(r.stdout.toString()).toBe("unset\n");
        await rt.destroy("interp/alpha");
      } finally {
        delete process.env.DENV_ATTACK_SECRET;
      }
    });
  });

  describe("special files planted across several submission paths", () => {
    const sub = "subm/alpha";
    beforeAll(async () => {
      const dir = await writeProject({
        "compose.yaml": `services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
x-denv:
  agent: { workdir: /app }
  verifier:
    image: debian:bookworm-slim
    command: ["sh", "/tests/test.sh"]
    tests: tests
    submission: [/app/a, /app/a/l/z, /app/b, /app/c/d]
`,
        // Half a point from the real tests; a forged test.sh or reward would say otherwise.
        "tests/test.sh": 'echo 0.5 > "$REWARD_DIR/reward.txt"\n',
      });
      await rt.deploy({ project: "subm", projectDir: dir });
    }, 120_000);

    const plant = (shell: string) =>
      rt.exec(sub, { shell: `rm -rf /app/* && mkdir -p /app/a /app/b && ${shell}` });

    it.each([
      ["a link out of its path towards the tests", "ln -s ../../../tests /app/a/t", "a/t"],
      ["a link to the reward folder", "ln -s ../../logs/verifier /app/b/r", "b/r"],
      ["an absolute link", "ln -s /etc /app/b/etc", "b/etc"],
      ["a FIFO under a nested path", "mkdir -p /app/c/d && mkfifo /app/c/d/pipe", "c/d/pipe"],
    ])("%s is refused and grades 0", async (_what, shell, planted) => {
      await plant(shell);
      const verdict = await rt.verify(sub);
      expect(verdict.status).toBe("refused");
      expect(verdict.reward).toBe(0);
      expect(verdict.message).toMatch(new RegExp(`^refused: '/app/${planted}' is `));
    });

    it("links between the submission paths and a path under a link stay inside /submission", async () => {
      // /app/a/l -> .. makes /app/a/l/z land in /app; b and a point into each other.
      await plant(
        "ln -s .. /app/a/l && mkdir -p /app/z && echo zz > /app/z/f && ln -s ../a /app/b/to-a && ln -s ../b /app/a/to-b",
      );
      const verdict = await rt.verify(sub);
      expect({ status: verdict.status, reward: verdict.reward }).toEqual({ status: "graded", reward: 0.5 });
      expect(verdict.evidence.submission.map((s) => s.path)).toEqual([
        "/app/a",
        "/app/a/l/z",
        "/app/b",
        "/app/c/d",
      ]);
    });
  });

  describe("builds reaching the network", () => {
    it("a RUN step reaches neither a host listener nor anything but the mirrors, and the proxy records it", async () => {
      const { port, hits, close } = await hostListener();
      try {
        const probe = [
          'gw=$(echo "$http_proxy" | sed -e "s|http://||" -e "s|:.*||")',
          'proxy_port=$(echo "$http_proxy" | sed -e "s|.*:||")',
          "(exec 3<>/dev/tcp/$gw/$HOST_PORT && echo host-reached || echo host-refused) > /probe.txt 2>/dev/null",
          "exec 4<>/dev/tcp/$gw/$proxy_port",
          "printf 'GET http://not-a-mirror.invalid/x HTTP/1.0\\r\\n\\r\\n' >&4",
          "head -n1 <&4 | cut -d' ' -f2 >> /probe.txt",
        ].join("; ");
        const dir = await writeProject({
          "compose.yaml": `services:\n  main:\n    build: { context: ., args: { HOST_PORT: "${port}" } }\n    command: ["sleep", "infinity"]\n`,
          // A fresh argument each run: the apt step is not served from the layer cache.
          Dockerfile: `FROM debian:bookworm-slim\nARG HOST_PORT\nRUN ["/bin/bash", "-c", ${JSON.stringify(probe)}]\nARG BUST=${Date.now()}\nRUN apt-get update -qq && echo apt-ok >> /probe.txt\n`,
        });
        const info = await rt.deploy({ project: "buildnet", projectDir: dir });
        const r = await rt.exec(info.id, { cmd: ["cat", "/probe.txt"] });
        expect(r.stdout.toString()).toBe("host-refused\n403\napt-ok\n");
        expect(hits).toEqual([]);
        const build = info.evidence.build as {
          network: string;
          requests: Array<{ host: string; status: number }>;
        };
        expect(build.network).toMatch(/-build-/);
        expect(build.requests).toContainEqual(
          expect.objectContaining({ host: "not-a-mirror.invalid", status: 403 }),
        );
        await rt.destroy(info.id);
        // The build network and its rules went with the build.
        expect(
          (await rt.host.docker.networks.list({ "ai.denv.role": "build", "ai.denv.host": rt.host.hostId }))
            .length,
        ).toBe(0);
      } finally {
        await close();
      }
    });
  });

  describe("kind escalation", () => {
    it("a file that asks for kind service on an rl-environment project is refused, nothing created", async () => {
      const dir = await writeProject({
        "compose.yaml": `services:\n  main:\n    image: debian:bookworm-slim\n    command: ["sleep", "infinity"]\nx-denv:\n  kind: service\n  egress: allow\n`,
      });
      const before = await leftovers(rt);
      await expect(
        rt.deploy({ project: "escalate", projectDir: dir, kind: "rl-environment" }),
      ).rejects.toThrow(HostRefusals.kindMismatch("escalate", "rl-environment", "service"));
      expect(await leftovers(rt)).toBe(before);
      expect((await rt.list()).environments.map((e) => e.project)).not.toContain("escalate");
    });
  });

  describe("filling the disk", () => {
    it("a full volume is the environment's own quota error, not the host's, and forks keep the cap", async () => {
      const dir = await writeProject({
        "compose.yaml": `services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
  db:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    volumes: [data:/data]
volumes:
  data: {}
x-denv:
  disk: { volumes: 20m }
`,
      });
      const info = await rt.deploy({ project: "fill", projectDir: dir });
      expect((info.evidence.disk as { volumes: unknown }).volumes).toEqual({
        cap_bytes: 20 * 1024 ** 2,
        enforced: true,
        by: "btrfs quota groups",
      });
      const fill = "dd if=/dev/zero of=/data/fill bs=1M count=40 2>&1; echo rc=$?; stat -c %s /data/fill";
      const r = await rt.exec(info.id, { service: "db", shell: fill });
      const out = r.stdout.toString();
      expect(out).toMatch(/Disk quota exceeded|No space left on device/);
      expect(out).toMatch(/rc=1/);
      expect(Number(out.trim().split("\n").at(-1))).toBeLessThanOrEqual(20 * 1024 ** 2);
      const version = await rt.snapshot(info.id);
      const fork = await rt.fork(version.id, { name: "fill-fork" });
      const again = await rt.exec(fork.id, { service: "db", shell: `rm /data/fill; ${fill}` });
      expect(again.stdout.toString()).toMatch(/rc=1/);
      await rt.destroy(fork.id);
      await rt.destroy(info.id);
    });

    it("a cap on writable layers the engine cannot enforce is refused before anything is built", async () => {
      const { supported, storage } = await rt.host.docker.layerCaps();
      const dir = await writeProject({
        "compose.yaml": `services:\n  main:\n    build: .\n    command: ["sleep", "infinity"]\nx-denv:\n  disk: { layers: 1g }\n`,
        Dockerfile: "FROM debian:bookworm-slim\n",
      });
      const before = await leftovers(rt);
      if (supported) {
        // An engine that can cap layers gives the container its size limit.
        const info = await rt.deploy({ project: "layers", projectDir: dir });
        expect((info.evidence.disk as { layers: { enforced: boolean } }).layers.enforced).toBe(true);
        await rt.destroy(info.id);
      } else {
        await expect(rt.deploy({ project: "layers", projectDir: dir })).rejects.toThrow(
          HostRefusals.diskUnenforceable("writable layers", `${storage} has no per-container size limit`),
        );
      }
      expect(await leftovers(rt)).toBe(before);
    });
  });

  describe("a verifier that is root in its own container and fetches its tools from the mirrors", () => {
    it("installs from Debian through the proxy, reaches nothing else, and grades", async () => {
      const { port, hits, close } = await hostListener();
      try {
        const test = [
          "set -u",
          'gw=$(echo "$http_proxy" | sed -e "s|http://||" -e "s|:.*||")',
          `(exec 3<>/dev/tcp/$gw/${port}) 2>/dev/null && echo host-reached > /logs/verifier/host.txt`,
          "apt-get update -qq && apt-get install -y -qq --no-install-recommends jq >/dev/null",
          'jq -n "$(id -u) + 1" > "$REWARD_DIR/reward.txt"',
        ].join("\n");
        const dir = await writeProject({
          "compose.yaml": `services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
x-denv:
  verifier:
    image: debian:bookworm-slim
    user: root
    egress: mirrors
    command: ["bash", "/tests/test.sh"]
    tests: tests
`,
          "tests/test.sh": `${test}\n`,
        });
        const info = await rt.deploy({ project: "rootverify", projectDir: dir });
        const verdict = await rt.verify(info.id);
        // uid 0 + 1: the tests ran as root, with jq installed at test time.
        expect({ status: verdict.status, reward: verdict.reward, message: verdict.message }).toEqual({
          status: "graded",
          reward: 1,
          message: undefined,
        });
        const verifier = verdict.evidence.verifier;
        expect(verifier.user).toBe("root");
        expect(verifier.egress?.requests).toContainEqual(
          expect.objectContaining({ host: "deb.debian.org", status: 200 }),
        );
        expect(hits).toEqual([]);
        await rt.destroy(info.id);
      } finally {
        await close();
      }
    });
  });
});
