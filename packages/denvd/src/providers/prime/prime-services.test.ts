import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ProviderMessages } from "@denv/spec";
import { Labels } from "@denv/spec/labels";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { refusal } from "../testing/refusal.js";
import { PrimeApi } from "./prime-api.js";
import { primeLabels } from "./prime-materialize.js";
import { PrimeRuntime } from "./prime-runtime.js";
import { type PrimeDouble, startPrimeDouble } from "./testing/prime-double.js";

/**
 * PrimeRuntime with several services against the Prime double: one sandbox per service, the
 * sandboxes members of a private network of the environment's (the double's: a Docker network
 * with no address of the host's on it), each service reached by its name. The `db` service is a
 * small line server of Perl's (Debian's perl-base) that keeps one value in its own sandbox's
 * disk; the agent and the verifier reach it from the agent's sandbox. Only 127.0.0.1 and
 * containers this test made are connected to.
 */
const HOST = `h${randomBytes(3).toString("hex")}`;
const ENV = "duo/alpha";

let double: PrimeDouble;
let api: PrimeApi;
let rt: PrimeRuntime;
let dir: string;

const MAIN = [
  "FROM debian:bookworm-slim",
  "RUN useradd -m -u 1000 agent && useradd -M -u 1001 grader",
  "",
].join("\n");

const DB = [
  "FROM debian:bookworm-slim",
  "RUN useradd -M -u 1002 db && install -d -o 1002 /srv/data && echo 0 > /srv/data/value && chown 1002 /srv/data/value",
  "COPY serve.pl /srv/serve.pl",
  "",
].join("\n");

/** The verifier's own image: its user is a name only this image has. */
const VERIFIER = ["FROM debian:bookworm-slim", "RUN useradd -M -u 1001 judge", ""].join("\n");

/** One connection, one line: `SET v` keeps v, anything else answers the value kept. */
const SERVE = `use IO::Socket::INET;
my $s = IO::Socket::INET->new(LocalPort => 7000, Listen => 5, ReuseAddr => 1) or die "listen: $!";
open(my $r, ">", "/tmp/ready"); close $r;
print STDERR "serving on 7000\n";
while (my $c = $s->accept) {
  my $l = <$c> // ""; chomp $l;
  if ($l =~ /^SET (\\S+)/) { open(my $o, ">", "/srv/data/value"); print $o "$1\\n"; close $o; print $c "OK\\n"; }
  else { open(my $i, "<", "/srv/data/value"); my $v = <$i> // "0\\n"; print $c $v; }
  close $c;
}
`;

/** Each perl or sleep process of a sandbox, with its state (R, S, T…), as root sees them. */
const STATES = `for d in /proc/[0-9]*; do
  c=$(tr '\\0' ' ' < $d/cmdline 2>/dev/null)
  case "$c" in "perl "*|"sleep "*) echo "\${c%% *} $(cut -d' ' -f3 $d/stat)";; esac
done`;

/** Asks the db one line over the network, by its service name. */
const ASK = (line: string) => `exec 3<>/dev/tcp/db/7000 && echo '${line}' >&3 && cat <&3`;

/** Grades the value the db keeps: 1 when it is 42. */
const CHECK = `exec 3<>/dev/tcp/db/7000 && echo GET >&3 && v=$(cat <&3)
[ "$v" = 42 ] && r=1 || r=0
echo "{\\"reward\\": $r, \\"uid\\": $(id -u)}" > "$REWARD_DIR/reward.json"
`;

const DUO = `services:
  db:
    build: ./db
    user: "1002"
    command: ["perl", "/srv/serve.pl"]
    expose: ["7000"]
    mem_limit: 1536m
    cpus: 1.5
    cap_drop: [ALL]
    healthcheck: { test: ["CMD-SHELL", "test -f /tmp/ready"], interval: 1s, retries: 20 }
  main:
    build: .
    command: ["sleep", "infinity"]
    depends_on: { db: { condition: service_healthy } }
x-denv:
  agent: { service: main, user: "1000", workdir: /home/agent }
  verifier:
    build: ./verifier
    user: "1001"
    command: ["bash", "/tests/check.sh"]
    timeout: 30
    tests: ./tests
`;

