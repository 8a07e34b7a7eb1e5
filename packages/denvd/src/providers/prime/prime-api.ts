import type { z } from "zod";
import {
  type CommandOptions,
  type CommandResult,
  ConnectCallError,
  runCommandSession,
} from "./prime-command-session.js";
import {
  EgressPolicyStatus,
  GatewayGrant,
  type NetworkRule,
  PrimeCheckpoint,
  PrimeCheckpointList,
  PrimeNetwork,
  PrimeSandbox,
  PrimeSandboxList,
  UploadReceipt,
} from "./prime-schemas.js";

export type { CommandOptions, CommandResult } from "./prime-command-session.js";
export type {
  NetworkRule,
  PrimeCheckpoint,
  PrimeNetwork,
  PrimeSandbox,
  PrimeSandboxList,
} from "./prime-schemas.js";

const PRIME_API_URL = "https://api.primeintellect.ai/api/v1";
/** A cached gateway grant is renewed this long before it expires (the SDK's margin too). */
const GRANT_MARGIN_MS = 60_000;

export interface PrimeApiOptions {
  apiKey: string;
  /** The API's root, …/api/v1. */
  baseUrl?: string;
}

export interface CreateSandbox {
  name: string;
  /** The image to start; omit it (and give `checkpointId`) to restore a checkpoint. */
  dockerImage?: string;
  /** A DURABLE checkpoint whose filesystem the sandbox starts from. */
  checkpointId?: string;
  startCommand?: { executable: string; args: string[] };
  cpuCores?: number;
  memoryGB?: number;
  diskSizeGB?: number;
  timeoutMinutes?: number;
  env?: Record<string, string>;
  secrets?: Record<string, string>;
  labels?: string[];
  /** False: the sandbox reaches nothing (an egress allowlist with no entry). */
  networkAccess?: boolean;
  teamId?: string;
  /** Makes a retried create return the sandbox the first one made. */
  idempotencyKey?: string;
}

/** What a Prime call refused or failed with: the call, the HTTP status and Prime's own words. */
export class PrimeApiError extends Error {
  constructor(
    readonly call: string,
    readonly status: number,
    detail: string,
  ) {
    super(`Prime ${call} failed: ${status === 0 ? "" : `HTTP ${status}: `}${detail}`);
  }
}

/**
 * A client of Prime Intellect's sandbox API (https://docs.primeintellect.ai/api-reference/sandboxes)
 * on Node's fetch: the control API with the account's API key, and each sandbox's gateway (its
 * commands and files) with the short-lived token POST /sandbox/{id}/auth hands out, cached per
 * sandbox until a minute before it expires and renewed once when the gateway refuses it.
 */
export class PrimeApi {
  private readonly baseUrl: string;
  private readonly grants = new Map<string, GatewayGrant>();

  constructor(private readonly options: PrimeApiOptions) {
    this.baseUrl = (options.baseUrl ?? PRIME_API_URL).replace(/\/+$/, "");
  }

  async createSandbox(r: CreateSandbox): Promise<PrimeSandbox> {
    const body = {
      name: r.name,
      docker_image: r.dockerImage,
      checkpoint_id: r.checkpointId,
      start_command: r.startCommand,
      cpu_cores: r.cpuCores ?? 1,
      memory_gb: r.memoryGB ?? 1,
      // Prime refuses a disk size for a restore: the checkpoint fixes it.
      disk_size_gb: r.checkpointId ? undefined : (r.diskSizeGB ?? 5),
      timeout_minutes: r.timeoutMinutes ?? 60,
      environment_vars: r.env,
      secrets: r.secrets,
      labels: r.labels ?? [],
      network_allowlist: r.networkAccess === false ? [] : undefined,
      team_id: r.teamId,
      idempotency_key: r.idempotencyKey,
      vm: true,
    };
    return this.call("createSandbox", "POST", "/sandbox", PrimeSandbox, body);
  }

