import {
  DefaultCaps,
  EgressFindings,
  Protection,
  type SpecialFileReason,
  SpecialFileReasons,
} from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packEntries } from "./files/tar-pack.js";
import { rejectToHost, removeRejectRule } from "./host/firewall.js";
import { run } from "./host/run.js";
import { probeEgress } from "./probe.js";
import { requireEnvironment } from "./runtime/host-context.js";
import type { Runtime } from "./runtime/runtime.js";
import { leftovers, openTestRuntime, writeProject } from "./testing/harness.js";

const COMPOSE = `
services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
  db:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    mem_limit: 256m
    cpus: 0.5
    pids_limit: 64
    volumes: [data:/data]
volumes:
  data: {}
`;

describe("the five protections", () => {
  let rt: Runtime & AsyncDisposable;
  let dir: string;
  const env = "prot/alpha";

  beforeAll(async () => {
    rt = await openTestRuntime();
    dir = await writeProject({ "compose.yaml": COMPOSE });
    await rt.deploy({ project: "prot", projectDir: dir });
  });
  afterAll(async () => rt[Symbol.asyncDispose]());

  describe("1. the agent is never root", () => {
    it("execs as uid 1000 with no capabilities and no-new-privileges", async () => {
      const r = await rt.exec(env, {
        shell: "id -u; grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status",
      });
      expect(r.stdout.toString()).toBe(
        "1000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n",
      );
    });

    it("cannot become root through a setuid binary", async () => {
      // /usr/bin/su and /bin/mount are setuid root in Debian: no-new-privileges ignores the bit.
      const r = await rt.exec(env, {
        shell: "ls -l /bin/su | cut -c1-10; su -c id root </dev/null 2>&1; echo rc=$?",
      });
      const out = r.stdout.toString();
      expect(out.startsWith("-rwsr-xr-x")).toBe(true);
      expect(out).not.toContain("uid=0");
      expect(out).toMatch(/rc=[1-9]/);
    });

    it("owns its workdir", async () => {
      const r = await rt.exec(env, { shell: "stat -c %u /workspace && touch /workspace/ok && echo written" });
      expect(r.stdout.toString()).toBe("1000\nwritten\n");
    });

    it("refuses root with the exact message", async () => {
      await expect(rt.exec(env, { cmd: ["id"], user: "root" })).rejects.toThrow(Protection.agentRoot("main"));
    });
  });

  describe("4. caps on every service", () => {
    it("puts the file's caps and the defaults in HostConfig", async () => {
      const info = await rt.environment(env);
      const byName = Object.fromEntries(info.services.map((s) => [s.name, s.container_id]));
      const main = await rt.host.docker.containers.inspect(byName.main as string);
      const db = await rt.host.docker.containers.inspect(byName.db as string);
      expect(main?.hostConfig.memory).toBe(DefaultCaps.memoryBytes);
      expect(main?.hostConfig.nanoCpus).toBe(DefaultCaps.cpus * 1e9);
      expect(main?.hostConfig.pidsLimit).toBe(DefaultCaps.pids);
      expect(main?.hostConfig.capDrop).toEqual(["ALL"]);
      expect(main?.hostConfig.securityOpt).toContain("no-new-privileges:true");
      expect(db?.hostConfig.memory).toBe(256 * 1024 * 1024);
      expect(db?.hostConfig.nanoCpus).toBe(0.5e9);
      expect(db?.hostConfig.pidsLimit).toBe(64);
      expect(db?.hostConfig.capDrop).toContain("NET_RAW");
      expect(db?.hostConfig.securityOpt).toContain("no-new-privileges:true");
    });

    it("enforces the pid cap", async () => {
      const r = await rt.exec(env, {
        service: "db",
        cmd: ["bash", "-c", "for i in $(seq 1 100); do sleep 2 & done 2>&1; wait"],
        timeout: 30,
      });
      expect(r.stderr.toString() + r.stdout.toString()).toMatch(
        /fork: (retry: )?Resource temporarily unavailable/,
      );
    });
  });

  describe("5. egress denied and probed", () => {
    it("passes the probe on a normal environment, by inspection and the canary", async () => {
      const probe = await rt.probeEgress(env);
      expect(probe.findings).toEqual([]);
      expect(probe.ok).toBe(true);
      expect(probe.network.internal).toBe(true);
      expect(probe.network.rejectRule).toBe(true);
      for (const s of probe.services) {
        expect(s.defaultRoute).toBe(false);
        expect(s.canaryReached).toBe(false);
        expect(s.routes.some((r) => r.startsWith("default"))).toBe(false);
        // Both route to the gateway the same way on the one network: the agent's connect answers for both.
        expect(s.canaryFrom).toBe("main");
      }
      expect(probe.services.map((s) => s.service)).toEqual(["main", "db"]);
      // The agent sees no route off the machine: the kernel refuses before sending anything.
      const r = await rt.exec(env, { cmd: ["bash", "-c", "exec 3<>/dev/tcp/192.0.2.1/80; echo rc=$?"] });
      expect(r.stdout.toString() + r.stderr.toString()).toContain("Network is unreachable");
    });

    it("finds a default route left in place", async () => {
      const info = await rt.environment(env);
      const main = await rt.host.docker.containers.inspect(
        info.services.find((s) => s.name === "main")?.container_id as string,
      );
      const pid = String(main?.pid);
      await run("nsenter", ["-t", pid, "-n", "ip", "route", "add", "default", "via", info.network.gateway]);
      try {
        const probe = await rt.probeEgress(env);
        expect(probe.ok).toBe(false);
        expect(probe.findings).toContain(EgressFindings.defaultRoute("main"));
        expect(probe.findings).toContain("service 'main' has a default route");
      } finally {
        await run("nsenter", ["-t", pid, "-n", "ip", "route", "del", "default"]);
      }
    });

    it("finds a route off the network that is not a default route (the kernel's own lookup)", async () => {
      const info = await rt.environment(env);
      const main = await rt.host.docker.containers.inspect(
        info.services.find((s) => s.name === "main")?.container_id as string,
      );
      const pid = String(main?.pid);
      // Two halves cover every address as a default route would, without being one.
      for (const half of ["0.0.0.0/1", "128.0.0.0/1"]) {
        await run("nsenter", ["-t", pid, "-n", "ip", "route", "add", half, "via", info.network.gateway]);
      }
      try {
        const probe = await rt.probeEgress(env);
        expect(probe.ok).toBe(false);
        expect(probe.findings).toContain(EgressFindings.routeOut("main"));
        expect(probe.findings).not.toContain(EgressFindings.defaultRoute("main"));
        expect(probe.findings).not.toContain(EgressFindings.routeOut("db"));
      } finally {
        for (const half of ["0.0.0.0/1", "128.0.0.0/1"]) {
          await run("nsenter", ["-t", pid, "-n", "ip", "route", "del", half]);
        }
      }
    });

    it("finds the host reachable when the reject rule is missing", async () => {
      const info = await rt.environment(env);
      await removeRejectRule(info.network.id);
      try {
        const probe = await rt.probeEgress(env);
        expect(probe.ok).toBe(false);
        expect(probe.findings).toContain(EgressFindings.hostReachable("main"));
        expect(probe.findings).toContain(EgressFindings.hostReachable("db"));
      } finally {
        await rejectToHost(info.network.id);
      }
    });

    it("finds a container attached to a network outside the environment", async () => {
      const info = await rt.environment(env);
      const net = await rt.host.docker.networks.create({
        name: `${info.network.name}-leak`,
        internal: false,
        subnet: "10.214.250.0/24",
        gateway: "10.214.250.1",
        labels: { "ai.denv.managed": "true", "ai.denv.host": rt.host.hostId, "ai.denv.role": "probe" },
      });
      const main = info.services.find((s) => s.name === "main")?.container_id as string;
      await rt.host.docker.networks.connect(net.id, main);
      try {
        const probe = await rt.probeEgress(env);
        expect(probe.ok).toBe(false);
        expect(probe.findings).toContain(EgressFindings.extraNetwork("main", `${info.network.name}-leak`));
        // main's path differs now: db's own connect answers for db.
        expect(probe.services.find((s) => s.service === "db")?.canaryFrom).toBe("db");
        expect(probe.services.find((s) => s.service === "main")?.canaryFrom).toBe("main");
      } finally {
        await rt.host.docker.networks.disconnect(net.id, main);
        await rt.host.docker.networks.remove(net.id);
      }
    });

    it("finds an environment network that is not internal", async () => {
      // Docker cannot flip `internal` on a live network, so the probe is pointed at a record whose
      // network is an ordinary bridge (as a hand-edited host or an old denvd could leave it).
      const rec = await requireEnvironment(rt.host, env);
      const name = `${rec.network.name}-open`;
      const net = await rt.host.docker.networks.create({
        name,
        internal: false,
        subnet: "10.214.251.0/24",
        gateway: "10.214.251.1",
        labels: { "ai.denv.managed": "true", "ai.denv.host": rt.host.hostId, "ai.denv.role": "probe" },
      });
      try {
        const probe = await probeEgress(rt.host.docker, rt.host.canary, {
          ...rec,
          network: { ...rec.network, id: net.id, name },
        });
        expect(probe.ok).toBe(false);
        expect(probe.network.internal).toBe(false);
        expect(probe.findings).toContain(EgressFindings.notInternal(name));
        expect(probe.findings).toContain(`network '${name}' is not internal`);
      } finally {
        await rt.host.docker.networks.remove(net.id);
      }
    });

    it("does not start an environment whose probe finds a way out, and leaves nothing behind", async () => {
      const leaky = await openTestRuntime({
        beforeProbe: async (e) => {
          await removeRejectRule(e.network.id);
        },
      });
      try {
        await expect(leaky.deploy({ project: "leaky", projectDir: dir })).rejects.toThrow(
          Protection.egressLeak(
            "leaky/alpha",
            `${EgressFindings.hostReachable("main")}; ${EgressFindings.hostReachable("db")}`,
          ),
        );
        await expect(
          leaky.deploy({ project: "leaky", environment: "beta", projectDir: dir }),
        ).rejects.toThrow(
          "refused: the egress probe of 'leaky/beta' found a way out (service 'main' reached the host canary; service 'db' reached the host canary); the episode does not start (protection 5)",
        );
        expect(await leftovers(leaky)).toBe(0);
        expect((await leaky.list()).environments).toEqual([]);
      } finally {
        await leaky[Symbol.asyncDispose]();
      }
    });
  });

  describe("3. special files refused in uploads, nothing written", () => {
    const cases: Array<[string, Parameters<typeof packEntries>[0], string, SpecialFileReason]> = [
      ["device node", [{ name: "dev0", type: "character-device" }], "dev0", SpecialFileReasons.device],
      ["FIFO", [{ name: "pipe", type: "fifo" }], "pipe", SpecialFileReasons.fifo],
      [
        "escaping symlink",
        [{ name: "link", type: "symlink", linkname: "../../etc/passwd" }],
        "link",
        SpecialFileReasons.symlinkEscapes,
      ],
      [
        "escaping hard link",
        [{ name: "hard", type: "link", linkname: "/etc/shadow" }],
        "hard",
        SpecialFileReasons.hardlinkEscapes,
      ],
      ["climbing path", [{ name: "../evil", content: "x" }], "../evil", SpecialFileReasons.climbs],
      ["absolute path", [{ name: "/etc/evil", content: "x" }], "/etc/evil", SpecialFileReasons.absolute],
      ["setuid file", [{ name: "suid", content: "x", mode: 0o4755 }], "suid", SpecialFileReasons.setid],
      ["setgid file", [{ name: "sgid", content: "x", mode: 0o2755 }], "sgid", SpecialFileReasons.setid],
    ];
    for (const [label, entries, path, reason] of cases) {
      it(`refuses a ${label} and writes nothing`, async () => {
        const archive = await packEntries([{ name: "first.txt", content: "before" }, ...entries]);
        await expect(rt.putFiles(env, "/workspace/upload", archive)).rejects.toThrow(
          Protection.specialFile(path, reason),
        );
        const r = await rt.exec(env, { shell: "ls -A /workspace/upload 2>/dev/null | wc -l" });
        expect(r.stdout.toString().trim()).toBe("0");
      });
    }

    it("says it verbatim", async () => {
      const archive = await packEntries([{ name: "pipe", type: "fifo" }]);
      await expect(rt.putFiles(env, "/workspace/upload", archive)).rejects.toThrow(
        "refused: 'pipe' is a FIFO; special files are refused in uploads and submissions (protection 3)",
      );
    });

    it("accepts a clean tree and writes it as the agent", async () => {
      const archive = await packEntries([
        { name: "dir", type: "directory" },
        { name: "dir/a.txt", content: "hello" },
        { name: "dir/inside", type: "symlink", linkname: "a.txt" },
      ]);
      await rt.putFiles(env, "/workspace/clean", archive);
      const r = await rt.exec(env, {
        shell: "cat /workspace/clean/dir/inside; stat -c %u /workspace/clean/dir/a.txt",
      });
      expect(r.stdout.toString()).toBe("hello1000\n");
      expect((await rt.readFile(env, "/workspace/clean/dir/a.txt")).toString()).toBe("hello");
    });
  });
});
