import { spawn } from "node:child_process";
import { once } from "node:events";
import { describe, expect, it } from "vitest";
import {
  hasNetworkNamespace,
  lookupAndConnect,
  parseRouteTable,
  removeDefaultRoute,
  routes,
} from "./netns.js";
import { run } from "./run.js";

describe("parseRouteTable", () => {
  it("reads /proc/PID/net/route as `ip route show` prints the main table", () => {
    // A container on a bridge, as the kernel shows it (little-endian hex words).
    const table = [
      "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT",
      "eth0\t00000000\t010011AC\t0003\t0\t0\t0\t00000000\t0\t0\t0",
      "eth0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0",
      "",
    ].join("\n");
    expect(parseRouteTable(table)).toEqual([
      { dst: "default", gateway: "172.17.0.1", dev: "eth0" },
      { dst: "172.17.0.0/16", dev: "eth0" },
    ]);
    expect(parseRouteTable(table.split("\n").slice(0, 1).join("\n"))).toEqual([]);
  });
});

describe("removeDefaultRoute", () => {
  it("says 'exited' for a process gone before its namespace was read (a one-shot service)", async () => {
    // The engine may still call such a container running: the CI run of 062acea failed a
    // deploy on "cannot read routes of pid N" for a `command: true` service.
    const child = spawn("true");
    const pid = child.pid as number;
    await once(child, "exit");
    // Reaped: the pid no longer exists.
    expect(await hasNetworkNamespace(pid)).toBe(false);
    expect(await removeDefaultRoute(pid)).toBe("exited");
  });
});

describe("removeDefaultRoute, twice at once", () => {
  it("both succeed when the other took the route first (the restart watch races a start)", async () => {
    // A namespace of the test's own, with a veth pair inside it and a default route through it.
    const holder = spawn("unshare", ["-n", "sleep", "60"], { stdio: "ignore" });
    try {
      const pid = holder.pid as number;
      await new Promise((r) => setTimeout(r, 100));
      const inNs = (...args: string[]) => run("nsenter", ["-t", String(pid), "-n", "ip", ...args]);
      for (const args of [
        ["link", "add", "v0", "type", "veth", "peer", "name", "v1"],
        ["link", "set", "v0", "up"],
        ["link", "set", "v1", "up"],
        ["addr", "add", "10.251.0.2/24", "dev", "v0"],
      ]) {
        expect((await inNs(...args)).code).toBe(0);
      }
      for (let i = 0; i < 5; i++) {
        expect((await inNs("route", "add", "default", "via", "10.251.0.1")).code).toBe(0);
        const both = await Promise.all([removeDefaultRoute(pid), removeDefaultRoute(pid)]);
        expect(both).toEqual(["removed", "removed"]);
        expect((await routes(pid)).some((r) => r.dst === "default")).toBe(false);
      }
    } finally {
      holder.kill("SIGKILL");
    }
  });
});

describe("lookupAndConnect", () => {
  it("answers each lookup as the kernel does, connects only where a listener is, and fails on a gone namespace", async () => {
    // A namespace of the test's own: loopback up, a listener on 127.0.0.1:7777, no other route.
    const listener = [
      "import socket, time",
      "s = socket.socket(); s.bind(('127.0.0.1', 7777)); s.listen(); print('up', flush=True)",
      "time.sleep(60)",
    ].join("\n");
    const holder = spawn(
      "unshare",
      ["-n", "sh", "-c", `ip link set lo up && exec python3 -c "$0"`, listener],
      {
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    try {
      await once(holder.stdout, "data");
      const pid = holder.pid as number;
      // No route to an outside address (RTNETLINK refuses it): null; loopback: through lo.
      const both = await lookupAndConnect(pid, ["192.0.2.1", "127.0.0.1"], { host: "127.0.0.1", port: 7777 });
      expect(both).toEqual({ lookups: [null, { dev: "lo" }], connected: true });
      expect(await lookupAndConnect(pid, [], { host: "127.0.0.1", port: 7778 })).toEqual({
        lookups: [],
        connected: false,
      });
      expect(await lookupAndConnect(pid, ["127.0.0.1"])).toEqual({
        lookups: [{ dev: "lo" }],
        connected: false,
      });
      // Only addresses reach ip's batch input.
      await expect(lookupAndConnect(pid, ["127.0.0.1\nroute flush all"])).rejects.toThrow(
        "not an IPv4 address",
      );
    } finally {
      holder.kill();
      await once(holder, "exit");
    }
    const child = spawn("true");
    await once(child, "exit");
    await expect(lookupAndConnect(child.pid as number, ["192.0.2.1"])).rejects.toThrow("did not answer");
  });
});
