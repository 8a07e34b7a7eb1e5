import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import {
  DescribeInstanceAttributeCommand,
  DescribeInstancesCommand,
  type EC2Client,
  type Instance,
  RunInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { TARGET_SETTINGS, TargetMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Log } from "../log.js";
import { FakeHost } from "../testing/fake-host.js";
import { startTestCp, type TestCp, waitFor } from "../testing/harness.js";
import { MotoServer } from "../testing/moto-server.js";

/**
 * The aws driver end to end: a cp whose aws targets talk to moto's server mode (a local EC2 API)
 * through the AWS SDK, as they would to AWS; the test looks at what was made with the same SDK.
 */

const REGION = "eu-central-1";
const AMI = "ami-0a1b2c3d4e5f60718";
const KEY_ID = `AKIA${randomBytes(8).toString("hex").toUpperCase()}`;
const SECRET = randomBytes(30).toString("base64");
const lines: string[] = [];
const capture: Log = {
  debug: (m, f) => lines.push(JSON.stringify({ m, f })),
  info: (m, f) => lines.push(JSON.stringify({ m, f })),
  warn: (m, f) => lines.push(JSON.stringify({ m, f })),
  error: (m, f) => lines.push(JSON.stringify({ m, f })),
};

describe("aws targets (EC2, against moto's server mode)", () => {
  let t: TestCp;
  let moto: MotoServer;
  let ec2: EC2Client;

  beforeAll(async () => {
    moto = await new MotoServer().start();
    ec2 = moto.ec2(REGION);
    t = await startTestCp({ log: capture, provisionIntervalMs: 3_600_000 });
  });
  afterAll(async () => {
    ec2?.destroy();
    await t?.close();
    await moto?.close();
  });

  const aws = (name: string, settings: Record<string, unknown> = {}) =>
    t.admin.post("/v1/targets", {
      name,
      kind: "aws",
      settings: { region: REGION, image: AMI, endpoint: moto.url, ...settings },
      credentials: { access_key_id: KEY_ID, secret_access_key: SECRET },
    });

  /** Instances that are not terminated, with their tags as a map. */
  async function instances(): Promise<Array<Instance & { tags: Record<string, string> }>> {
    const r = await ec2.send(
      new DescribeInstancesCommand({
        Filters: [{ Name: "instance-state-name", Values: ["pending", "running", "stopping", "stopped"] }],
      }),
    );
    return (r.Reservations ?? []).flatMap((res) =>
      (res.Instances ?? []).map((i) => ({
        ...i,
        tags: Object.fromEntries((i.Tags ?? []).map((x) => [x.Key ?? "", x.Value ?? ""])),
      })),
    );
  }
  /** This cp's instances of `target` (another cp's share the account in one test). */
  const ofTarget = async (target: string) =>
    (await instances()).filter(
      (i) => i.tags["ai.denv.target"] === target && i.tags["ai.denv.cp"] !== "another-cp",
    );

  async function reconcile(target: string): Promise<void> {
    const { status, body } = await t.admin.post(`/v1/targets/${target}/reconcile`);
    expect([status, body?.error?.message]).toEqual([204, undefined]);
  }

  async function machines(target: string) {
    return (await t.admin.get(`/v1/targets/${target}/machines`)).body.machines as Array<{
      id: string;
      status: string;
      provider_id?: string;
      cost_class: string;
      host_id?: string;
      error?: string;
    }>;
  }

  async function waitForMachine(target: string, ok: (m: { status: string }) => boolean) {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const m = (await machines(target)).find(ok);
      if (m) return m;
      if (Date.now() > deadline)
        throw new Error(`no machine of ${target} matched: ${JSON.stringify(await machines(target))}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  it("bad settings are refused with one line naming them, and nothing is created", async () => {
    const known = Object.keys(TARGET_SETTINGS.aws.settings);
    const cases: Array<[Record<string, unknown>, string]> = [
      [
        { region: undefined },
        TargetMessages.missingSetting("aws", "region", "an AWS region such as eu-central-1"),
      ],
      [{ image: "debian-13" }, TargetMessages.badSetting("aws", "image", "debian-13", "an AMI id (ami-...)")],
      [
        { subnet_id: "default" },
        TargetMessages.badSetting("aws", "subnet_id", "default", "a subnet id (subnet-...)"),
      ],
      [{ location: "fsn1" }, TargetMessages.unknownSetting("aws", "location", known)],
    ];
    for (const [settings, message] of cases) {
      const body = { region: REGION, image: AMI, ...settings };
      for (const [k, v] of Object.entries(body)) if (v === undefined) delete body[k as keyof typeof body];
      const r = await t.admin.post("/v1/targets", {
        name: "bad",
        kind: "aws",
        settings: body,
        credentials: { access_key_id: KEY_ID, secret_access_key: SECRET },
      });
      expect([r.status, r.body.error.message]).toEqual([400, message]);
    }
    const noSecret = await t.admin.post("/v1/targets", {
      name: "bad",
      kind: "aws",
      settings: { region: REGION, image: AMI },
      credentials: { access_key_id: KEY_ID },
    });
    expect(noSecret.body.error.message).toBe(
      TargetMessages.missingCredential("aws", "secret_access_key", "AWS_SECRET_ACCESS_KEY"),
    );
    expect((await t.admin.get("/v1/targets/bad")).status).toBe(404);
    expect(await instances()).toHaveLength(0);
  });

  it("keeps min_machines: an instance tagged as denv's, whose user data joins with a single-use token", async () => {
    const r = await aws("cloud", {
      min_machines: 1,
      max_machines: 2,
      labels: "team=rl",
      instance_type: "t3.large",
    });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({
      name: "cloud",
      kind: "aws",
      credentials: ["access_key_id", "secret_access_key"],
    });
    const machine = await waitForMachine("cloud", (m) => m.status === "running");
    const [inst, ...more] = await ofTarget("cloud");
    expect(more).toHaveLength(0);
    expect(inst?.InstanceId).toBe(machine.provider_id);
    expect([inst?.ImageId, inst?.InstanceType]).toEqual([AMI, "t3.large"]);
    expect(inst?.tags).toMatchObject({
      Name: machine.id,
      team: "rl",
      "ai.denv.managed": "true",
      "ai.denv.target": "cloud",
      "ai.denv.machine": machine.id,
    });
    expect(machine.cost_class).toBe(`aws/t3.large/${inst?.Placement?.AvailabilityZone}`);
    // The user data fetches this cp's install script and carries the machine's own join token.
    const attr = await ec2.send(
      new DescribeInstanceAttributeCommand({ InstanceId: inst?.InstanceId, Attribute: "userData" }),
    );
    const userData = Buffer.from(attr.UserData?.Value ?? "", "base64").toString();
    expect(userData.startsWith("#cloud-config\n")).toBe(true);
    expect(userData).toContain(`curl -fsSL '${t.url}/v1/install/install.sh' | sh`);
    const token = /DENVD_TOKEN='(denvj_[^']+)'/.exec(userData)?.[1] ?? "";
    expect(token).not.toBe("");
    const h = await FakeHost.join(t.url, token, {
      name: machine.id,
      labels: { "ai.denv.machine": machine.id },
    });
    expect([h.id, h.target]).toEqual([machine.id, "cloud"]);
    await expect(FakeHost.join(t.url, token, { name: "again" })).rejects.toThrow(/join token/);
    await reconcile("cloud");
    expect((await waitForMachine("cloud", (m) => m.status === "joined")).host_id).toBe(machine.id);
    // The minimum is met: still one instance.
    expect(await ofTarget("cloud")).toHaveLength(1);
  });

  it("the reconcile loop terminates an instance with denv's tags that no record accounts for, and only that", async () => {
    const [mine] = await ofTarget("cloud");
    const cpId = mine?.tags["ai.denv.cp"] ?? "";
    const run = (tags: Record<string, string>) =>
      ec2.send(
        new RunInstancesCommand({
          ImageId: AMI,
          InstanceType: "t3.micro",
          MinCount: 1,
          MaxCount: 1,
          TagSpecifications: [
            { ResourceType: "instance", Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) },
          ],
        }),
      );
    const stray = await run({
      "ai.denv.managed": "true",
      "ai.denv.cp": cpId,
      "ai.denv.target": "cloud",
      "ai.denv.machine": "cloud-stray1",
    });
    // Another control plane's machine and someone's web server share the account: left alone.
    await run({
      "ai.denv.managed": "true",
      "ai.denv.cp": "another-cp",
      "ai.denv.target": "cloud",
      "ai.denv.machine": "x-1",
    });
    await run({ Name: "web-1" });
    await reconcile("cloud");
    const left = await instances();
    expect(left.map((i) => i.InstanceId)).not.toContain(stray.Instances?.[0]?.InstanceId);
    expect(left.map((i) => i.tags.Name ?? i.tags["ai.denv.machine"]).sort()).toEqual(
      [mine?.tags.Name, "web-1", "x-1"].sort(),
    );
    expect((await machines("cloud")).find((m) => m.id === "cloud-stray1")).toMatchObject({
      status: "deleted",
      error: "found at the provider with denv's labels and no record of it: deleted",
    });
  });

  it("an instance terminated outside denv: its machine is deleted, its host removed, and a new one keeps the minimum", async () => {
    const [gone] = await machines("cloud").then((ms) => ms.filter((m) => m.status === "joined"));
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [gone?.provider_id ?? ""] }));
    await reconcile("cloud");
    const after = await machines("cloud");
    expect(after.find((m) => m.id === gone?.id)).toMatchObject({
      status: "deleted",
      error: "gone at the provider",
    });
    expect((await t.admin.get("/v1/hosts")).body.hosts.map((h: { id: string }) => h.id)).not.toContain(
      gone?.id,
    );
    const fresh = after.filter((m) => m.status === "running");
    expect(fresh).toHaveLength(1);
    expect((await ofTarget("cloud")).map((i) => i.InstanceId)).toEqual([fresh[0]?.provider_id]);
  });

  it("a create EC2 refuses fails the machine with EC2's error in one line and revokes its token", async () => {
    const r = await aws("nosubnet", { min_machines: 1, subnet_id: "subnet-0123456789abcdef0" });
    expect(r.status).toBe(201);
    const failed = await waitForMachine("nosubnet", (m) => m.status === "failed");
    expect(failed.error).toMatch(
      /^AWS EC2 RunInstances in eu-central-1: InvalidSubnetID\.NotFound: .*subnet-0123456789abcdef0/,
    );
    expect(failed.error).not.toContain("\n");
    const tokens = (await t.admin.get("/v1/targets/nosubnet/join-tokens")).body.join_tokens;
    expect(tokens.length).toBeGreaterThan(0);
    for (const jt of tokens) expect(jt.revoked_at).toBeTruthy();
    expect(await ofTarget("nosubnet")).toHaveLength(0);
    expect((await t.admin.del("/v1/targets/nosubnet")).status).toBe(204);
  });

  it("an endpoint that cannot be reached: the reconcile answers with one line naming it", async () => {
    const dead = "http://127.0.0.1:9";
    expect((await aws("dead", { endpoint: dead })).status).toBe(201);
    const r = await t.admin.post("/v1/targets/dead/reconcile");
    expect(r.status).toBe(409);
    expect(r.body.error.message).toBe(
      TargetMessages.reconcileFailed(
        "dead",
        `AWS EC2 DescribeInstances in eu-central-1: ${dead} cannot be reached (ECONNREFUSED)`,
      ),
    );
    // Nothing is known of its machines, so it is not forgotten: refused in one line, kept.
    const rm = await t.admin.del("/v1/targets/dead");
    expect([rm.status, rm.body.error.message]).toEqual([
      409,
      TargetMessages.removeFailed(
        "dead",
        `AWS EC2 DescribeInstances in eu-central-1: ${dead} cannot be reached (ECONNREFUSED)`,
      ),
    ]);
    expect((await t.admin.get("/v1/targets/dead")).status).toBe(200);
  });

  it("a deploy that finds no host asks for a machine; at max_machines it says so", async () => {
    await aws("grow", { max_machines: 1 });
    await t.admin.post("/v1/projects", { name: "shop" });
    const deploy = () =>
      t.admin.upload("POST", "/v1/projects/shop/deploy?environment=alpha&target=grow&wait=true", tarOf(ONE));
    const first = await deploy();
    const [m] = await machines("grow");
    expect(first.body.error.message).toBe(TargetMessages.machineStarting("grow", m?.id ?? ""));
    expect(await ofTarget("grow")).toHaveLength(1);
    // It joins and fills up (a host with no room); the next deploy meets the maximum.
    const jt = await t.admin.post("/v1/targets/grow/join-tokens", {});
    const h = await FakeHost.join(t.url, jt.body.token, {
      name: m?.id,
      labels: { "ai.denv.machine": m?.id ?? "" },
      capacity: { memory_bytes: 1, cpus: 1, pids: 1, disk_free_bytes: 1 },
    });
    await h.connect();
    await reconcile("grow");
    const again = await deploy();
    expect(again.body.error.message).toContain(TargetMessages.atMaxMachines("grow", 1));
    await h.close();
  });

  it("a removal right after the create waits for the first machine, so nothing is left running unseen", async () => {
    expect((await aws("brief", { min_machines: 1 })).status).toBe(201);
    // The create's first reconcile (the SDK loading, then RunInstances) is still under way.
    const rm = await t.admin.del("/v1/targets/brief");
    expect([rm.status, rm.body.error?.message]).toEqual([409, TargetMessages.targetInUse("brief", 1)]);
    expect(await ofTarget("brief")).toHaveLength(1);
    expect((await t.admin.del("/v1/targets/brief?force=true")).status).toBe(204);
    expect(await ofTarget("brief")).toHaveLength(0);
    // A reconcile queued behind the removal finds no target and creates nothing.
    await t.admin.post("/v1/targets/brief/reconcile");
    expect(await ofTarget("brief")).toHaveLength(0);
  });

  it("credentials are sealed at rest, never returned and never logged", async () => {
    for (const path of ["/v1/targets", "/v1/targets/cloud", "/v1/targets/cloud/machines"]) {
      const answer = JSON.stringify((await t.admin.get(path)).body);
      expect(answer).not.toContain(SECRET);
      expect(answer).not.toContain(KEY_ID);
    }
    const names = (await readdir(t.dataDir)).filter((n) => n.startsWith("denv.db"));
    const bytes = (await Promise.all(names.map((n) => readFile(join(t.dataDir, n), "latin1")))).join("");
    expect(bytes).not.toContain(SECRET);
    expect(bytes).not.toContain(KEY_ID);
    const logged = lines.join("\n");
    expect(logged).toContain("machine created");
    expect(logged).not.toContain(SECRET);
    expect(logged).not.toContain(KEY_ID);
  });

  it("targets rm is refused while machines run; --force terminates every instance of the target", async () => {
    const refused = await t.admin.del("/v1/targets/cloud");
    expect(refused.status).toBe(409);
    expect(await ofTarget("cloud")).toHaveLength(1);
    expect((await t.admin.del("/v1/targets/cloud?force=true")).status).toBe(204);
    expect(await ofTarget("cloud")).toHaveLength(0);
    // The other control plane's instance and the web server are still there.
    expect((await instances()).map((i) => i.tags.Name ?? i.tags["ai.denv.machine"]).sort()).toEqual(
      expect.arrayContaining(["web-1", "x-1"]),
    );
  });
});

const ONE = { "compose.yaml": "services:\n  main:\n    image: busybox\n" };

/** A plain tar of `files` (the tar binary, as the CLI's upload is a tar). */
function tarOf(files: Record<string, string>): Buffer {
  const dir = execFileSync("mktemp", ["-d"]).toString().trim();
  for (const [name, text] of Object.entries(files))
    execFileSync("sh", ["-c", `cat > "${dir}/${name}"`], { input: text });
  const out = execFileSync("tar", ["-C", dir, "-cf", "-", "."]);
  execFileSync("rm", ["-rf", dir]);
  return out;
}

describe("a provisioned machine that never joins", () => {
  let t: TestCp;
  let moto: MotoServer;
  let ec2: EC2Client;
  beforeAll(async () => {
    moto = await new MotoServer().start();
    ec2 = moto.ec2(REGION);
    t = await startTestCp({ provisionIntervalMs: 3_600_000, provisionJoinTimeoutMs: 1500 });
  });
  afterAll(async () => {
    ec2?.destroy();
    await t?.close();
    await moto?.close();
  });

  it("is deleted once its join timeout passed, its token revoked, and the minimum made again", async () => {
    const r = await t.admin.post("/v1/targets", {
      name: "stuck",
      kind: "aws",
      settings: { region: REGION, image: AMI, endpoint: moto.url, min_machines: 1 },
      credentials: { access_key_id: KEY_ID, secret_access_key: SECRET },
    });
    expect(r.status).toBe(201);
    const machines = async () =>
      (await t.admin.get("/v1/targets/stuck/machines")).body.machines as Array<{
        id: string;
        status: string;
        provider_id?: string;
        error?: string;
      }>;
    const first = await waitFor(async () => (await machines()).find((m) => m.status === "running"));
    // Its token lives as long as the timeout: the one join it allows cannot come later.
    const jt = (await t.admin.get("/v1/targets/stuck/join-tokens")).body.join_tokens[0];
    const ttlMs = Date.parse(jt.expires_at) - Date.parse(jt.created_at);
    expect(ttlMs).toBeGreaterThanOrEqual(1500);
    expect(ttlMs).toBeLessThanOrEqual(2500);
    // Within the timeout the reconcile waits for it; the machine holds the target's one slot.
    const early = await t.admin.post("/v1/targets/stuck/reconcile");
    expect(early.status).toBe(204);
    expect((await machines()).find((m) => m.id === first.id)?.status).toBe("running");
    await new Promise((r) => setTimeout(r, 1600));
    expect((await t.admin.post("/v1/targets/stuck/reconcile")).status).toBe(204);
    const after = await machines();
    expect(after.find((m) => m.id === first.id)).toMatchObject({
      status: "deleted",
      error: TargetMessages.notJoined("1.5 s"),
    });
    const state = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [first.provider_id ?? ""] }));
    expect(state.Reservations?.[0]?.Instances?.[0]?.State?.Name).toBe("terminated");
    expect((await t.admin.get("/v1/targets/stuck/join-tokens")).body.join_tokens[0]?.revoked_at).toBeTruthy();
    // min_machines=1: a new machine replaces it.
    expect(after.filter((m) => m.status === "running" && m.id !== first.id)).toHaveLength(1);
    expect((await t.admin.del("/v1/targets/stuck?force=true")).status).toBe(204);
  });
});
