import { readlink } from "node:fs/promises";
import { ComposeReasons, HostRefusals, Protection, Refusal, validateCompose } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packEntries } from "./files/tar-pack.js";
import { hasRejectRule } from "./host/firewall.js";
import { run } from "./host/run.js";
import { buildTag } from "./runtime/ensure-image.js";
import { readContainerFile } from "./runtime/principals.js";
import type { Runtime } from "./runtime/runtime.js";
import { hostListener, leftovers, openTestRuntime, writeProject } from "./testing/harness.js";

/**
 * Attacks on a host through its public surfaces (compose file, image, exec, files, verify), one
 * row each, with the exact refusal or the evidence that the protection held. An rl-environment
 * is hostile: its image, its compose file and its agent may all be written by an attacker.
 */

/** uid 0 under every spelling the engine takes, and forms that name root with a group. */
const ROOT_SPELLINGS = ["root", "0", "00", "000", "+0", "-0", "000:0", "0:1000", "+0:+0", "root:root"];

/** A trojan: logs the namespaces it runs in to /trojan.log, then does the real program's work. */
const trojan = (real: string) =>
  `#!/bin/sh.real\n{ printf '%s %s %s\\n' "$0" "$(readlink /proc/self/ns/net)" "$(readlink /proc/self/ns/pid)" >> /trojan.log; } 2>/dev/null\nexec ${real} "$@"\n`;

const TROJAN_DOCKERFILE = `FROM debian:bookworm-slim
RUN cp /bin/dash /bin/sh.real && rm /bin/sh \\
 && for p in /usr/bin/mkdir /usr/bin/chown /usr/bin/tar /usr/bin/id; do mv "$p" "$p.real"; done \\
 && printf 'toor:x:0:0:root twin:/root:/bin/sh\\n' >> /etc/passwd \\
 && touch /trojan.log && chmod 666 /trojan.log
COPY sh /bin/sh
COPY mkdir /usr/bin/mkdir
COPY chown /usr/bin/chown
COPY tar /usr/bin/tar
COPY id /usr/bin/id
RUN ["/bin/sh.real", "-c", "chmod 755 /usr/bin/dash /bin/sh /usr/bin/mkdir /usr/bin/chown /usr/bin/tar /usr/bin/id && mkdir -p /app && echo seed > /app/seed.txt && : > /trojan.log"]
`;

const TROJAN_COMPOSE = `
services:
  main:
    build: .
    command: ["sleep", "infinity"]
    init: true
    healthcheck:
      test: ["CMD-SHELL", "true"]
      interval: 1s
x-denv:
  agent: { workdir: /app }
  verifier:
    image: debian:bookworm-slim
    command: "echo 1 > $$REWARD_DIR/reward.txt"
    submission: [/app]
`;

