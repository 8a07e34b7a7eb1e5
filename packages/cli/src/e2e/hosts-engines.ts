import { execFile } from "node:child_process";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { cleanEnv, type Proc, pingEngine, startProc, waitUntil } from "./fixture-procs.js";

const sh = promisify(execFile);

/** Where one host of the hosts fixture lives: its namespace, its link to the bridge, its folders. */
interface EngineHost {
  netns: string;
  /** The bridge's end of the host's veth pair. */
  veth: string;
  address: string;
  run: string;
  lib: string;
  socket: string;
  stateDir: string;
  dockerLog: string;
}

/** Network namespace `netns` with eth0 (`address`/24) on `bridge`, through the veth pair `veth` - `peer`. */
export async function makeNamespace(o: {
  netns: string;
  veth: string;
  peer: string;
  bridge: string;
  address: string;
}): Promise<void> {
  const ns = (...args: string[]) => sh("ip", ["-n", o.netns, ...args]);
  await sh("ip", ["netns", "add", o.netns]);
  await sh("ip", ["link", "add", o.veth, "type", "veth", "peer", "name", o.peer]);
  await sh("ip", ["link", "set", o.veth, "master", o.bridge, "up"]);
  await sh("ip", ["link", "set", o.peer, "netns", o.netns]);
  await ns("link", "set", o.peer, "name", "eth0");
  await ns("addr", "add", `${o.address}/24`, "dev", "eth0");
  await ns("link", "set", "eth0", "up");
  await ns("link", "set", "lo", "up");
}

/**
 * Makes a host's network namespace (eth0 on `bridge`, through the veth pair `veth` - `peer`),
 * starts its Docker engine in it and loads the base image once `saved` wrote it to `baseTar`.
 * `started` gets the engine's process as soon as it runs, so that a failure later stops it too.
 */
export async function startEngine(
  h: EngineHost,
  o: { peer: string; bridge: string; saved: Promise<unknown>; baseTar: string; started: (p: Proc) => void },
): Promise<void> {
  const { peer, bridge, saved, baseTar, started } = o;
  mkdirSync(h.run, { recursive: true, mode: 0o700 });
  mkdirSync(h.stateDir, { recursive: true, mode: 0o700 });
  await makeNamespace({ ...h, peer, bridge });
  // nsenter --net, not `ip netns exec`: that one also makes a private mount namespace, and
  // dockerd must see the btrfs store denvd mounts.
  const p = startProc(
    "nsenter",
    [
      `--net=/run/netns/${h.netns}`,
      "dockerd",
      "--data-root",
      path.join(h.lib, "docker"),
      "--exec-root",
      path.join(h.run, "x"),
      "-H",
      `unix://${h.socket}`,
      "--pidfile",
      path.join(h.run, "docker.pid"),
      // Where dockerd would use the machine's containerd (its socket exists), a namespace of
      // its own keeps this engine's containers apart from the machine engine's.
      "--containerd-namespace",
      h.netns,
      "--containerd-plugins-namespace",
      `${h.netns}-p`,
    ],
    h.dockerLog,
    cleanEnv(),
  );
  started(p);
  await waitUntil(`the engine at ${h.socket}`, 60_000, () => pingEngine(h.socket), {
    p,
    log: h.dockerLog,
  });
  await saved;
  await sh("docker", ["-H", `unix://${h.socket}`, "load", "-i", baseTar], { env: cleanEnv() });
}
