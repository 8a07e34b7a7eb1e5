import { join } from "node:path";
import { ControlPlaneMessages, PlacementMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openStore } from "../store/open-store.js";
import type { Store } from "../store/store.js";
import type { FakeHost } from "../testing/fake-host.js";
import { deployed, type Reply, startTestCp, type TestCp, waitFor } from "../testing/harness.js";

/**
 * Many hosts: versions held by several hosts (replicas), forks placed where the version is not,
 * hosts removed or reconnecting with replicas, versions deleted on every holder, and
 * environments of an offline host. A transfer is played here by what it leaves behind: the
 * receiving fake host holds the version and the store records its replica.
 */

const place = (d: Reply["body"]) =>
  d.phases.find((p: { name: string }) => p.name === "place")?.evidence as Reply["body"];

/** A cp with fake hosts, and a handle on its store (the same SQLite file, beside the cp). */
async function cluster(names: string[]): Promise<{ t: TestCp; hosts: FakeHost[]; store: Store }> {
  const t = await startTestCp();
  const hosts: FakeHost[] = [];
  for (const name of names) hosts.push(await t.host({ name }));
  return { t, hosts, store: await openStore(join(t.dataDir, "denv.db")) };
}

/** What a finished transfer of `version` to `host` leaves: the host holds it, the cp records it. */
async function sent(store: Store, host: FakeHost, version: string): Promise<void> {
  host.versions.add(version);
  expect(await store.putReplica(version, host.id, new Date().toISOString())).toBe(true);
}

const hostStatus = async (t: TestCp, id: string) =>
  (await t.admin.get("/v1/hosts")).body.hosts.find((h: { id: string }) => h.id === id)?.status;