  async getSandbox(id: string): Promise<PrimeSandbox> {
    return this.call("getSandbox", "GET", `/sandbox/${enc(id)}`, PrimeSandbox);
  }

  /** Sandboxes with all of `labels`, newest first, one page of them. */
  async listSandboxes(
    q: { labels?: string[]; status?: string; page?: number; perPage?: number } = {},
  ): Promise<PrimeSandboxList> {
    const params = new URLSearchParams({ page: String(q.page ?? 1), per_page: String(q.perPage ?? 50) });
    for (const l of q.labels ?? []) params.append("labels", l);
    if (q.status) params.set("status", q.status);
    return this.call("listSandboxes", "GET", `/sandbox?${params}`, PrimeSandboxList);
  }

  async deleteSandbox(id: string): Promise<void> {
    await this.call("deleteSandbox", "DELETE", `/sandbox/${enc(id)}`);
    this.grants.delete(id);
  }

  /** Polls until the sandbox is RUNNING; a sandbox that ended or failed instead is an error. */
  async waitRunning(id: string, o: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<PrimeSandbox> {
    const deadline = Date.now() + (o.timeoutMs ?? 300_000);
    for (let delay = 200; ; delay = Math.min(delay * 2, 2_000)) {
      o.signal?.throwIfAborted();
      const sb = await this.getSandbox(id);
      if (sb.status === "RUNNING") return sb;
      if (["ERROR", "TERMINATED", "TIMEOUT"].includes(sb.status))
        throw new PrimeApiError(
          "waitRunning",
          0,
          `sandbox ${id} is ${sb.status}${sb.error ? ` (${sb.error})` : ""}`,
        );
      if (Date.now() + delay > deadline)
        throw new PrimeApiError(
          "waitRunning",
          0,
          `sandbox ${id} still ${sb.status} after ${o.timeoutMs ?? 300_000} ms`,
        );
      await new Promise((r) => setTimeout(r, delay));
    }
  }

  /** Allows all egress, or none (the sandbox then reaches nothing outside). */
  async setNetworkAccess(id: string, allowed: boolean): Promise<void> {
    const policy = allowed ? { allowlist: null, denylist: [] } : { allowlist: [], denylist: null };
    await this.call("setNetworkAccess", "PUT", `/sandbox/${enc(id)}/egress-policy`, undefined, policy);
  }

  /**
   * Whether the sandbox reaches nothing outside, as Prime reports its applied policy: an empty
   * allowlist is the only policy that shuts it off; any other, or one not applied yet, does not.
   */
  async networkShut(id: string): Promise<boolean> {
    const s = await this.call("egressPolicy", "GET", `/sandbox/${enc(id)}/egress-policy`, EgressPolicyStatus);
    return s.applied && Array.isArray(s.policy.allowlist) && s.policy.allowlist.length === 0;
  }

  /** A grant for the sandbox's gateway: the cached one while it has a minute left. */
  async gatewayAuth(id: string): Promise<GatewayGrant> {
    const cached = this.grants.get(id);
    if (cached && cached.expiresAt - GRANT_MARGIN_MS > Date.now()) return cached;
    const grant = await this.call("gatewayAuth", "POST", `/sandbox/${enc(id)}/auth`, GatewayGrant);
    this.grants.set(id, grant);
    return grant;
  }

  /**
   * Runs a command in the sandbox: `argv` as is (no shell), or a string through `/bin/bash -c`
   * as the SDK's execute_command does. Resolves with its exit code and output whatever the code.
   */
  async runCommand(id: string, command: string | string[], o: CommandOptions = {}): Promise<CommandResult> {
    const argv = typeof command === "string" ? ["/bin/bash", "-c", command] : command;
    return this.viaGateway("runCommand", id, async (grant) => {
      try {
        return await runCommandSession(grant, argv, o);
      } catch (e) {
        if (!(e instanceof ConnectCallError)) throw e;
        if (e.code === "unauthenticated") throw e;
        const detail =
          e.code === "deadline_exceeded" ? `timed out after ${o.timeoutMs} ms` : `${e.code}: ${e.message}`;
        throw new PrimeApiError("runCommand", 0, detail);
      }
    });
  }

  async uploadFile(id: string, path: string, data: Buffer): Promise<void> {
    await this.viaGateway("uploadFile", id, async (grant) => {
      const form = new FormData();
      form.append("file", new Blob([data]), path.split("/").pop() || "file");
      const url = `${grant.base}/upload?${new URLSearchParams({ path, sandbox_id: id })}`;
      const res = await fetch(url, { method: "POST", headers: auth(grant), body: form });
      UploadReceipt.parse(await gatewayJson("uploadFile", res));
    });
  }

  async downloadFile(id: string, path: string): Promise<Buffer> {
    return this.viaGateway("downloadFile", id, async (grant) => {
      const url = `${grant.base}/download?${new URLSearchParams({ path, sandbox_id: id })}`;
      const res = await fetch(url, { headers: auth(grant) });
      if (!res.ok) await gatewayJson("downloadFile", res);
      return Buffer.from(await res.arrayBuffer());
    });
  }

  /** Starts a filesystem checkpoint; it is restorable once DURABLE (waitCheckpoint). */
  async createCheckpoint(sandboxId: string): Promise<PrimeCheckpoint> {
    return this.call("createCheckpoint", "POST", `/sandbox/${enc(sandboxId)}/checkpoints`, PrimeCheckpoint);
  }

  async getCheckpoint(id: string): Promise<PrimeCheckpoint> {
    return this.call("getCheckpoint", "GET", `/sandbox/checkpoints/${enc(id)}`, PrimeCheckpoint);
  }

  /** A sandbox's checkpoints, oldest first. */
  async listCheckpoints(sandboxId: string): Promise<PrimeCheckpoint[]> {
    const path = `/sandbox/${enc(sandboxId)}/checkpoints`;
    return (await this.call("listCheckpoints", "GET", path, PrimeCheckpointList)).checkpoints;
  }

  /** Refused (409) while pending, or while it is the newest checkpoint of a running sandbox. */
  async deleteCheckpoint(id: string): Promise<void> {
    await this.call("deleteCheckpoint", "DELETE", `/sandbox/checkpoints/${enc(id)}`);
  }

  async waitCheckpoint(id: string, o: { timeoutMs?: number } = {}): Promise<PrimeCheckpoint> {
    const deadline = Date.now() + (o.timeoutMs ?? 300_000);
    for (let delay = 200; ; delay = Math.min(delay * 2, 2_000)) {
      const c = await this.getCheckpoint(id);
      if (c.state === "DURABLE") return c;
      if (c.state === "FAILED" || c.state === "DELETING")
        throw new PrimeApiError(
          "waitCheckpoint",
          0,
          `checkpoint ${id} is ${c.state}${c.error ? `: ${c.error}` : ""}`,
        );
      if (Date.now() + delay > deadline)
        throw new PrimeApiError(
          "waitCheckpoint",
          0,
          `checkpoint ${id} still ${c.state} after ${o.timeoutMs ?? 300_000} ms`,
        );
      await new Promise((r) => setTimeout(r, delay));
    }
  }

  /**
   * A private network. Without `rules` no member reaches another until setNetworkRules allows it;
   * members reach each other at `<sandbox-id>.sandbox.internal`.
   */
  async createNetwork(r: { name: string; rules: NetworkRule[]; teamId?: string }): Promise<PrimeNetwork> {
    const body = { name: r.name, team_id: r.teamId, rules: r.rules };
    return this.call("createNetwork", "POST", "/sandbox/networks", PrimeNetwork, body);
  }

  /** A private network with its rules and members. */
  async getNetwork(id: string): Promise<PrimeNetwork> {
    return this.call("getNetwork", "GET", `/sandbox/networks/${enc(id)}`, PrimeNetwork);
  }

  /** Replaces the network's rules: directed, allow-only, by tag selectors and TCP ports. */
  async setNetworkRules(id: string, rules: NetworkRule[]): Promise<void> {
    await this.call("setNetworkRules", "PUT", `/sandbox/networks/${enc(id)}/rules`, undefined, { rules });
  }

  /** Adds a RUNNING sandbox to the network with `tags`, or replaces the tags of a member. */
  async putNetworkMember(networkId: string, sandboxId: string, tags: string[]): Promise<void> {
    const path = `/sandbox/networks/${enc(networkId)}/members/${enc(sandboxId)}`;
    await this.call("putNetworkMember", "PUT", path, undefined, { tags });
  }

  async removeNetworkMember(networkId: string, sandboxId: string): Promise<void> {
    const path = `/sandbox/networks/${enc(networkId)}/members/${enc(sandboxId)}`;
    await this.call("removeNetworkMember", "DELETE", path);
  }

  /** Deletes the network: its members no longer reach each other through it. */
  async deleteNetwork(id: string): Promise<void> {
    await this.call("deleteNetwork", "DELETE", `/sandbox/networks/${enc(id)}`);
  }

  /** One gateway call with the sandbox's grant, renewed once if the gateway refuses it. */
  private async viaGateway<T>(call: string, id: string, f: (grant: GatewayGrant) => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await f(await this.gatewayAuth(id));
      } catch (e) {
        const refused =
          (e instanceof ConnectCallError && e.code === "unauthenticated") ||
          (e instanceof PrimeApiError && e.status === 401);
        if (!refused) throw e;
        this.grants.delete(id);
        if (attempt > 0) throw new PrimeApiError(call, 401, e.message);
      }
    }
  }

  /**
   * One call of the control API, its answer checked against `schema`: what every method here and
   * PrimeImages (prime-images.ts) send through, so errors read the same.
   */
  async call<S extends z.ZodType>(
    name: string,
    method: string,
    path: string,
    schema?: S,
    body?: unknown,
    signal?: AbortSignal,
  ): Promise<z.output<S>> {
    let res: Response;
    try {
      res = await fetch(`${this.baseUrl}${path}`, {
        method,
        ...(signal ? { signal } : {}),
        headers: {
          authorization: `Bearer ${this.options.apiKey}`,
          ...(body !== undefined ? { "content-type": "application/json" } : {}),
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
    } catch (e) {
      if (signal?.aborted) throw e;
      throw new PrimeApiError(name, 0, `${method} ${this.baseUrl}${path}: ${String(e)}`);
    }
    const text = await res.text();
    if (!res.ok) throw new PrimeApiError(name, res.status, detailOf(text));
    if (!schema) return undefined as z.output<S>;
    const parsed = schema.safeParse(text ? JSON.parse(text) : {});
    if (!parsed.success)
      throw new PrimeApiError(name, res.status, `unexpected answer: ${parsed.error.message}`);
    return parsed.data;
  }
}

function enc(s: string): string {
  return encodeURIComponent(s);
}

function auth(grant: GatewayGrant): Record<string, string> {
  return { authorization: `Bearer ${grant.token}` };
}

/** Prime's words in an error body: FastAPI's `detail`, the gateway's `message`, or the text. */
function detailOf(text: string): string {
  try {
    const j = JSON.parse(text) as { detail?: unknown; message?: unknown; error?: unknown };
    const d = j.detail ?? j.message ?? j.error;
    if (d !== undefined) return typeof d === "string" ? d : JSON.stringify(d);
  } catch {
    // Not JSON: the text itself is all Prime said.
  }
  return text || "(no body)";
}

async function gatewayJson(call: string, res: Response): Promise<unknown> {
  const text = await res.text();
  if (!res.ok) throw new PrimeApiError(call, res.status, detailOf(text));
  return JSON.parse(text);
}
