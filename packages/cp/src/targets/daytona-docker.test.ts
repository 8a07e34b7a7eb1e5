import { TARGET_SETTINGS, TargetMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
// The Daytona double (a test helper of denvd's, not the cp's code): the API and toolbox routes.
import {
  type DaytonaDouble,
  startDaytonaDouble,
} from "../../../denvd/src/providers/daytona/testing/daytona-double.js";
import { FakeHost } from "../testing/fake-host.js";
import { startTestCp, type TestCp } from "../testing/harness.js";

/**
 * The daytona-docker driver against the Daytona double: sandboxes of a Docker-capable snapshot
 * are the target's machines. Here they are stand-ins that record what the toolbox's execute was
 * asked (the e2e provisioned.test boots real machines with engines of their own); the join is a
 * FakeHost using the token the install was given.
 */

const SNAPSHOT = "docker-28";

interface Machine {
  id: string;
  status: string;
  provider_id?: string;
  cost_class: string;
  host_id?: string;
  error?: string;
}

describe("daytona-docker targets (Docker-capable Daytona sandboxes as machines)", () => {
  let t: TestCp;
  let d: DaytonaDouble;
  const executed: Array<{ sandbox: string; command: string; envs: Record<string, string> }> = [];
  const removed: string[] = [];
  let install = { exitCode: 0, output: "denvd installed and joined\n" };
  let bootError: string | undefined;

  beforeAll(async () => {
    [d, t] = await Promise.all([startDaytonaDouble(), startTestCp({ provisionIntervalMs: 3_600_000 })]);
    d.server.sandboxes.machines = {
      snapshot: SNAPSHOT,
      boot: async () => {
        if (bootError) throw new Error(bootError);
      },
      execute: async (sandbox, command, o) => {
        executed.push({ sandbox, command, envs: o.envs });
        return install;
      },
      remove: async (sandbox) => void removed.push(sandbox),
    };
  }, 120_000);
  afterAll(async () => {
    await t?.close();
    await d?.close();
  });

  const add = (name: string, settings: Record<string, unknown> = {}) =>
    t.admin.post("/v1/targets", {
      name,
      kind: "daytona-docker",
      settings: { snapshot: SNAPSHOT, base_url: d.url, ...settings },
      credentials: { api_key: d.apiKey },
    });
  const machines = async (target: string): Promise<Machine[]> =>
    (await t.admin.get(`/v1/targets/${target}/machines`)).body.machines;
  async function waitForMachine(target: string, ok: (m: Machine) => boolean): Promise<Machine> {
    for (const deadline = Date.now() + 20_000; ; ) {
      const m = (await machines(target)).find(ok);
      if (m) return m;
      if (Date.now() > deadline)
        throw new Error(`no machine of ${target} matched: ${JSON.stringify(await machines(target))}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  const sandboxesOf = (target: string) =>
    [...d.server.sandboxes.all.values()].filter((sb) => sb.labels["ai.denv.target"] === target);

  it("bad settings are refused with one line naming them, and nothing is created", async () => {
    const cidrs = "up to 5 IPv4 CIDRs separated by commas (such as 203.0.113.7/32)";
    const cases: Array<[Record<string, unknown>, string]> = [
      [
        { snapshot: undefined },
        TargetMessages.missingSetting("daytona-docker", "snapshot", "letters, digits, '.', '-' and '_'"),
      ],
      [
        { allow_list: "10.0.0.0/33" },
        TargetMessages.badSetting("daytona-docker", "allow_list", "10.0.0.0/33", cidrs),
      ],
      [
        { allow_list: "1.0.0.0/8,2.0.0.0/8,3.0.0.0/8,4.0.0.0/8,5.0.0.0/8,6.0.0.0/8" },
        TargetMessages.badSetting(
          "daytona-docker",
          "allow_list",
          "1.0.0.0/8,2.0.0.0/8,3.0.0.0/8,4.0.0.0/8,5.0.0.0/8,6.0.0.0/8",
          cidrs,
        ),
      ],
      [{ cpu: 0 }, TargetMessages.badSetting("daytona-docker", "cpu", "0", "a whole number >= 1")],
      [
        { region: "eu" },
        TargetMessages.unknownSetting(
          "daytona-docker",
          "region",
          Object.keys(TARGET_SETTINGS["daytona-docker"].settings),
        ),
      ],
    ];
    for (const [settings, message] of cases) {
      const body: Record<string, unknown> = { snapshot: SNAPSHOT, base_url: d.url, ...settings };
      for (const [k, v] of Object.entries(body)) if (v === undefined) delete body[k];
      const r = await t.admin.post("/v1/targets", {
        name: "bad",
        kind: "daytona-docker",
        settings: body,
        credentials: { api_key: d.apiKey },
      });
      expect([r.status, r.body.error.message]).toEqual([400, message]);
    }
    const noKey = await t.admin.post("/v1/targets", {
      name: "bad",
      kind: "daytona-docker",
      settings: { snapshot: SNAPSHOT },
      credentials: {},
    });
    expect(noKey.body.error.message).toBe(
      TargetMessages.missingCredential("daytona-docker", "api_key", "DAYTONA_API_KEY"),
    );
    expect((await t.admin.get("/v1/targets/bad")).status).toBe(404);
    expect(d.liveSandboxes()).toBe(0);
  });

  it("keeps min_machines: a sandbox of the snapshot, installed through the toolbox with its join token in the environment only, joins", async () => {
    const r = await add("dind", {
      min_machines: 1,
      max_machines: 2,
      cpu: 4,
      memory: 8,
      disk: 40,
      allow_list: "203.0.113.7/32,198.51.100.0/24",
      labels: "team=rl",
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    const machine = await waitForMachine("dind", (m) => m.status === "running");
    const [sb, ...more] = sandboxesOf("dind");
    expect(more).toHaveLength(0);
    expect(sb).toMatchObject({
      id: machine.provider_id,
      name: machine.id,
      snapshot: SNAPSHOT,
      cpu: 4,
      memory: 8,
      disk: 40,
      networkAllowList: "203.0.113.7/32,198.51.100.0/24",
      networkBlockAll: false,
      autoStopInterval: 0,
      autoArchiveInterval: 0,
      labels: {
        team: "rl",
        "ai.denv.managed": "true",
        "ai.denv.target": "dind",
        "ai.denv.machine": machine.id,
      },
    });
    expect(machine.cost_class).toBe("daytona-docker/4cpu-8GiB-40GiB (billed by Daytona)");
    for (let i = 0; i < 200 && executed.length === 0; i++) await new Promise((r) => setTimeout(r, 50));
    const [run] = executed;
    expect(run?.sandbox).toBe(sb?.id);
    expect(run?.command).toContain(`curl -fsSL '${t.url}/v1/install/install.sh' -o /tmp/denv-install.sh`);
    const token = run?.envs.DENVD_TOKEN ?? "";
    expect(token).toMatch(/^denvj_/);
    expect(run?.command).not.toContain(token);
    expect(run?.envs).toMatchObject({
      DENV_HOST_NAME: machine.id,
      DENV_HOST_LABELS: `team=rl,ai.denv.machine=${machine.id}`,
    });
    // denvd in the sandbox joins with that token (a FakeHost here), once.
    const h = await FakeHost.join(t.url, token, {
      name: machine.id,
      labels: { "ai.denv.machine": machine.id },
    });
    expect([h.id, h.target]).toEqual([machine.id, "dind"]);
    await expect(FakeHost.join(t.url, token, { name: "again" })).rejects.toThrow(/join token/);
    expect((await t.admin.post("/v1/targets/dind/reconcile")).status).toBe(204);
    expect((await waitForMachine("dind", (m) => m.status === "joined")).host_id).toBe(machine.id);
    expect(sandboxesOf("dind")).toHaveLength(1);
  });

  it("an install that fails deletes its sandbox at once: the machine is failed with the install's last lines, its token spent", async () => {
    install = {
      exitCode: 1,
      output: "one\ntwo\nthree\ninstall.sh: the Docker engine did not answer within 60 s\n",
    };
    const before = executed.length;
    expect((await add("broken", { min_machines: 1 })).status).toBe(201);
    const m = await waitForMachine("broken", (x) => x.status === "failed");
    expect(m.error).toBe(
      TargetMessages.installFailed(
        m.provider_id ?? "",
        "the install exited with 1: two | three | install.sh: the Docker engine did not answer within 60 s",
      ),
    );
    expect(sandboxesOf("broken")).toHaveLength(0);
    expect(removed).toContain(m.provider_id);
    const token = executed[before]?.envs.DENVD_TOKEN ?? "";
    await expect(FakeHost.join(t.url, token, { name: "late" })).rejects.toThrow(/join token/);
    install = { exitCode: 0, output: "" };
  });

  it("a sandbox that never starts is deleted, its machine failed with Daytona's reason", async () => {
    bootError = "dockerd: no space left on device";
    expect((await add("noboot", { min_machines: 1 })).status).toBe(201);
    const m = await waitForMachine("noboot", (x) => x.status === "failed");
    expect(m.error).toBe(
      TargetMessages.installFailed(
        m.provider_id ?? "",
        `Daytona sandbox ${m.provider_id} is error: dockerd: no space left on device`,
      ),
    );
    expect(sandboxesOf("noboot")).toHaveLength(0);
    bootError = undefined;
  });

  it("a create that Daytona answers with a sandbox labelled for another machine fails, that sandbox deleted", async () => {
    const sandboxes = d.server.sandboxes;
    const create = sandboxes.create.bind(sandboxes);
    sandboxes.create = (body) =>
      create({ ...body, labels: { ...(body.labels as object), "ai.denv.machine": "someone-else" } });
    try {
      expect((await add("liar", { min_machines: 1 })).status).toBe(201);
      const m = await waitForMachine("liar", (x) => x.status === "failed");
      expect(m.error).toMatch(
        /^Daytona answered the create of machine \S+ with sandbox \S+, labelled for someone-else$/,
      );
      expect(sandboxesOf("liar")).toHaveLength(0);
    } finally {
      sandboxes.create = create;
    }
  });

  it("rm --force deletes every sandbox of the target at Daytona", async () => {
    for (const name of ["broken", "noboot", "dind", "liar"]) {
      const r = await t.admin.del(`/v1/targets/${name}?force=true`);
      expect([name, r.status]).toEqual([name, 204]);
    }
    expect(d.liveSandboxes()).toBe(0);
  });
});