describe("a version's replicas in the API and in placement", () => {
  let t: TestCp;
  let h1: FakeHost;
  let h2: FakeHost;
  let h3: FakeHost;
  let store: Store;
  beforeAll(async () => {
    let hosts: FakeHost[];
    ({ t, hosts, store } = await cluster(["h1", "h2", "h3"]));
    [h1, h2, h3] = hosts as [FakeHost, FakeHost, FakeHost];
    await deployed(t, "shop"); // shop@v1 on h1 (ties go to the first id)
  });
  afterAll(async () => {
    await store.close();
    await t.close();
  });

  it("a version lists the hosts holding it, the origin first", async () => {
    expect((await t.admin.get("/v1/versions/shop/1")).body).toMatchObject({
      host_id: "h1",
      replicas: ["h1"],
    });
    const snap = await t.admin.post("/v1/environments/shop/alpha/snapshot?wait=true");
    expect(snap.body.result).toMatchObject({ id: "shop@v2", host_id: "h1", replicas: ["h1"] });
    await sent(store, h3, "shop@v1");
    await sent(store, h2, "shop@v1");
    expect((await t.admin.get("/v1/versions/shop/1")).body).toMatchObject({
      host_id: "h1",
      replicas: ["h1", "h2", "h3"],
    });
    const listed = (await t.admin.get("/v1/projects/shop/versions")).body.versions;
    expect(listed.map((v: { id: string; replicas: string[] }) => [v.id, v.replicas])).toEqual([
      ["shop@v2", ["h1"]],
      ["shop@v1", ["h1", "h2", "h3"]],
    ]);
  });

  it("a fork goes to a host holding its version, the others scored with the transfer they would need", async () => {
    const fork = await t.admin.post("/v1/environments/shop/alpha/fork?wait=true", {
      version: "2",
      name: "f1",
    });
    expect(fork.body.status, JSON.stringify(fork.body.error)).toBe("succeeded");
    const p = place(fork.body);
    expect(p).toMatchObject({ host: "h1", reason: "holds shop@v2 (snapshot locality)" });
    expect(p.transfer).toBeUndefined();
    expect(p.candidates.find((c: { host: string }) => c.host === "h1")).toMatchObject({ local: true });
    // The fake snapshot is 8 KiB of layers and 40 KiB of volumes: nothing at 200 MB/s.
    for (const other of ["h2", "h3"])
      expect(p.candidates.find((c: { host: string }) => c.host === other)).toMatchObject({
        local: false,
        transfer_bytes: 48 * 1024,
        transfer_cost: 0,
      });
    expect((await t.admin.del("/v1/environments/shop/f1?wait=true")).body.status).toBe("succeeded");
  });

  it("with its holder draining, a fork is placed on another host and the version sent from the holder", async () => {
    await t.admin.post("/v1/hosts/h1/drain");
    const fork = await t.admin.post("/v1/environments/shop/alpha/fork?wait=true", {
      version: "2",
      name: "f2",
    });
    const p = place(fork.body);
    expect(p.host).toBe("h2");
    expect(p.transfer).toEqual({ from: "h1", bytes: 48 * 1024 });
    // h2 and h3 are empty (1 GiB of 16 x 4 taken after it: 0.984); ties go to the first id.
    expect(p.reason).toBe(
      "highest score 0.984: transfer of shop@v2 (48 KiB) from h1; 98% of its room left after this one",
    );
    expect(p.candidates.find((c: { host: string }) => c.host === "h1")).toMatchObject({
      excluded: "draining",
    });
    // What the fork does with the placement (the transfer, then the restore) is the fork's own.
    await t.admin.del("/v1/environments/shop/f2?wait=true");
  });

  it("a version whose every holder is offline cannot be forked, in one line naming them", async () => {
    h1.disconnect();
    await waitFor(async () => (await hostStatus(t, "h1")) === "offline");
    const fork = await t.admin.post("/v1/environments/shop/alpha/fork?wait=true", {
      version: "2",
      name: "f3",
    });
    expect(fork.body.status).toBe("failed");
    expect(fork.body.error).toEqual({
      code: "conflict",
      message: PlacementMessages.versionHoldersOffline("shop@v2", "h1"),
    });
    // shop@v1 has holders online: it still forks, on one of them.
    const ok = await t.admin.post("/v1/environments/shop/alpha/fork?wait=true", { version: "1", name: "f4" });
    expect(ok.body.status, JSON.stringify(ok.body.error)).toBe("succeeded");
    expect(place(ok.body)).toMatchObject({ host: "h2", reason: "holds shop@v1 (snapshot locality)" });
    expect(h3.connected).toBe(true);
  });
});

describe("removing a host that holds replicas", () => {
  let t: TestCp;
  let h1: FakeHost;
  let h2: FakeHost;
  let store: Store;
  beforeAll(async () => {
    let hosts: FakeHost[];
    ({ t, hosts, store } = await cluster(["h1", "h2"]));
    [h1, h2] = hosts as [FakeHost, FakeHost];
    await deployed(t, "shop"); // shop/alpha and shop@v1 on h1
    await t.admin.post("/v1/environments/shop/alpha/snapshot?wait=true"); // shop@v2 on h1
    await sent(store, h2, "shop@v1");
  });
  afterAll(async () => {
    await store.close();
    await t.close();
  });

  it("--force: a version held elsewhere survives there (its origin moves), one held only there is forgotten", async () => {
    const r = await t.admin.del("/v1/hosts/h1?force=true");
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      id: "h1",
      environments: ["shop/alpha"],
      versions: ["shop@v2"],
      replicas_dropped: ["shop@v1"],
    });
    await h1.until(() => h1.closeCode !== undefined);
    expect((await t.admin.get("/v1/versions/shop/1")).body).toMatchObject({
      host_id: "h2",
      replicas: ["h2"],
    });
    expect((await t.admin.get("/v1/versions/shop/2")).status).toBe(404);
    // The survivor forks where it lives now.
    const fork = await t.admin.post("/v1/environments/shop/alpha/fork?wait=true", {
      version: "1",
      name: "f1",
    });
    expect(fork.body.status, JSON.stringify(fork.body.error)).toBe("succeeded");
    expect(fork.body.host_id).toBe("h2");
    await t.admin.del("/v1/environments/shop/f1?wait=true");
  });

  it("without force, a host with no environments: its replica goes, the version lives on the others", async () => {
    const h3 = await t.host({ name: "h3" });
    await sent(store, h3, "shop@v1");
    const r = await t.admin.del("/v1/hosts/h2");
    expect(r.body).toEqual({ id: "h2", environments: [], versions: [], replicas_dropped: ["shop@v1"] });
    await h2.until(() => h2.closeCode !== undefined);
    expect((await t.admin.get("/v1/versions/shop/1")).body).toMatchObject({
      host_id: "h3",
      replicas: ["h3"],
    });
  });
});

