import { execFile, execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PrimeApi } from "../prime-api.js";
import { type PrimeDouble, startPrimeDouble } from "./prime-double.js";

/**
 * The Prime double driven by the official Python SDK (prime-sandboxes 0.5.1, in the venv
 * scripts/setup-python makes), nothing mocked: sandboxes are containers of
 * debian:bookworm-slim on this machine's engine (local; never pulled), and of an image the flow
 * builds through Prime's image API (a docker build on the same engine). The SDK reaches only the
 * double: its base URL and key come from the environment, which holds nothing else of Prime's.
 * Private networks are driven through denv's client (PrimeApi) on the same double.
 */
const here = dirname(fileURLToPath(import.meta.url));
const python = resolve(here, "../../../../../../python/.prime/.venv/bin/python");
const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();

let double: PrimeDouble;
let home: string;

beforeAll(async () => {
  if (!existsSync(python)) throw new Error(`${python} is missing: run scripts/setup-python`);
  home = await mkdtemp(join(tmpdir(), "denv-prime-sdk-"));
  double = await startPrimeDouble();
}, 60_000);

afterAll(async () => {
  try {
    await double?.close();
  } finally {
    await rm(home, { recursive: true, force: true });
  }
  expect(double.leftovers()).toEqual([]);
  expect(docker("ps", "-a", "-q", "--filter", "label=ai.denv.test=prime-server")).toBe("");
  expect(docker("images", "-q", "--filter", "label=ai.denv.test=prime-server")).toBe("");
}, 60_000);

/** Runs the SDK flow script; its stdout is one JSON object of what it saw. */
function runFlow(): Promise<Record<string, unknown>> {
  const env = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: home,
    ...double.sdkEnv,
  };
  return new Promise((resolveFlow, reject) => {
    execFile(
      python,
      [join(here, "prime_sdk_flow.py")],
      { env, timeout: 150_000, maxBuffer: 1 << 20 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`prime_sdk_flow.py failed: ${err.message}\n${stderr}`));
        else resolveFlow(JSON.parse(stdout) as Record<string, unknown>);
      },
    );
  });
}

describe("PrimeServer with the prime-sandboxes SDK", { timeout: 180_000 }, () => {
  it("creates, runs commands as a user, moves files, checkpoints and restores, shuts egress, builds an image, refuses a wrong key", async () => {
    const seen = await runFlow();
    expect(seen).toMatchObject({
      created_status: "PENDING",
      status: "RUNNING",
      listed_other_label: 0,
      exec: { stdout: "out\n", stderr: "err\n", exit_code: 3 },
      exec_as_nobody: "sandbox-wide per-call /tmp nobody",
      exec_as_root: "0",
      timeout: "CommandTimeoutError",
      upload: 21,
      download_matches: true,
      read_file: 21,
      read_missing: "SandboxFileNotFoundError",
      live: { echo: "got ping\n", killed: 137 },
      checkpoint_state: "PENDING",
      checkpoint_durable: "DURABLE",
      checkpoints_listed: true,
      restored_image: "debian:bookworm-slim",
      restored_file: "checkpointed",
      closed_allowlist: [],
      probe_open: "reached",
      probe_closed: "blocked",
      egress_closed: [],
      deleted_status: "TERMINATED",
      checkpoint_deleted: true,
      wrong_key: "UnauthorizedError",
    });
    // The SDK's image flow: a PENDING build that COMPLETEs (BUILDING unless a poll missed it);
    // a sandbox of it runs.
    const ref = `${double.server.userId}/flow-image:v1`;
    const { statuses, ...image } = seen.image as { statuses: string[] };
    expect(["PENDING,BUILDING,COMPLETED", "PENDING,COMPLETED"]).toContain(statuses.join());
    expect(image).toEqual({
      wrong_type: 403,
      listed: [[ref, "COMPLETED"]],
      ref,
      ran: "built through the image API\n1000\n",
    });
    expect(seen.listed).toHaveLength(1);
    expect(String(seen.delete_tip)).toMatch(/HTTP 409: .*active tip/);
    expect((seen.live as { pid: number }).pid).toBeGreaterThan(0);
    // Every call went to the double's API, and the gateway served the commands and files.
    expect(double.server.requests).toContain("POST /api/v1/sandbox/status:batchGet");
    expect(double.server.sandboxes.all.size).toBe(4);
    expect([...double.server.sandboxes.all.values()].every((s) => s.status === "TERMINATED")).toBe(true);
  });
});

