import { Readable } from "node:stream";
import {
  DenvError,
  type Environment,
  type ExecRequest,
  type ExecResponse,
  type ProbeResult,
  SandboxMessages,
} from "@denv/spec";
import { callFailure, type HostHub, type StreamCall } from "../hub/hub.js";
import type { Chunk } from "../hub/streams.js";
import { newId } from "../ids.js";
import type { EnvironmentRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { assertScope, NotFound, type Principal } from "./access.js";
import { presentEnvironment } from "./present.js";
import type { ProjectService } from "./project-service.js";

export interface FilesTarget {
  path: string;
  service?: string | undefined;
  user?: string | undefined;
}

/** Exec's own timeout plus this margin bounds the command (the host kills the tree at its timeout). */
const EXEC_MARGIN_MS = 30_000;
const DEFAULT_EXEC_TIMEOUT_S = 600;

/**
 * Environments and the interactive calls into them (exec, files, tunnels, logs, probe), which
 * go straight to the environment's host rather than through a deployment.
 */
export class EnvironmentService {
  /** Environments sealed for a destroy: no new call reaches them (also before the store says so). */
  private sealed = new Set<string>();
  /** The interactive calls in flight, by environment id: a seal cancels them. */
  private calls = new Map<string, Set<string>>();

  constructor(
    private readonly store: Store,
    private readonly hub: HostHub,
    private readonly projects: ProjectService,
    private readonly commandTimeoutMs: number,
  ) {}

  async require(p: Principal, project: string, env: string): Promise<EnvironmentRecord> {
    const id = `${project}/${env}`;
    assertScope(p, project, () => NotFound.environment(id));
    const e = await this.store.getEnvironment(id);
    if (!e) throw NotFound.environment(id);
    return e;
  }

  async get(p: Principal, project: string, env: string): Promise<Environment> {
    return presentEnvironment(await this.require(p, project, env), this.online);
  }

  async list(p: Principal, project: string): Promise<Environment[]> {
    await this.projects.require(p, project);
    // A pool's warm forks are not environments of the project until a sandbox claims one.
    return (await this.store.listEnvironments({ project, pool: false })).map((e) =>
      presentEnvironment(e, this.online),
    );
  }

  private readonly online = (hostId: string) => this.hub.isOnline(hostId);

  async exec(p: Principal, project: string, env: string, req: ExecRequest): Promise<ExecResponse> {
    const t = await this.target(p, project, env);
    const id = this.track(t.id);
    return this.hub
      .send(
        t.hostId,
        "env.exec",
        { environment: t.hostEnvId, exec: req },
        { id, timeoutMs: execTimeoutMs(req), durable: false },
      )
      .finally(() => this.untrack(t.id, id));
  }

  /** Exec with stdin and output streamed (the WebSocket route drives the call). */
  async execStream(
    p: Principal,
    project: string,
    env: string,
    req: ExecRequest,
  ): Promise<StreamCall<"env.exec">> {
    const t = await this.target(p, project, env);
    return this.tracked(
      t.id,
      this.hub.stream(t.hostId, "env.exec", (stream) => ({ environment: t.hostEnvId, exec: req, stream }), {
        id: this.track(t.id),
        timeoutMs: execTimeoutMs(req),
      }),
    );
  }

  /** Streams a tar body into the environment under `dir`; never holds more than one window. */
  async putFiles(
    p: Principal,
    project: string,
    env: string,
    to: FilesTarget,
    body: AsyncIterable<Buffer>,
  ): Promise<{ entries: number; bytes: number }> {
    const t = await this.target(p, project, env);
    const call = this.tracked(
      t.id,
      this.hub.stream(t.hostId, "env.files.put", (stream) => ({ environment: t.hostEnvId, ...to, stream }), {
        id: this.track(t.id),
        timeoutMs: this.commandTimeoutMs,
      }),
    );
    try {
      // A host that refuses early (a special file) answers before the body ends: its answer wins.
      const pumped = call.outbound.pump(body, "file").catch(() => undefined);
      const result = await call.result;
      await pumped;
      return result;
    } finally {
      call.close();
    }
  }

  /**
   * A tar of `path` from the environment, as bytes. Resolves once the first bytes arrived (or
   * the host refused), so a refusal is still an HTTP error rather than a broken download.
   */
  async getFiles(p: Principal, project: string, env: string, from: FilesTarget): Promise<Readable> {
    const t = await this.target(p, project, env);
    const call = this.tracked(
      t.id,
      this.hub.stream(
        t.hostId,
        "env.files.get",
        (stream) => ({ environment: t.hostEnvId, ...from, stream }),
        { id: this.track(t.id), timeoutMs: this.commandTimeoutMs },
      ),
    );
    call.outbound.end();
    const it: AsyncIterator<Chunk> = call.inbound[Symbol.asyncIterator]();
    let first: IteratorResult<Chunk>;
    try {
      first = await it.next();
    } catch (err) {
      call.close();
      throw await callFailure(call, err);
    }
    async function* bytes(): AsyncGenerator<Buffer> {
      try {
        let next = first;
        while (!next.done) {
          yield next.value.data;
          next = await it.next();
        }
        await call.result;
      } finally {
        call.close();
      }
    }
    return Readable.from(bytes(), { objectMode: false });
  }

  async connect(
    p: Principal,
    project: string,
    env: string,
    to: { service: string; port: number },
  ): Promise<StreamCall<"env.connect">> {
    const t = await this.target(p, project, env);
    return this.tracked(
      t.id,
      this.hub.stream(
        t.hostId,
        "env.connect",
        (stream) => ({ environment: t.hostEnvId, ...to, stream }),
        // A tunnel lives as long as its client keeps it open.
        { id: this.track(t.id), timeoutMs: 24 * 3600_000 },
      ),
    );
  }

  async logs(
    p: Principal,
    project: string,
    env: string,
    q: { service?: string | undefined; tail?: number | undefined },
  ): Promise<{ stdout: string; stderr: string }> {
    const t = await this.target(p, project, env);
    const id = this.track(t.id);
    return this.hub
      .send(
        t.hostId,
        "env.logs",
        {
          environment: t.hostEnvId,
          service: q.service || undefined,
          tail: q.tail || undefined,
        },
        { id, timeoutMs: this.commandTimeoutMs, durable: false },
      )
      .finally(() => this.untrack(t.id, id));
  }

  async probe(p: Principal, project: string, env: string): Promise<ProbeResult> {
    const t = await this.target(p, project, env);
    const id = this.track(t.id);
    return this.hub
      .send(
        t.hostId,
        "env.probe_egress",
        { environment: t.hostEnvId },
        { id, timeoutMs: this.commandTimeoutMs, durable: false },
      )
      .finally(() => this.untrack(t.id, id));
  }

  /**
   * Where an interactive call goes; throws the HTTP-worthy error (404, 409) when nowhere. The
   * caller registers its call (track) right after, with no await in between, so that a seal
   * that comes later cancels it and one that came earlier refused it here.
   */
  async target(
    p: Principal,
    project: string,
    env: string,
  ): Promise<{ id: string; hostId: string; hostEnvId: string }> {
    const e = await this.require(p, project, env);
    if (e.status === "destroying" || this.sealed.has(e.id)) {
      throw new DenvError("conflict", SandboxMessages.destroying(e.id));
    }
    if (!e.hostId || !e.hostEnv || e.status === "pending" || e.status === "failed") {
      throw new DenvError("conflict", `environment ${e.id} is ${e.status}: it has nothing to reach`);
    }
    return { id: e.id, hostId: e.hostId, hostEnvId: `${e.project}/${e.hostEnv}` };
  }

  /**
   * Seals an environment for its destroy: calls that come from now on are refused, and those in
   * flight are cancelled on the host (their process trees killed; their callers get the result
   * the cancel gives). Stays sealed until `unseal`, once the environment is gone.
   */
  seal(envId: string): number {
    this.sealed.add(envId);
    const calls = [...(this.calls.get(envId) ?? [])];
    for (const id of calls) this.hub.cancel(id);
    return calls.length;
  }

  unseal(envId: string): void {
    this.sealed.delete(envId);
  }

  private track(envId: string): string {
    const id = newId("cmd");
    const set = this.calls.get(envId) ?? new Set<string>();
    this.calls.set(envId, set);
    set.add(id);
    return id;
  }

  private untrack(envId: string, id: string): void {
    const set = this.calls.get(envId);
    set?.delete(id);
    if (set?.size === 0) this.calls.delete(envId);
  }

  /** A streamed call stays tracked until its result settles. */
  private tracked<C extends { commandId: string; result: Promise<unknown> }>(envId: string, call: C): C {
    call.result.then(
      () => this.untrack(envId, call.commandId),
      () => this.untrack(envId, call.commandId),
    );
    return call;
  }
}

function execTimeoutMs(req: ExecRequest): number {
  return (req.timeout ?? DEFAULT_EXEC_TIMEOUT_S) * 1000 + EXEC_MARGIN_MS;
}