describe("a host's hello against the replicas the cp records there", () => {
  let t: TestCp;
  let h1: FakeHost;
  let h2: FakeHost;
  let store: Store;
  beforeAll(async () => {
    let hosts: FakeHost[];
    ({ t, hosts, store } = await cluster(["h1", "h2"]));
    [h1, h2] = hosts as [FakeHost, FakeHost];
    await deployed(t, "shop"); // shop@v1 on h1
    await t.admin.post("/v1/environments/shop/alpha/snapshot?wait=true"); // shop@v2 on h1
    await sent(store, h2, "shop@v1");
  });
  afterAll(async () => {
    await store.close();
    await t.close();
  });

  const replicas = async (n: number) => (await t.admin.get(`/v1/versions/shop/${n}`)).body.replicas;

  async function reconnect(h: FakeHost, change: () => void): Promise<void> {
    h.disconnect();
    await waitFor(async () => (await hostStatus(t, h.id)) === "offline");
    change();
    await h.connect();
    await waitFor(async () => (await hostStatus(t, h.id)) === "online");
  }

  it("a replica the host no longer holds is dropped; what it claims beyond the cp's record is not added", async () => {
    await reconnect(h2, () => {
      h2.versions.delete("shop@v1");
      // h2 claims shop@v2, which the cp never sent it.
      h2.versions.add("shop@v2");
    });
    await waitFor(async () => (await replicas(1)).length === 1);
    expect(await replicas(1)).toEqual(["h1"]);
    expect(await replicas(2)).toEqual(["h1"]);
    expect(await store.listReplicasOnHost("h2")).toEqual([]);
  });

  it("the origin losing a version another host holds: it lives on there; held nowhere any more: forgotten", async () => {
    h2.versions.delete("shop@v2");
    await sent(store, h2, "shop@v1");
    await reconnect(h1, () => {
      h1.versions.clear();
    });
    await waitFor(async () => (await t.admin.get("/v1/versions/shop/2")).status === 404);
    expect((await t.admin.get("/v1/versions/shop/1")).body).toMatchObject({
      host_id: "h2",
      replicas: ["h2"],
    });
  });
});