async function project(name: string, compose: string): Promise<string> {
  const p = join(dir, name);
  await mkdir(join(p, "tests"), { recursive: true });
  await mkdir(join(p, "db"), { recursive: true });
  await mkdir(join(p, "verifier"), { recursive: true });
  await writeFile(join(p, "verifier", "Dockerfile"), VERIFIER);
  await writeFile(join(p, "Dockerfile"), MAIN);
  await writeFile(join(p, "db", "Dockerfile"), DB);
  await writeFile(join(p, "db", "serve.pl"), SERVE);
  await writeFile(join(p, "tests", "check.sh"), CHECK);
  await writeFile(join(p, "compose.yaml"), compose);
  return p;
}

const sh = (script: string, env = ENV) => rt.exec(env, { cmd: ["bash", "-c", script] });
const ask = async (line: string, env = ENV) => (await sh(ASK(line), env)).stdout.toString().trim();

/** The double's sandboxes of this host that are not deleted. */
const live = () =>
  [...double.server.sandboxes.all.values()]
    .filter((s) => s.status !== "TERMINATED" && s.labels.includes(`${Labels.host}=${HOST}`))
    .map((s) => s.id);

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "denv-prime-services-"));
  double = await startPrimeDouble();
  api = new PrimeApi(double.connection);
  rt = await PrimeRuntime.open({
    hostId: HOST,
    stateDir: join(dir, "state"),
    connection: double.connection,
    egressCanaries: [double.canary],
  });
  await rt.deploy({ project: "duo", projectDir: await project("duo", DUO), command: "cmd-deploy-1" });
}, 180_000);

afterAll(async () => {
  await rt?.release().catch(() => undefined);
  await rt?.close();
  await double?.close();
  await rm(dir, { recursive: true, force: true });
  expect(double?.leftovers(), "what the test made at the double").toEqual([]);
}, 60_000);

