import { spawn } from "node:child_process";
import { once } from "node:events";
import { describe, expect, it } from "vitest";
import { hasNetworkNamespace, parseRouteTable, removeDefaultRoute } from "./netns.js";

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