describe("deleting a version deletes it on every host holding it", () => {
  let t: TestCp;
  let h1: FakeHost;
  let h2: FakeHost;
  let h3: FakeHost;
  let store: Store;
  beforeAll(async () => {
    let hosts: FakeHost[];
    ({ t, hosts, store } = await cluster(["h1", "h2", "h3"]));
    [h1, h2, h3] = hosts as [FakeHost, FakeHost, FakeHost];
    await deployed(t, "shop"); // shop@v1 on h1, which alpha runs
    await t.admin.post("/v1/environments/shop/alpha/snapshot?wait=true"); // shop@v2 on h1
    await t.admin.post("/v1/environments/shop/alpha/snapshot?wait=true"); // shop@v3 on h1
  });
  afterAll(async () => {
    await store.close();
    await t.close();
  });

  const deletes = (h: FakeHost, v: string) =>
    h.commands.filter((c) => c.kind === "version.delete" && c.payload.version === v).length;

  it("an offline holder keeps the version and its replica until it can be reached", async () => {
    await sent(store, h2, "shop@v2");
    await sent(store, h3, "shop@v2");
    h3.disconnect();
    await waitFor(async () => (await hostStatus(t, "h3")) === "offline");
    const refused = await t.admin.del("/v1/versions/shop/2");
    expect([refused.status, refused.body.error]).toEqual([
      409,
      { code: "conflict", message: ControlPlaneMessages.hostOffline("h3") },
    ]);
    // The holders that answered deleted it and their replicas went; the origin moved to h3.
    expect([h1.versions.has("shop@v2"), h2.versions.has("shop@v2"), h3.versions.has("shop@v2")]).toEqual([
      false,
      false,
      true,
    ]);
    expect((await t.admin.get("/v1/versions/shop/2")).body).toMatchObject({
      host_id: "h3",
      replicas: ["h3"],
    });

    await h3.connect();
    await waitFor(async () => (await hostStatus(t, "h3")) === "online");
    expect((await t.admin.del("/v1/versions/shop/2")).status).toBe(204);
    expect(h3.versions.has("shop@v2")).toBe(false);
    expect((await t.admin.get("/v1/versions/shop/2")).status).toBe(404);
    expect(await store.listReplicas("shop@v2")).toEqual([]);
    // h1 and h2 were asked once: their replicas were gone by the second try.
    expect([deletes(h1, "shop@v2"), deletes(h2, "shop@v2"), deletes(h3, "shop@v2")]).toEqual([1, 1, 1]);
  });

  it("a holder that answers it has no such version counts as done", async () => {
    // The cp records a replica on h2 that h2 does not have (it lost it since its hello).
    expect(await store.putReplica("shop@v3", "h2", new Date().toISOString())).toBe(true);
    expect((await t.admin.del("/v1/versions/shop/3")).status).toBe(204);
    expect(deletes(h2, "shop@v3")).toBe(1);
    expect((await t.admin.get("/v1/versions/shop/3")).status).toBe(404);
  });
});

describe("environments of an offline host", () => {
  let t: TestCp;
  let h1: FakeHost;
  beforeAll(async () => {
    t = await startTestCp();
    h1 = await t.host({ name: "h1" });
    await deployed(t, "shop");
  });
  afterAll(() => t.close());

  const env = async () => (await t.admin.get("/v1/environments/shop/alpha")).body;

  it("are unreachable while it is away, keep their status, and every interactive call names the host", async () => {
    expect(await env()).toMatchObject({ status: "running", host_id: "h1", reachable: true });
    h1.disconnect();
    await waitFor(async () => (await hostStatus(t, "h1")) === "offline");
    expect(await env()).toMatchObject({ status: "running", host_id: "h1", reachable: false });
    const listed = (await t.admin.get("/v1/projects/shop/environments")).body.environments;
    expect(listed.map((e: { id: string; reachable: boolean }) => [e.id, e.reachable])).toEqual([
      ["shop/alpha", false],
    ]);

    const offline = { code: "conflict", message: ControlPlaneMessages.hostOffline("h1") };
    const calls: Array<[string, Promise<Reply>]> = [
      ["exec", t.admin.post("/v1/environments/shop/alpha/exec", { cmd: ["true"] })],
      ["logs", t.admin.get("/v1/environments/shop/alpha/logs")],
      ["probe", t.admin.get("/v1/environments/shop/alpha/probe")],
      ["files get", t.admin.get("/v1/environments/shop/alpha/files?path=/workspace")],
      [
        "files put",
        t.admin.upload("PUT", "/v1/environments/shop/alpha/files?path=/workspace", Buffer.from("x")),
      ],
    ];
    for (const [what, call] of calls) {
      const r = await call;
      expect([what, r.status, r.body.error], what).toEqual([what, 409, offline]);
    }

    await h1.connect();
    await waitFor(async () => (await hostStatus(t, "h1")) === "online");
    expect(await env()).toMatchObject({ status: "running", reachable: true });
  });

  it("an environment that runs on no host is not reachable", async () => {
    const r = await t.admin.del("/v1/hosts/h1?force=true");
    expect(r.body.environments).toEqual(["shop/alpha"]);
    expect(await env()).toMatchObject({ status: "failed", reachable: false });
    expect((await env()).host_id).toBeUndefined();
  });
});