describe("attacks", () => {
  let rt: Runtime & AsyncDisposable;
  const env = "trojan/alpha";
  let hostNet = "";
  let hostPid = "";

  beforeAll(async () => {
    rt = await openTestRuntime();
    hostNet = await readlink("/proc/self/ns/net");
    hostPid = await readlink("/proc/self/ns/pid");
    const dir = await writeProject({
      "compose.yaml": TROJAN_COMPOSE,
      Dockerfile: TROJAN_DOCKERFILE,
      sh: trojan("/bin/sh.real"),
      mkdir: trojan("/usr/bin/mkdir.real"),
      chown: trojan("/usr/bin/chown.real"),
      tar: trojan("/usr/bin/tar.real"),
      id: trojan("/usr/bin/id.real"),
    });
    await rt.deploy({ project: "trojan", projectDir: dir });
  }, 180_000);
  afterAll(async () => rt[Symbol.asyncDispose]());

  describe("uid 0 under another spelling", () => {
    it.each(ROOT_SPELLINGS)("exec as %s on the agent service is refused", async (user) => {
      await expect(rt.exec(env, { cmd: ["true"], user })).rejects.toThrow(Protection.agentRoot("main"));
    });

    it("exec as a name whose passwd entry is uid 0 is refused", async () => {
      await expect(rt.exec(env, { cmd: ["true"], user: "toor" })).rejects.toThrow(
        Protection.agentRoot("main"),
      );
    });

    it.each([...ROOT_SPELLINGS, "toor"])("files put and get as %s are refused", async (user) => {
      const tar = await packEntries([{ name: "x.txt", content: "x" }]);
      await expect(rt.putFiles(env, "/app", tar, { user })).rejects.toThrow(Protection.agentRoot("main"));
      await expect(rt.getFiles(env, "/app/seed.txt", { user })).rejects.toThrow(Protection.agentRoot("main"));
    });

    it.each(ROOT_SPELLINGS.filter((u) => u !== "root:root"))(
      "x-denv.agent.user: '%s' is refused by the validator",
      (user) => {
        const res = validateCompose(
          `services:\n  main:\n    image: debian:bookworm-slim\nx-denv:\n  agent: { user: "${user}" }\n`,
          { env: {}, readFile: () => undefined, exists: () => true, projectName: "p" },
        );
        expect(res.ok).toBe(false);
        expect(res.ok ? [] : res.refusals).toEqual([
          Refusal.topKey("x-denv.agent.user", ComposeReasons.agentRoot),
        ]);
      },
    );

    it("an agent user whose passwd entry is uid 0 is refused at deploy, and nothing is left", async () => {
      const other = await openTestRuntime();
      try {
        const dir = await writeProject({
          "compose.yaml": `services:\n  main:\n    build: .\n    command: ["sleep", "infinity"]\nx-denv:\n  agent: { user: toor }\n`,
          Dockerfile: "FROM debian:bookworm-slim\nRUN printf 'toor:x:0:0::/root:/bin/sh\\n' >> /etc/passwd\n",
        });
        await expect(other.deploy({ project: "twin", projectDir: dir })).rejects.toThrow(
          Protection.agentRoot("main"),
        );
        expect(await leftovers(other)).toBe(0);
        expect((await other.list()).environments).toEqual([]);
      } finally {
        await other[Symbol.asyncDispose]();
      }
    });
  });

  describe("a trojaned image (/bin/sh, mkdir, chown, tar, id replaced)", () => {
    it("never runs outside its container: deploy, exec, files, snapshot, fork and verify", async () => {
      await rt.exec(env, { shell: "id -u > /dev/null" });
      await rt.putFiles(env, "/app", await packEntries([{ name: "up.txt", content: "up" }]));
      await (await rt.getFiles(env, "/app/up.txt")).toArray();
      const version = await rt.snapshot(env);
      const fork = await rt.fork(version.id, { name: "f1" });
      await rt.exec(fork.id, { shell: "mkdir -p /app/x" });
      const verdict = await rt.verify(env);
      expect({ status: verdict.status, message: verdict.message }).toEqual({
        status: "graded",
        message: undefined,
      });

      // Each line names the namespaces a trojan ran in; a fork inherits its parent's log.
      const own = { net: new Set<string>(), pid: new Set<string>() };
      const lines: string[] = [];
      for (const info of [await rt.environment(env), fork]) {
        const id = info.services[0]?.container_id ?? "";
        const state = await rt.host.docker.containers.inspect(id);
        own.net.add(await readlink(`/proc/${state?.pid}/ns/net`));
        own.pid.add(await readlink(`/proc/${state?.pid}/ns/pid`));
        const log = await readContainerFile(rt.host.docker, id, "/trojan.log");
        lines.push(...(log?.toString() ?? "").split("\n").filter(Boolean));
      }
      for (const line of lines) {
        const [, net = "", pid = ""] = line.split(" ");
        expect({ line, net: own.net.has(net), pid: own.pid.has(pid) }).toEqual({
          line,
          net: true,
          pid: true,
        });
        expect([net, pid]).not.toContain(hostNet);
        expect([net, pid]).not.toContain(hostPid);
      }
      // The trojans did run (inside): the row proves something only if they were reached.
      expect(lines.length).toBeGreaterThan(0);
      await rt.destroy(fork.id);
    });

    it("the workdir was given to the agent user without running any of them", async () => {
      const r = await rt.exec(env, { shell: "stat -c %u /app /app/seed.txt" });
      expect(r.stdout.toString()).toBe("1000\n1000\n");
    });
  });

  describe("one project poisoning another's images", () => {
    it("a build named like a shared image does not replace it", async () => {
      const before = await rt.host.docker.images.info("debian:bookworm-slim");
      const dir = await writeProject({
        "compose.yaml": `services:\n  main:\n    image: debian:bookworm-slim\n    build: .\n    command: ["sleep", "infinity"]\n`,
        Dockerfile: "FROM debian:bookworm-slim\nRUN echo poisoned > /poisoned\n",
      });
      await rt.deploy({ project: "evil", projectDir: dir });
      expect((await rt.host.docker.images.info("debian:bookworm-slim"))?.id).toBe(before?.id);
      const r = await rt.exec("evil/alpha", { shell: "cat /poisoned" });
      expect(r.stdout.toString()).toBe("poisoned\n");
      await rt.destroy("evil/alpha");
    });

    it.each([
      ["a service", `services:\n  main:\n    image: IMAGE\n    command: ["sleep", "infinity"]\n`],
      [
        "the verifier",
        `services:\n  main:\n    image: debian:bookworm-slim\n    command: ["sleep", "infinity"]\nx-denv:\n  verifier:\n    image: IMAGE\n    command: "true"\n`,
      ],
    ])("%s cannot run another project's build, and nothing is left", async (_what, compose) => {
      const victim = buildTag("trojan", "denv-local/trojan-main:latest");
      expect(await rt.host.docker.images.info(victim)).toBeDefined();
      const dir = await writeProject({ "compose.yaml": compose.replace("IMAGE", victim) });
      const envs = (await rt.list()).environments.length;
      await expect(rt.deploy({ project: "thief", projectDir: dir })).rejects.toThrow(
        HostRefusals.foreignImage(victim, "trojan"),
      );
      expect((await rt.list()).environments.length).toBe(envs);
    });
  });

  describe("IPv6 and DNS", () => {
    it("the agent has no IPv6 and cannot reach a host listener on [::] through its bridge", async () => {
      const info = await rt.environment(env);
      const probe = await rt.probeEgress(env);
      expect(probe.ok).toBe(true);
      expect(probe.services.map((s) => s.ipv6)).toEqual([[]]);
      expect(await hasRejectRule(info.network.id)).toBe(true);
      const r = await rt.exec(env, {
        shell: "cat /proc/sys/net/ipv6/conf/all/disable_ipv6; cat /proc/net/if_inet6",
      });
      expect(r.stdout.toString()).toBe("1\n");

      const { port, hits, close } = await hostListener();
      try {
        const bridge = `br-${info.network.id.slice(0, 12)}`;
        const addrs = JSON.parse(
          (await run("ip", ["-6", "-j", "addr", "show", "dev", bridge])).stdout || "[]",
        ) as Array<{
          addr_info?: Array<{ local: string; scope: string }>;
        }>;
        const targets = addrs
          .flatMap((a) => a.addr_info ?? [])
          .map((a) => (a.scope === "link" ? `${a.local}%eth0` : a.local));
        for (const target of targets) {
          const c = await rt.exec(env, {
            shell: `exec 3<>/dev/tcp/${target}/${port} && echo connected`,
            timeout: 5,
          });
          expect({ target, out: c.stdout.toString() }).toEqual({ target, out: "" });
        }
        // Where the host gives its bridge no IPv6 address, there is nothing to reach either way.
        expect(hits).toEqual([]);
      } finally {
        await close();
      }
    });

    it("the probe records the resolver path: the embedded DNS, the engine and its loopback upstream", async () => {
      const probe = await rt.probeEgress(env);
      expect(probe.services[0]?.nameservers).toEqual(["127.0.0.11"]);
      expect(probe.resolver.engine).toBe((await rt.host.docker.version()).version);
      expect(probe.findings.some((f) => f.includes("CVE-2024-29018"))).toBe(probe.resolver.embeddedDnsLeaks);
    });
  });

  describe("escaping an exec's timeout", () => {
    it("kills what the command moved to a session of its own (setsid, double fork)", async () => {
      const r = await rt.exec(env, {
        shell:
          "setsid sleep 301 & (setsid sh -c 'sleep 302' &) ; nohup setsid sleep 303 >/dev/null 2>&1 & sleep 300",
        timeout: 1,
      });
      expect(r.timedOut).toBe(true);
      const count = await rt.exec(env, {
        shell:
          "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 30[0-3]' || true",
      });
      expect(count.stdout.toString().trim()).toBe("0");
    });
  });

  describe("start on a running environment", () => {
    it("does not make an agent daemon part of the baseline: verify still kills it", async () => {
      await rt.exec(env, { shell: "setsid sleep 777 >/dev/null 2>&1 < /dev/null &" });
      await rt.start(env);
      const killed = await rt.stopAgent(env);
      expect(killed.killed).toBeGreaterThan(0);
      const count = await rt.exec(env, {
        shell:
          "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 777' || true",
      });
      expect(count.stdout.toString().trim()).toBe("0");
    });
  });
});
