import { ControlPlaneMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CAPACITY_BOUNDS } from "./services/host-service.js";
import type { FakeHost } from "./testing/fake-host.js";
import { deployed, startTestCp, type TestCp } from "./testing/harness.js";

/**
 * Attacks on the control plane by a host: a rogue denvd (here a protocol client that answers
 * for what it was not asked about, or claims more than it has). Each row: what the cp must refuse,
 * and that nothing was recorded for it.
 */
describe("a rogue host", () => {
  let t: TestCp;
  let host: FakeHost;

  beforeAll(async () => {
    t = await startTestCp();
    host = await t.host();
    await t.admin.post("/v1/projects", { name: "victim" });
  });
  afterAll(async () => t.close());

  const deploy = (project: string) =>
    t.admin.upload(
      "POST",
      `/v1/projects/${project}/deploy?environment=alpha&wait=true`,
      Buffer.from("a tar"),
    );

  it("answers with a result of the wrong shape: the deployment fails with one line naming the fields", async () => {
    await t.admin.post("/v1/projects", { name: "shapes" });
    host.rogue.set("env.snapshot", () => ({ id: 7, junk: true }));
    try {
      const r = await deploy("shapes");
      expect(r.body.status).toBe("failed");
      const message = r.body.error.message as string;
      expect(message).not.toContain("\n");
      expect(message).toMatch(
        new RegExp(
          `^host ${escapeRegExp(host.id)} returned a malformed env.snapshot result: id: .+; project: .+; number: .+; and \\d+ more$`,
        ),
      );
    } finally {
      host.rogue.delete("env.snapshot");
    }
    expect((await t.admin.get("/v1/projects/shapes/versions")).body.versions).toEqual([]);
  });

  it("answers a deploy with another project's environment: refused, nothing recorded", async () => {
    await t.admin.post("/v1/projects", { name: "shop" });
    host.rogue.set("env.deploy", (r) => ({ ...(r as object), id: "victim/alpha" }));
    try {
      const r = await deploy("shop");
      expect(r.body.status).toBe("failed");
      expect(r.body.error.message).toMatch(
        new RegExp(
          `^${escapeRegExp(ControlPlaneMessages.wrongAnswer(host.id, "env.deploy", "XX")).replace("XX", ".*")}$`,
        ),
      );
      expect((await t.admin.get("/v1/projects/victim/environments")).body.environments).toEqual([]);
      expect((await t.admin.get("/v1/projects/shop/environments")).body.environments).toEqual([]);
    } finally {
      host.rogue.delete("env.deploy");
    }
  });

  it("answers a snapshot with another number or another project's version: refused, not recorded", async () => {
    for (const rewrite of [
      (r: Record<string, unknown>) => ({ ...r, id: "shop@v7", number: 7 }),
      (r: Record<string, unknown>) => ({ ...r, id: "victim@v1", project: "victim" }),
    ]) {
      host.rogue.set("env.snapshot", (r) => rewrite(r as Record<string, unknown>));
      try {
        const r = await deploy("shop");
        expect(r.body.status).toBe("failed");
        expect(r.body.error.message).toContain(
          `host ${host.id} answered env.snapshot for something it was not asked about`,
        );
      } finally {
        host.rogue.delete("env.snapshot");
      }
      expect((await t.admin.get("/v1/projects/victim/versions")).body.versions).toEqual([]);
      expect((await t.admin.get("/v1/projects/shop/versions")).body.versions).toEqual([]);
    }
  });

  it("an honest answer still goes through", async () => {
    const d = await deployed(t, "shop");
    expect(d.status).toBe("succeeded");
  });

  it("claims more capacity than any machine has, and labels the operator did not give: bounded", async () => {
    const liar = await t.host({
      labels: { zone: "a" },
      helloLabels: { zone: "b", gpu: "a100" },
      capacity: { cpus: 1e9, memory_bytes: 1e30, disk_free_bytes: -5 },
    });
    const listed = (await t.admin.get("/v1/hosts")).body.hosts.find((h: { id: string }) => h.id === liar.id);
    expect(listed.capacity).toEqual({
      cpus: CAPACITY_BOUNDS.cpus,
      memory_bytes: CAPACITY_BOUNDS.memory_bytes,
      disk_free_bytes: 0,
    });
    expect(listed.labels.zone).toBe("a");
    expect(listed.labels.gpu).toBe("a100");
  });
});

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
