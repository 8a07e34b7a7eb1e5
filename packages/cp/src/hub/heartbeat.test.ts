import { ControlPlaneMessages, PROTOCOL_VERSION } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WebSocket, WebSocketServer } from "ws";
import { watchHosts } from "../control-plane.js";
import { HostService } from "../services/host-service.js";
import { openStore } from "../store/open-store.js";
import type { Store } from "../store/store.js";
import { deployed, quiet, startTestCp, type TestCp, waitFor } from "../testing/harness.js";
import { beatSlice, HostHub } from "./hub.js";

describe("host sessions: heartbeats, offline, reconciliation", () => {
  let t: TestCp;
  beforeAll(async () => {
    t = await startTestCp({ heartbeatMs: 100 });
  });
  afterAll(() => t.close());

  const hostStatus = async (id: string) =>
    (await t.admin.get("/v1/hosts")).body.hosts.find((h: { id: string }) => h.id === id)?.status;

  it("a host that misses heartbeats is marked offline and its socket closed; one that beats stays online", async () => {
    const quiet = await t.host({ name: "quiet", heartbeatMs: 100 });
    const alive = await t.host({ name: "alive", heartbeatMs: 100 });
    try {
      quiet.heartbeats = false;
      const started = Date.now();
      await quiet.until(() => quiet.closeCode !== undefined, 5_000);
      // 3 missed beats of 100 ms, checked every 100 ms, counted from the last beat, which came up
      // to one period before \`started\` (a run here measured 234 ms): never cut before 200 ms.
      expect(Date.now() - started).toBeGreaterThanOrEqual(200);
      expect(await waitFor(async () => (await hostStatus("quiet")) === "offline")).toBe(true);
      expect(await hostStatus("alive")).toBe("online");
      expect(alive.connected).toBe(true);
      const metrics = (await t.anon.get("/metrics")).body as string;
      expect(metrics).toMatch(/^denv_hosts_online 1$/m);
    } finally {
      // Always: a host left connected takes a later test's deploy (CI: this test's failure made
      // "environments the host no longer holds..." fail too, its exec answered by this host).
      await alive.close();
    }
  });

  it("sends every host a heartbeat each period, in slices of the period", async () => {
    const hosts = await Promise.all(["b1", "b2", "b3"].map((name) => t.host({ name, heartbeatMs: 100 })));
    try {
      await new Promise((r) => setTimeout(r, 650));
      for (const h of hosts) {
        const got = h.heartbeatsReceived;
        expect(got.length).toBeGreaterThanOrEqual(4);
        // Under 3 periods apart, the gap after which a host counts as offline (the bound that
        // matters; a loaded machine stalls this process's timers by more than one period).
        const gaps = got.slice(1).map((at, i) => at - (got[i] as number));
        expect(Math.max(...gaps)).toBeLessThan(300);
      }
    } finally {
      // Always: a host left connected would take the next test's deploy.
      await Promise.all(hosts.map((h) => h.close()));
    }
  });

  it("spreads hosts over the slices by a stable hash of their id", () => {
    const counts = new Array(20).fill(0);
    for (let i = 0; i < 1000; i++) counts[beatSlice(`host-${i.toString(36)}x`, 20)]++;
    expect(Math.min(...counts)).toBeGreaterThan(25);
    expect(Math.max(...counts)).toBeLessThan(80);
    expect(beatSlice("host-abc", 20)).toBe(beatSlice("host-abc", 20));
  });

  it("environments the host no longer holds are marked failed when it says hello again", async () => {
    const h = await t.host({ name: "keeper", heartbeatMs: 100 });
    await deployed(t, "shop");
    const env = (await t.admin.get("/v1/environments/shop/alpha")).body;
    expect(env.status).toBe("running");
    h.disconnect();
    await waitFor(async () => (await hostStatus("keeper")) === "offline");
    const offline = await t.admin.post("/v1/environments/shop/alpha/exec", { cmd: ["true"] });
    expect(offline.status).toBe(409);
    expect(offline.body.error.message).toBe(ControlPlaneMessages.hostOffline("keeper"));
    h.environments.clear();
    await h.connect();
    const failed = await waitFor(async () => {
      const e = (await t.admin.get("/v1/environments/shop/alpha")).body;
      return e.status === "failed" && e;
    });
    expect(failed.evidence.reconcile.reason).toBe("host keeper no longer holds it");
    await h.close();
  });
});

