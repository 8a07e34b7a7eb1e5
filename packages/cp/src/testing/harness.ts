import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import WebSocket from "ws";
import { type ControlPlane, type ControlPlaneOptions, startControlPlane } from "../control-plane.js";
import type { Log } from "../log.js";
import { FakeHost, type FakeHostOptions } from "./fake-host.js";

/** A cp started in-process on port 0 with a temp data dir, plus a small JSON client. */

export const quiet: Log = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };

export interface Reply {
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: tests read loosely typed JSON bodies
  body: any;
  headers: Headers;
}

export class Api {
  constructor(
    readonly url: string,
    readonly token?: string,
  ) {}

  as(token: string): Api {
    return new Api(this.url, token);
  }

  async call(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<Reply> {
    const init: RequestInit = {
      method,
      headers: {
        ...(this.token ? { authorization: `Bearer ${this.token}` } : {}),
        ...(body !== undefined && !(body instanceof Uint8Array)
          ? { "content-type": "application/json" }
          : {}),
        ...headers,
      },
      ...(body !== undefined ? { body: body instanceof Uint8Array ? body : JSON.stringify(body) } : {}),
    };
    const res = await fetch(`${this.url}${path}`, init);
    const text = await res.text();
    let parsed: unknown = text;
    if ((res.headers.get("content-type") ?? "").includes("json") && text) parsed = JSON.parse(text);
    return { status: res.status, body: parsed, headers: res.headers };
  }

  get(path: string) {
    return this.call("GET", path);
  }
  post(path: string, body?: unknown) {
    return this.call("POST", path, body);
  }
  put(path: string, body?: unknown) {
    return this.call("PUT", path, body);
  }
  del(path: string) {
    return this.call("DELETE", path);
  }
  /** A tar upload (the bytes are opaque to the cp). */
  upload(method: string, path: string, bytes: Uint8Array, type = "application/x-tar") {
    return this.call(method, path, bytes, { "content-type": type });
  }
}

export interface TestCp {
  cp: ControlPlane;
  url: string;
  dataDir: string;
  admin: Api;
  anon: Api;
  /** Restarts on the same data dir (the same DB file). */
  restart(extra?: Partial<ControlPlaneOptions>): Promise<void>;
  /** A fake host joined to `target` (default local) and online. */
  host(o?: FakeHostOptions & { target?: string }): Promise<FakeHost>;
  close(): Promise<void>;
}

export async function startTestCp(o: Partial<ControlPlaneOptions> = {}): Promise<TestCp> {
  const dataDir = o.dataDir ?? (await mkdtemp(join(tmpdir(), "denv-cp-test-")));
  const opts: ControlPlaneOptions = { listen: "127.0.0.1:0", log: quiet, ...o, dataDir };
  const hosts: FakeHost[] = [];
  const t: TestCp = {
    cp: await startControlPlane(opts),
    url: "",
    dataDir,
    admin: new Api(""),
    anon: new Api(""),
    async restart(extra = {}) {
      await t.cp.close();
      t.cp = await startControlPlane({ ...opts, ...extra });
      t.url = t.cp.url;
      t.admin = new Api(t.url, t.cp.adminToken);
      t.anon = new Api(t.url);
    },
    async host(ho = {}) {
      const target = ho.target ?? "local";
      const jt = await t.admin.post(`/v1/targets/${target}/join-tokens`, {});
      const h = await FakeHost.join(t.url, jt.body.token, { heartbeatMs: opts.heartbeatMs ?? 5_000, ...ho });
      await h.connect();
      await waitFor(async () =>
        (await t.admin.get("/v1/hosts")).body.hosts.find(
          (x: { id: string; status: string }) => x.id === h.id && x.status === "online",
        ),
      );
      hosts.push(h);
      return h;
    },
    async close() {
      for (const h of hosts) await h.close();
      await t.cp.close();
      if (!o.dataDir) await rm(dataDir, { recursive: true, force: true });
    },
  };
  t.url = t.cp.url;
  t.admin = new Api(t.url, t.cp.adminToken);
  t.anon = new Api(t.url);
  return t;
}

/** Polls `check` until it returns something truthy. */
export async function waitFor<T>(
  check: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error("waitFor: timed out");
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** A project plus a deployed alpha (version 1) on the given host; returns the final deployment. */
export async function deployed(t: TestCp, project = "shop", env = "alpha"): Promise<Reply["body"]> {
  const exists = await t.admin.get(`/v1/projects/${project}`);
  if (exists.status === 404) await t.admin.post("/v1/projects", { name: project });
  const r = await t.admin.upload(
    "POST",
    `/v1/projects/${project}/deploy?environment=${env}&wait=true`,
    Buffer.from("a tar"),
  );
  if (r.status !== 200 || r.body.status !== "succeeded")
    throw new Error(`deploy failed: ${JSON.stringify(r.body)}`);
  return r.body;
}

/** The HTTP status a WebSocket upgrade gets (101 when it opens), and the error body if refused. */
export function upgradeStatus(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url.replace(/^http/, "ws"), { headers });
    ws.once("open", () => {
      ws.close();
      resolve({ status: 101, body: "" });
    });
    ws.once("unexpected-response", (_req, res) => {
      let body = "";
      res.on("data", (d: Buffer) => {
        body += d.toString();
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.once("error", reject);
  });
}