describe("PrimeRuntime with several services on the Prime double", { timeout: 90_000 }, () => {
  it("deploys a sandbox per service on a private network of the environment's; the agent reaches db by name, egress shut", async () => {
    const [env] = (await rt.list()).environments;
    expect(env?.id).toBe(ENV);
    expect(env?.services.map((s) => s.name).sort()).toEqual(["db", "main"]);
    expect(env?.evidence.probe).toMatchObject({ ok: true, findings: [] });
    expect(double.canary.hits()).toBe(0);
    const ids = env?.services.map((s) => s.container_id) ?? [];
    for (const id of ids) {
      const sbx = await api.getSandbox(id);
      expect(sbx.networkAccess).toBe(false);
      expect(sbx.labels).toEqual(expect.arrayContaining(primeLabels({ [Labels.environment]: ENV })));
    }
    // Prime sizes sandboxes in whole cores and GiB: db's limits rounded up, main's defaults.
    const db = double.server.sandboxes.get(env?.services.find((s) => s.name === "db")?.container_id ?? "");
    expect([db.cpuCores, db.memoryGB]).toEqual([2, 2]);
    // db's cap_drop: its server runs as its compose user with an empty bounding set.
    const status = execFileSync(
      "docker",
      [
        "exec",
        db.container ?? "",
        "sh",
        "-c",
        `grep -E '^(Uid|CapBnd|CapEff):' /proc/$(pgrep -o perl)/status`,
      ],
      { encoding: "utf8" },
    );
    expect(status).toMatch(/^Uid:\t1002\t/m);
    expect(status).toMatch(/^CapBnd:\t0{16}$/m);
    expect(status).toMatch(/^CapEff:\t0{16}$/m);
    const network = await api.getNetwork(env?.network.id ?? "");
    expect(network.members.map((m) => m.sandboxId).sort()).toEqual([...ids].sort());
    expect(network.rules).toEqual([{ from: "*", to: "tag:service-db", ports: [7000] }]);
    expect(await ask("GET")).toBe("0");
    // The names are root's: the agent cannot point db elsewhere.
    expect((await sh("echo '1.2.3.4 db' >> /etc/hosts 2>&1; echo $?")).stdout.toString().trim()).not.toBe(
      "0",
    );
  });

  it("prints a service's output from its own sandbox: db's, and none of main's sleep", async () => {
    expect(await rt.logs(ENV, "db")).toEqual({ stdout: "serving on 7000\n", stderr: "" });
    expect(await rt.logs(ENV)).toEqual({ stdout: "", stderr: "" });
    expect((await refusal(rt.logs(ENV, "cache"))).message).toBe(`environment ${ENV} has no service 'cache'`);
  });

  it("runs exec and files in the agent's service only: another service's sandbox is refused", async () => {
    const e = await refusal(rt.exec(ENV, { cmd: ["id"], service: "db" }));
    expect(e.message).toBe(ProviderMessages.agentServiceOnly("Prime", "db", "main"));
    expect((await refusal(rt.getFiles(ENV, "/srv", { service: "db" }))).message).toBe(e.message);
  });

  it("snapshots every service's sandbox; a fork restores both on a network of its own, its db answering from its own disk", async () => {
    expect(await ask("SET 42")).toBe("OK");
    await sh("setsid sleep 4646 >/dev/null 2>&1 </dev/null & echo started");
    // What runs in each sandbox the moment the double is asked for its checkpoint: its state.
    const checkpoints = double.server.checkpoints;
    const create = checkpoints.create.bind(checkpoints);
    const seen: string[] = [];
    checkpoints.create = (sandboxId) => {
      const container = double.server.sandboxes.get(sandboxId).container ?? "";
      seen.push(execFileSync("docker", ["exec", container, "sh", "-c", STATES], { encoding: "utf8" }).trim());
      return create(sandboxId);
    };
    let v: Awaited<ReturnType<PrimeRuntime["snapshot"]>>;
    try {
      v = await rt.snapshot(ENV, { command: "cmd-snap-1" });
    } finally {
      checkpoints.create = create;
    }
    expect(Object.keys(v.digests).sort()).toEqual(["db", "main"]);
    // Every service's and the agent's processes were stopped (T) while any checkpoint was taken,
    // in both sandboxes: one moment of the whole environment.
    expect(seen.sort()).toEqual(["perl T", "sleep T\nsleep T"]);
    expect(v.timings.frozen_ms).toBeGreaterThan(0);
    // The frozen window ended: the services run again.
    expect(await ask("GET")).toBe("42");
    await sh("pkill -f 'sleep 4646'; true");
    expect(await ask("SET 7")).toBe("OK");
    const fork = await rt.fork(v.id, { name: "copy", command: "cmd-fork-1" });
    expect(await ask("GET", fork.id)).toBe("42");
    expect(await ask("GET")).toBe("7");
    expect(fork.network.id).not.toBe((await rt.list()).environments.find((e) => e.id === ENV)?.network.id);
    const networkId = fork.network.id;
    await rt.destroy(fork.id);
    for (const s of fork.services)
      expect(double.server.sandboxes.get(s.container_id).status).toBe("TERMINATED");
    await expect(api.getNetwork(networkId)).rejects.toMatchObject({ status: 404 });
    await rt.deleteVersion(v.id);
  });

  it("grades on a fork, the verifier in a sandbox of its own image on the fork's network reaching db: 0.0 for 7, 1.0 for 42", async () => {
    const wrong = await rt.verify(ENV, { command: "cmd-verify-0" });
    expect(wrong.status, wrong.log).toBe("graded");
    expect(wrong.rewards).toEqual({ reward: 0, uid: 1001 });
    expect(await ask("SET 42")).toBe("OK");
    const right = await rt.verify(ENV, { command: "cmd-verify-1" });
    expect(right.status, right.log).toBe("graded");
    expect(right.rewards).toEqual({ reward: 1, uid: 1001 });
    // The version graded was taken in a frozen window of the services, and the verify says how long.
    expect(right.evidence.snapshot.frozen_ms).toBeGreaterThan(0);
    expect(right.evidence.verifier?.isolation).toMatch(
      /^prime: a sandbox of its own \S+ from the verifier's image, a member of the fork's private network \S+, as uid 1001 \(judge\), without internet access$/,
    );
    expect((await rt.list()).environments.map((e) => e.id)).toEqual([ENV]);
    expect(live()).toHaveLength(2);
  });

  it("a deploy whose service never turns healthy leaves no sandbox and no network", async () => {
    const before = live().length;
    const networks = double.server.networks.all.size;
    const broken = await project(
      "broken",
      DUO.replace("test -f /tmp/ready", "false").replace("retries: 20", "retries: 1"),
    );
    await refusal(rt.deploy({ project: "broken", projectDir: broken, command: "cmd-broken" }));
    expect(live()).toHaveLength(before);
    expect(double.server.networks.all.size).toBe(networks);
    expect(await rt.has("broken/alpha")).toBe(false);
  });

  it("release deletes every sandbox, network and checkpoint", async () => {
    const [env] = (await rt.list()).environments;
    await rt.release();
    expect(live()).toEqual([]);
    await expect(api.getNetwork(env?.network.id ?? "")).rejects.toMatchObject({ status: 404 });
    expect([...double.server.checkpoints.all.values()]).toEqual([]);
    expect((await rt.list()).environments).toEqual([]);
  });
});