const hello = (id: string) => ({
  type: "hello",
  host_id: id,
  version: "0.1.0-test",
  capacity: { cpus: 1, memory_bytes: 1024 ** 3, disk_free_bytes: 1024 ** 3 },
  labels: {},
  environments: [],
  versions: [],
  unfinished: [],
});

describe("a heartbeat storm", () => {
  const HOSTS = 20;
  const BEATS = 100;
  let raw: Store;
  let hub: HostHub;
  let server: WebSocketServer;
  const clients: WebSocket[] = [];
  /** Store calls by method, counted from `counting` on. */
  const calls = new Map<string, number>();
  let counting = false;

  beforeAll(async () => {
    raw = await openStore(":memory:");
    // Every store call the hub's lifecycle makes, reads included, is counted.
    const spied = new Proxy(raw, {
      get(target, key) {
        const value: unknown = Reflect.get(target, key, target);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          if (counting) calls.set(String(key), (calls.get(String(key)) ?? 0) + 1);
          return (value as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
    const { store, hostList } = watchHosts(spied);
    const hosts = new HostService(store, hostList, quiet, () => {});
    hub = new HostHub({ lifecycle: hosts, log: quiet, heartbeatMs: 50 });
    server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    server.on("connection", (socket, req) => {
      hub.accept(socket, new URL(req.url ?? "/", "http://cp").searchParams.get("host") ?? "");
    });
    await new Promise((r) => server.once("listening", r));
  });
  afterAll(async () => {
    for (const c of clients) c.terminate();
    await hub.close();
    await new Promise((r) => server.close(r));
    await raw.close();
  });

  it("never touches the store: a beat is a timestamp in memory, however many arrive", async () => {
    const { port } = server.address() as { port: number };
    for (let i = 0; i < HOSTS; i++) {
      const id = `storm-${i}`;
      await raw.createHost({
        id,
        target: "local",
        credentialHash: `hash-${i}`,
        status: "offline",
        labels: {},
        createdAt: new Date().toISOString(),
      });
      const ws = new WebSocket(`ws://127.0.0.1:${port}/?host=${id}`);
      const send = (f: object) => ws.send(JSON.stringify({ v: PROTOCOL_VERSION, ...f }));
      // Answers every command at once: its result arrives after every frame sent before it.
      ws.on("message", (data) => {
        const f = JSON.parse(data.toString()) as { type: string; id?: string };
        if (f.type === "command")
          send({ type: "result", id: f.id, ok: true, result: { stdout: "", stderr: "" } });
      });
      await new Promise((r) => ws.once("open", r));
      send(hello(id));
      // As a host does: a heartbeat every period (the hub cuts a host silent for 3 of them).
      const beat = setInterval(() => send({ type: "heartbeat", ts: Date.now() }), 50);
      ws.once("close", () => clearInterval(beat));
      clients.push(ws);
    }
    await waitFor(async () => (await raw.listHosts()).every((h) => h.status === "online"));
    // The hellos' reconciliation is done once every host answered a command sent after it.
    const roundTrip = () =>
      Promise.all(
        clients.map((_, i) =>
          hub.send(
            `storm-${i}`,
            "env.logs",
            { environment: "p/e" },
            { id: `logs-${i}-${Math.random()}`, timeoutMs: 10_000, durable: false },
          ),
        ),
      );
    await roundTrip();

    counting = true;
    for (let b = 0; b < BEATS; b++) {
      for (const ws of clients)
        ws.send(JSON.stringify({ v: PROTOCOL_VERSION, type: "heartbeat", ts: Date.now() }));
    }
    // In order on each stream: once these are answered, every beat before them was handled.
    await roundTrip();
    // The cp's own heartbeats went out meanwhile too (every 50 ms, in slices).
    await new Promise((r) => setTimeout(r, 120));
    counting = false;
    expect(Object.fromEntries(calls)).toEqual({});
    expect(hub.onlineCount()).toBe(HOSTS);

    // The spy sees what the lifecycle does: a host going offline reads and writes its row.
    counting = true;
    clients[0]?.close();
    await waitFor(() => calls.get("updateHost") === 1);
    counting = false;
    expect(Object.fromEntries(calls)).toEqual({ getHost: 1, updateHost: 1 });
  });
});

describe("a host reconnecting while its last connection is being marked offline", () => {
  it("says hello only once the offline is written: the host ends online", async () => {
    const calls: string[] = [];
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    const hub = new HostHub({
      log: quiet,
      lifecycle: {
        online: async () => {
          calls.push("online");
        },
        // A slow write: the connection dropped, and its offline is still being recorded.
        offline: async () => {
          calls.push("offline started");
          await released;
          calls.push("offline written");
        },
      },
    });
    const server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    server.on("connection", (socket) => hub.accept(socket, "h"));
    await new Promise((r) => server.once("listening", r));
    const { port } = server.address() as { port: number };
    const connect = async () => {
      const ws = new WebSocket(`ws://127.0.0.1:${port}/`);
      await new Promise((r) => ws.once("open", r));
      ws.send(JSON.stringify({ v: PROTOCOL_VERSION, ...hello("h") }));
      return ws;
    };
    try {
      const first = await connect();
      await waitFor(() => calls.length === 1);
      first.terminate();
      await waitFor(() => calls.includes("offline started"));
      const second = await connect();
      // The new connection's hello waits for the offline before it.
      await new Promise((r) => setTimeout(r, 100));
      expect(calls).toEqual(["online", "offline started"]);
      release();
      await waitFor(() => calls.length === 4);
      expect(calls).toEqual(["online", "offline started", "offline written", "online"]);
      expect(hub.isOnline("h")).toBe(true);
      second.terminate();
    } finally {
      await hub.close();
      await new Promise((r) => server.close(r));
    }
  });
});

describe("a control plane that stalled", () => {
  it("cuts no host for the heartbeats it did not read while it stalled", async () => {
    // One slice, so the first tick after the stall visits the host before its socket is read.
    const hub = new HostHub({
      log: quiet,
      heartbeatMs: 5,
      lifecycle: { online: async () => {}, offline: async () => {} },
    });
    const server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    server.on("connection", (socket) => hub.accept(socket, "h"));
    await new Promise((r) => server.once("listening", r));
    const { port } = server.address() as { port: number };
    const ws = new WebSocket(`ws://127.0.0.1:${port}/`);
    await new Promise((r) => ws.once("open", r));
    const send = (f: object) => ws.send(JSON.stringify({ v: PROTOCOL_VERSION, ...f }));
    send(hello("h"));
    const beat = setInterval(() => send({ type: "heartbeat", ts: Date.now() }), 5);
    let closed = false;
    ws.once("close", () => {
      closed = true;
    });
    try {
      await waitFor(() => hub.isOnline("h"));
      // The event loop blocked for 20 periods: the host's beats sit unread in the socket.
      const until = Date.now() + 100;
      while (Date.now() < until) {
        // busy: the control plane's one thread stalls
      }
      await new Promise((r) => setTimeout(r, 50));
      expect(closed).toBe(false);
      expect(hub.isOnline("h")).toBe(true);
    } finally {
      clearInterval(beat);
      ws.terminate();
      await hub.close();
      await new Promise((r) => server.close(r));
    }
  });
});
