import { readFile } from "node:fs/promises";
import { type HelloFrame, PROTOCOL_VERSION } from "@denv/spec";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { watchHosts } from "../control-plane.js";
import { HostLoad } from "../engine/host-load.js";
import { hashSecret, nowIso, SecretPrefix } from "../ids.js";
import { openStore } from "../store/open-store.js";
import type { EnvironmentRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { ENVIRONMENT_WRITES, HOST_WRITES } from "../store/watched-store.js";
import { quiet } from "../testing/harness.js";
import type { Principal } from "./access.js";
import { HostListCache } from "./host-list-cache.js";
import { HostService } from "./host-service.js";
import { presentHost } from "./present.js";

/**
 * What the cp keeps in memory about hosts is never stale: after every kind of change to a host
 * row or to an environment's placement, the list GET /v1/hosts pages through, and what placement
 * counts on each host, equal what the store says right then; without changes the list is built
 * once, and what each host holds is never read again from the store.
 */

const ADMIN: Principal = { tokenId: "t", name: "admin", role: "admin" };
const JOIN_SECRET = `${SecretPrefix.join}cache-test`;

function hello(hostId: string, o: Partial<HelloFrame> = {}): HelloFrame {
  return {
    v: PROTOCOL_VERSION,
    type: "hello",
    host_id: hostId,
    version: "0.1.0-test",
    capacity: { cpus: 8, memory_bytes: 16 * 1024 ** 3, disk_free_bytes: 1024 ** 4 },
    labels: {},
    environments: [],
    versions: [],
    unfinished: [],
    ...o,
  };
}

function environment(id: string, hostId: string | undefined): EnvironmentRecord {
  const [project = "", name = ""] = id.split("/");
  return {
    id,
    project,
    name,
    ...(hostId ? { hostId, hostEnv: name } : {}),
    status: "running",
    sandbox: false,
    services: [],
    createdAt: nowIso(),
    updatedAt: nowIso(),
  };
}

describe("the host list cache", () => {
  let raw: Store;
  let store: Store;
  let cache: HostListCache;
  let load: HostLoad;
  let hosts: HostService;

  beforeEach(async () => {
    raw = await openStore(":memory:");
    ({ store, hostList: cache, hostLoad: load } = watchHosts(raw));
    hosts = new HostService(store, cache, quiet, () => {});
    await store.createTarget({ name: "local", kind: "hosts", createdAt: nowIso() });
    await store.createJoinToken({
      id: "jt_1",
      target: "local",
      hash: hashSecret(JOIN_SECRET),
      usesLeft: 100,
      expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
      createdAt: nowIso(),
    });
  });
  afterEach(() => raw.close());

  /** What GET /v1/hosts should answer now: built straight from the store, bypassing the cache. */
  const fresh = async () => {
    const counts = await raw.countEnvironmentsByHost();
    return (await raw.listHosts())
      .map((h) => presentHost(h, counts.get(h.id) ?? 0))
      .sort((a, b) => (a.id < b.id ? -1 : 1));
  };
  const listed = async () => (await hosts.list(ADMIN, { limit: 1000 })).hosts;
  const join = (name: string) => hosts.join({ token: JOIN_SECRET, name, labels: { zone: "eu" } });

  /** Reads the list (so it is cached), makes the change, and reads it again. */
  const afterChange = async (what: string, change: () => Promise<unknown>) => {
    const before = await listed();
    const builds = cache.builds;
    expect(await listed(), `${what}: cached`).toEqual(before);
    expect(cache.builds, `${what}: served from the cache`).toBe(builds);
    await load.loads();
    await change();
    const after = await listed();
    expect(after, `${what}: not stale`).toEqual(await fresh());
    expect(after, `${what}: changed the list`).not.toEqual(before);
    expect(await load.loads(), `${what}: host loads`).toEqual(await new HostLoad(raw).loads());
    expect(load.builds, `${what}: host loads kept up to date, never read again`).toBe(1);
  };

  it("is never stale after a change to a host row or to an environment's host", async () => {
    await afterChange("join", () => join("a"));
    await join("b");
    await afterChange("hello (online)", () => hosts.online("a", hello("a")));
    await afterChange("hello with new labels", () =>
      hosts.online("a", hello("a", { labels: { gpu: "a100" } })),
    );
    await afterChange("hello with a new capacity", () =>
      hosts.online("a", hello("a", { capacity: { cpus: 64, memory_bytes: 1024 ** 4, disk_free_bytes: 1 } })),
    );
    await afterChange("offline", () => hosts.offline("a", "the connection closed"));
    await afterChange("drain", () => hosts.drain(ADMIN, "b"));
    await afterChange("environment created", () => store.putEnvironment(environment("p/e1", "a")));
    await afterChange("environment moved", () => store.putEnvironment(environment("p/e1", "b")));
    await afterChange("environment left on no host", () =>
      store.putEnvironment(environment("p/e1", undefined)),
    );
    await store.putEnvironment(environment("p/e2", "a"));
    await afterChange("environment destroyed", () => store.deleteEnvironment("p/e2"));
    await store.putEnvironment(environment("p/e3", "b"));
    await afterChange("host removed (forced: its environment fails on no host)", () =>
      hosts.remove(ADMIN, "b", true),
    );
    await hosts.online("a", hello("a"));
    await afterChange("every host marked offline at start", () => hosts.markAllOffline());
  });

  it("a list being built when a write comes is not kept", async () => {
    await join("a");
    const building = cache.list();
    await join("b");
    expect((await cache.list()).map((h) => h.id)).toEqual(["a", "b"]);
    await building;
    expect(cache.builds).toBe(2);
  });

  it("a failed write invalidates too, and a failed build is not kept", async () => {
    await join("a");
    const a = await raw.getHost("a");
    if (!a) throw new Error("host a was not created");
    await listed();
    // A write may fail after changing a row; the list is rebuilt either way.
    const builds = cache.builds;
    await expect(store.createHost({ ...a, credentialHash: "x" })).rejects.toThrow("host a exists");
    await listed();
    expect(cache.builds).toBe(builds + 1);

    const failing = new HostListCache({
      ...raw,
      listHosts: () => Promise.reject(new Error("the database went away")),
      countEnvironmentsByHost: () => raw.countEnvironmentsByHost(),
    } as Store);
    await expect(failing.list()).rejects.toThrow("the database went away");
    await expect(failing.list()).rejects.toThrow("the database went away");
    expect(failing.builds).toBe(2);
  });

  it("what each host holds: writes made while it is read from the store are applied on top; a failed one makes it read again", async () => {
    await join("a");
    await store.putEnvironment(environment("p/e1", "a"));
    const reading = load.loads();
    await store.putEnvironment(environment("p/e2", "a"));
    await store.deleteEnvironment("p/e1");
    expect((await reading).get("a")?.environments).toBe(1);
    expect(await load.loads()).toEqual(await new HostLoad(raw).loads());
    expect(load.builds).toBe(1);

    await expect(
      store.putEnvironment({ ...environment("p/e3", "a"), services: undefined as never }),
    ).rejects.toThrow();
    expect(await load.loads()).toEqual(await new HostLoad(raw).loads());
    expect(load.builds).toBe(2);
  });

  it("every store method that writes hosts or environments rows is watched", async () => {
    // A new Store method writing those tables must join HOST_WRITES or ENVIRONMENT_WRITES: this
    // reads the store's source for every method that does.
    const source = await readFile(new URL("../store/kysely-store.ts", import.meta.url), "utf8");
    const writers = { hosts: new Set<string>(), environments: new Set<string>() };
    let method = "";
    for (const line of source.split("\n")) {
      const m = /^ {2}(?:async )?(\w+)\(/.exec(line);
      if (m?.[1]) method = m[1];
      const w = /(?:insertInto|updateTable|deleteFrom)\("(hosts|environments)\b/.exec(line);
      if (w) writers[w[1] as "hosts" | "environments"].add(method);
    }
    expect([...writers.hosts].sort()).toEqual([...HOST_WRITES].sort());
    expect([...writers.environments].sort()).toEqual([...ENVIRONMENT_WRITES].sort());
  });
});