describe("PrimeServer's private networks", { timeout: 60_000 }, () => {
  let api: PrimeApi;
  let host: Server;
  let hostPort = 0;
  let hostHits = 0;
  /** Two sandboxes with no egress (an empty allowlist), and one with. */
  let [x, y, open] = ["", "", ""];
  let lan = "";
  let gateways: { lan: string; open: string; bridge: string };

  /** Runs a bash script in the sandbox's container. */
  const sh = (sandbox: string, script: string) =>
    double.server.docker.run(double.server.sandboxes.get(sandbox).container ?? "", ["bash", "-c", script]);
  const reaches = async (sandbox: string, to: string, port: number) =>
    (await sh(sandbox, `timeout 2 bash -c 'echo > /dev/tcp/${to}/${port}'`)).exitCode === 0;
  const resolves = async (sandbox: string, name: string) =>
    (await sh(sandbox, `timeout 2 getent hosts ${name}`)).exitCode === 0;
  const gateway = (network: string) =>
    docker("network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", network);
  const dockerNetworksOf = (sandbox: string) =>
    Object.keys(
      JSON.parse(
        docker(
          "inspect",
          "-f",
          "{{json .NetworkSettings.Networks}}",
          double.server.sandboxes.get(sandbox).container ?? "",
        ),
      ) as object,
    );
  /** Whether the sandbox reaches the host's listener at any address of the host's on a bridge. */
  const reachesHost = async (sandbox: string) =>
    (await Promise.all(Object.values(gateways).map((g) => reaches(sandbox, g, hostPort)))).some(Boolean);
  /** Sends a raw call, for the refusals: its status and Prime's `detail`. */
  const send = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${double.connection.baseUrl}/sandbox/networks${path}`, {
      method,
      headers: { authorization: `Bearer ${double.connection.apiKey}`, "content-type": "application/json" },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return [res.status, text ? (JSON.parse(text) as { detail?: string }).detail : undefined];
  };

  beforeAll(async () => {
    api = new PrimeApi(double.connection);
    host = createServer((c) => {
      hostHits += 1;
      c.destroy();
    });
    await new Promise<void>((r) => host.listen(0, "0.0.0.0", r));
    hostPort = (host.address() as { port: number }).port;
    const create = (name: string, networkAccess: boolean) =>
      api.createSandbox({ name, dockerImage: "debian:bookworm-slim", networkAccess }).then((s) => s.id);
    [x, y, open] = await Promise.all([
      create("lan-x", false),
      create("lan-y", false),
      create("lan-open", true),
    ]);
    await Promise.all([x, y, open].map((id) => api.waitRunning(id)));
    // A listener in y that accepts and closes (debian-slim has perl, no nc).
    await sh(
      y,
      `nohup perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(Listen => 5, LocalPort => 7777, ReuseAddr => 1) or die; while ($c = $s->accept) { close $c }' >/dev/null 2>&1 &`,
    );
    lan = (await api.createNetwork({ name: "lan", rules: [] })).id;
    gateways = {
      lan: gateway(double.server.networks.get(lan).dockerNetwork),
      open: gateway(`denv-prime-${double.server.id}-open`),
      bridge: gateway("bridge"),
    };
  }, 60_000);

  afterAll(async () => {
    await new Promise<void>((r) => host?.close(() => r()));
  });

  it("members with no egress resolve and reach each other by name, and no address of the host's", async () => {
    // The control: a sandbox with egress reaches the host's listener, and no member's name.
    expect(await reachesHost(open)).toBe(true);
    expect(await resolves(open, `${y}.sandbox.internal`)).toBe(false);
    const hitsBefore = hostHits;
    await api.putNetworkMember(lan, x, ["agent"]);
    await api.putNetworkMember(lan, y, ["db"]);
    const seen = await sh(x, `getent hosts ${y}.sandbox.internal`);
    expect(seen.stdout.toString()).toMatch(
      new RegExp(`^10\\.\\d+\\.\\d+\\.\\d+\\s+${y}\\.sandbox\\.internal\\n$`),
    );
    expect(await reaches(x, `${y}.sandbox.internal`, 7777)).toBe(true);
    expect(await reachesHost(x)).toBe(false);
    expect(hostHits).toBe(hitsBefore);
    expect(dockerNetworksOf(x)).toEqual([`denv-prime-${double.server.id}-net-${lan}`]);
  });

  it("opens and shuts a member's egress while it stays on the network", async () => {
    await api.setNetworkAccess(x, true);
    expect(await reachesHost(x)).toBe(true);
    expect(await reaches(x, `${y}.sandbox.internal`, 7777)).toBe(true);
    await api.setNetworkAccess(x, false);
    expect(await reachesHost(x)).toBe(false);
    expect(await reaches(x, `${y}.sandbox.internal`, 7777)).toBe(true);
  });

  it("replaces a member's tags and the rules, and answers them; enforces membership, not the rules", async () => {
    await api.putNetworkMember(lan, x, ["agent", "grader"]);
    const rules = [{ from: "tag:db", to: "tag:agent", ports: [22] }];
    await api.setNetworkRules(lan, rules);
    expect(await api.getNetwork(lan)).toEqual({
      id: lan,
      name: "lan",
      members: [
        { sandboxId: x, tags: ["agent", "grader"] },
        { sandboxId: y, tags: ["db"] },
      ],
      rules,
    });
    // No rule lets an agent reach a db's port 7777: the double lets it anyway.
    expect(await reaches(x, `${y}.sandbox.internal`, 7777)).toBe(true);
  });

  it("parts a removed member from its peers and puts it back on no network", async () => {
    await api.removeNetworkMember(lan, x);
    expect((await api.getNetwork(lan)).members.map((m) => m.sandboxId)).toEqual([y]);
    expect(await resolves(x, `${y}.sandbox.internal`)).toBe(false);
    expect(dockerNetworksOf(x)).toEqual(["none"]);
    // Back on none, its egress still opens (off none) and shuts.
    await api.setNetworkAccess(x, true);
    expect(await reachesHost(x)).toBe(true);
    await api.setNetworkAccess(x, false);
    expect(dockerNetworksOf(x)).toEqual(["none"]);
  });

  it("parts the members of a deleted network; the network is gone", async () => {
    await api.putNetworkMember(lan, x, []);
    const yOnLan = (await sh(x, `getent hosts ${y}.sandbox.internal`)).stdout.toString().split(/\s/)[0] ?? "";
    expect(await reaches(x, yOnLan, 7777)).toBe(true);
    const dockerNetwork = double.server.networks.get(lan).dockerNetwork;
    await api.deleteNetwork(lan);
    expect(await reaches(x, yOnLan, 7777)).toBe(false);
    expect(await resolves(x, `${y}.sandbox.internal`)).toBe(false);
    expect(dockerNetworksOf(x)).toEqual(["none"]);
    expect(docker("network", "ls", "-q", "--filter", `id=${dockerNetwork}`)).toBe("");
    expect(await send("GET", `/${lan}`)).toEqual([404, `Network ${lan} not found`]);
    expect(await send("DELETE", `/${lan}`)).toEqual([404, `Network ${lan} not found`]);
  });

  it("refuses an unknown network or sandbox (404), a sandbox not running (409), a wrong body (422)", async () => {
    const net = (await api.createNetwork({ name: "refusals", rules: [] })).id;
    const gone = (await api.createSandbox({ name: "lan-gone", dockerImage: "debian:bookworm-slim" })).id;
    await api.deleteSandbox(gone);
    expect([
      await send("PUT", `/nope/members/${x}`, { tags: [] }),
      await send("PUT", `/${net}/members/nope`, { tags: [] }),
      await send("DELETE", `/${net}/members/${x}`),
      await send("PUT", `/nope/rules`, { rules: [] }),
      await send("GET", ""),
      await send("PUT", `/${net}/members/${gone}`, { tags: [] }),
    ]).toEqual([
      [404, "Network nope not found"],
      [404, "Sandbox nope not found"],
      [404, `Sandbox ${x} is not a member of network ${net}`],
      [404, "Network nope not found"],
      [404, "Not Found"],
      [409, `Sandbox ${gone} is not running`],
    ]);
    const rule = (r: object) =>
      send("POST", "", { name: "bad", rules: [{ from: "*", to: "*", ports: [80], ...r }] });
    expect([
      await send("POST", "", { rules: [] }),
      await send("POST", "", { name: "bad", team_id: 7 }),
      await send("POST", "", { name: "bad", rules: {} }),
      await rule({ from: "agent" }),
      await rule({ to: "tag:" }),
      await rule({ ports: [0] }),
      await rule({ ports: [65536] }),
      await rule({ ports: ["80"] }),
      await send("PUT", `/${net}/rules`, {}),
      await send("PUT", `/${net}/members/${x}`, { tags: "agent" }),
    ]).toEqual([
      [422, "name is required"],
      [422, "team_id must be a string"],
      [422, "rules must be a list"],
      [422, 'rules[0].from must be "*" or "tag:<name>"'],
      [422, 'rules[0].to must be "*" or "tag:<name>"'],
      [422, "rules[0].ports must be a list of ports (integers 1 to 65535)"],
      [422, "rules[0].ports must be a list of ports (integers 1 to 65535)"],
      [422, "rules[0].ports must be a list of ports (integers 1 to 65535)"],
      [422, "rules must be a list"],
      [422, "tags must be a list of strings"],
    ]);
    expect((await api.getNetwork(net)).members).toEqual([]);
    expect(double.server.networks.all.size).toBe(1);
  });

  it("drops a deleted sandbox from its networks; leaves close() a network with members to remove", async () => {
    const net = (await api.createNetwork({ name: "left-for-close", rules: [] })).id;
    await api.putNetworkMember(net, x, ["agent"]);
    await api.putNetworkMember(net, open, ["web"]);
    await api.deleteSandbox(open);
    expect((await api.getNetwork(net)).members).toEqual([{ sandboxId: x, tags: ["agent"] }]);
    // afterAll's leftovers check sees close() remove it with x still on it.
    const dockerNetwork = double.server.networks.get(net).dockerNetwork;
    expect(docker("network", "inspect", "-f", "{{len .Containers}}", dockerNetwork)).toBe("1");
  });
});
