import {
  type CommandFrame,
  type CommandKind,
  CommandPayloads,
  type Frame,
  HEARTBEAT_MS,
  HostPhases,
  JoinResponse,
  PROTOCOL_VERSION,
  parseFrame,
  type Reservation,
} from "@denv/spec";
import WebSocket from "ws";
import { streamCommand } from "./fake-io.js";
import {
  type HeldEnv,
  hostEnvironment,
  hostVersion,
  type Produced,
  phaseEvidence,
  verifyResult,
} from "./fake-results.js";
import { FakeReader, FakeWriter } from "./fake-streams.js";

/**
 * A protocol client standing in for denvd in the cp's tests: it joins with a join token, dials
 * the host stream, says hello with what it holds, answers commands with canned but realistic
 * results (and progress frames), keeps a journal so a re-sent command id gets its recorded
 * result, and plays its ends of data streams under credit.
 */

export interface FakeHostOptions {
  name?: string;
  labels?: Record<string, string>;
  target?: string;
  /** false: never send heartbeats (to be marked offline). */
  heartbeats?: boolean;
  heartbeatMs?: number;
  /** Delay between progress frames. */
  stepDelayMs?: number;
  /** Delay before granting back what the fake host read (a slow host reader). */
  grantDelayMs?: number;
  /** Bytes env.files.get sends. */
  fileBytes?: number;
  /** The x-denv.pool its deploys' validate phase reports (the file asks for warm forks). */
  validatePool?: number;
  /** The x-denv.verifier.smoke its deploys' validate phase reports, and the reward a smoke verify gets. */
  validateSmoke?: { expect?: number };
  smokeReward?: number;
  /** What the hello claims, when it differs from the join request (a rogue host). */
  helloLabels?: Record<string, string>;
  capacity?: { cpus: number; memory_bytes: number; disk_free_bytes: number; pids?: number };
  /** What each environment it stands up reports reserving (default FAKE_CAPS). */
  caps?: Reservation;
}

type Outcome = { ok: true; result: unknown } | { ok: false; error: { code: string; message: string } };

export class FakeHost {
  readonly environments = new Map<string, HeldEnv>();
  readonly versions = new Set<string>();
  /** The reward its smoke verifies get (FakeHostOptions.smokeReward; a test may change it). */
  smokeReward = 0;
  /** Why each frame the fake dropped was malformed. */
  readonly droppedFrames: string[] = [];
  /** Every command frame received, re-sends included. */
  readonly commands: CommandFrame[] = [];
  readonly journal = new Map<string, Outcome>();
  /** Data received on deploy source streams, by command id. */
  readonly sources = new Map<string, { bytes: number; sha256: string }>();
  /** The git sources env.deploy asked this host to fetch (a deploy --ref, a GitHub push). */
  readonly gitFetches: Array<{
    command: string;
    url: string;
    ref: string;
    authorization?: string | undefined;
  }> = [];
  /** Commands to fail: kind -> error (each failure is used once). */
  readonly failures = new Map<CommandKind, { code: string; message: string }>();
  /** A rogue host: rewrites the result of a kind before it is sent (attack tests). */
  readonly rogue = new Map<CommandKind, (result: unknown, command: CommandFrame) => unknown>();
  /** Commands not to answer until `release`d (or the predicate changes). */
  hold: (c: CommandFrame) => boolean = () => false;
  /** Ids of the commands the control plane cancelled; a held one is answered `cancelled`, as denvd does. */
  readonly cancels: string[] = [];
  heartbeats: boolean;
  /** When each heartbeat of the control plane arrived (ms since the epoch). */
  readonly heartbeatsReceived: number[] = [];
  /** Delay before granting back what the host read from a cp stream (a slow host). */
  grantDelayMs: number;
  readers = new Map<string, FakeReader>();
  writers = new Map<string, FakeWriter>();
  private socket: WebSocket | undefined;
  private running = new Set<string>();
  private held = new Map<string, CommandFrame>();
  private waiters: Array<() => void> = [];
  private beat: NodeJS.Timeout | undefined;
  closeCode: number | undefined;

  private constructor(
    readonly url: string,
    readonly id: string,
    readonly credential: string,
    readonly target: string,
    private readonly o: FakeHostOptions,
  ) {
    this.heartbeats = o.heartbeats ?? true;
    this.grantDelayMs = o.grantDelayMs ?? 0;
    this.smokeReward = o.smokeReward ?? 0;
  }

  /** POST /v1/hosts/join with `token`; throws with the cp's error body when refused. */
  static async join(url: string, token: string, o: FakeHostOptions = {}): Promise<FakeHost> {
    const res = await fetch(`${url}/v1/hosts/join`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        token,
        labels: o.labels ?? {},
        name: o.name || undefined,
        target: o.target || undefined,
      }),
    });
    const body = (await res.json()) as unknown;
    if (res.status !== 201)
      throw Object.assign(new Error(JSON.stringify(body)), { status: res.status, body });
    const j = JoinResponse.parse(body);
    return new FakeHost(url, j.host_id, j.credential, j.target, o);
  }

  get connected(): boolean {
    return this.socket?.readyState === WebSocket.OPEN;
  }

  /** Dials the stream and says hello; resolves once the socket is open. */
  async connect(url = this.url): Promise<void> {
    this.closeCode = undefined;
    const socket = new WebSocket(`${url.replace(/^http/, "ws")}/v1/hosts/stream`, {
      headers: { authorization: `Bearer ${this.credential}` },
    });
    this.socket = socket;
    socket.on("message", (data) => this.receive(data.toString()));
    socket.on("close", (code) => {
      this.closeCode = code;
      clearInterval(this.beat);
      for (const r of this.readers.values()) r.finish("connection closed");
      for (const w of this.writers.values()) w.close();
      this.readers.clear();
      this.writers.clear();
      this.notify();
    });
    await new Promise<void>((resolve, reject) => {
      socket.once("open", () => resolve());
      socket.once("unexpected-response", (_req, res) =>
        reject(new Error(`stream refused: HTTP ${res.statusCode}`)),
      );
      socket.once("error", reject);
    });
    this.send({
      v: PROTOCOL_VERSION,
      type: "hello",
      host_id: this.id,
      version: "0.1.0-fake",
      capacity: this.o.capacity ?? {
        cpus: 8,
        memory_bytes: 16 * 1024 ** 3,
        disk_free_bytes: 100 * 1024 ** 3,
      },
      labels: this.o.helloLabels ?? this.o.labels ?? {},
      environments: [...this.environments.values()],
      versions: [...this.versions],
      unfinished: [...this.running, ...this.held.keys()],
    });
    this.beat = setInterval(() => {
      if (this.heartbeats) this.send({ v: PROTOCOL_VERSION, type: "heartbeat", ts: Date.now() });
    }, this.o.heartbeatMs ?? HEARTBEAT_MS);
  }

  /** Drops the connection without a goodbye (a network cut). */
  disconnect(): void {
    this.socket?.terminate();
  }

  async close(): Promise<void> {
    clearInterval(this.beat);
    if (this.socket && this.socket.readyState !== WebSocket.CLOSED) {
      const closed = new Promise((r) => this.socket?.once("close", r));
      this.socket.close();
      await closed;
    }
  }

  /** Waits until `check` holds (checked after every frame and state change). */
  async until<T>(check: () => T | undefined | false, timeoutMs = 10_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = check();
      if (v) return v;
      if (Date.now() > deadline) throw new Error("fake host: condition not met in time");
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 50);
      });
    }
  }

  command(kind: CommandKind, nth = 0): Promise<CommandFrame> {
    return this.until(() => this.commands.filter((c) => c.kind === kind)[nth]);
  }

  /** Answers a held command now. */
  release(id: string): void {
    const c = this.held.get(id);
    if (!c) throw new Error(`no held command ${id}`);
    this.held.delete(id);
    void this.run(c);
  }

  private send(f: Frame): void {
    if (this.socket?.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify(f));
  }

  private notify(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const r of w) r();
  }

  private reader(id: string): FakeReader {
    let r = this.readers.get(id);
    if (!r) {
      r = new FakeReader(id, (f) => this.send(f), this.grantDelayMs, false);
      this.readers.set(id, r);
    }
    return r;
  }

  private writer(id: string): FakeWriter {
    let w = this.writers.get(id);
    if (!w) {
      w = new FakeWriter(id, (f) => this.send(f));
      this.writers.set(id, w);
    }
    return w;
  }

  private receive(text: string): void {
    let f: ReturnType<typeof parseFrame>;
    try {
      f = parseFrame(text);
    } catch (err) {
      // As denvd: a malformed frame is dropped (and kept here for the test to see).
      this.droppedFrames.push(err instanceof Error ? err.message : String(err));
      return;
    }
    if (f.type === "heartbeat") this.heartbeatsReceived.push(Date.now());
    if (f.type === "command") {
      CommandPayloads[f.kind].parse(f.payload);
      this.commands.push(f);
      this.send({ v: PROTOCOL_VERSION, type: "ack", id: f.id });
      const recorded = this.journal.get(f.id);
      if (recorded) this.send({ v: PROTOCOL_VERSION, type: "result", id: f.id, ...recorded });
      else if (!this.running.has(f.id)) {
        if (this.hold(f)) this.held.set(f.id, f);
        else {
          this.held.delete(f.id);
          void this.run(f);
        }
      }
    } else if (f.type === "cancel") {
      this.cancels.push(f.id);
      if (this.held.delete(f.id)) {
        const outcome: Outcome = {
          ok: false,
          error: { code: "cancelled", message: "the command was cancelled by the control plane" },
        };
        this.journal.set(f.id, outcome);
        this.send({ v: PROTOCOL_VERSION, type: "result", id: f.id, ...outcome });
      }
    } else if (f.type === "data") this.reader(f.stream).accept(f);
    else if (f.type === "window") this.writers.get(f.stream)?.grant(f.bytes);
    else if (f.type === "end") this.reader(f.stream).finish(f.error);
    this.notify();
  }

  private async run(c: CommandFrame): Promise<void> {
    this.running.add(c.id);
    let outcome: Outcome;
    try {
      const failure = this.failures.get(c.kind);
      if (failure) {
        this.failures.delete(c.kind);
        // The first phase starts and never ends: the failure is that phase's.
        const first = HostPhases[c.kind][0];
        if (first) this.send({ v: PROTOCOL_VERSION, type: "progress", id: c.id, phase: first });
        throw Object.assign(new Error(failure.message), { code: failure.code });
      }
      const result = await this.handle(c);
      outcome = { ok: true, result: this.rogue.get(c.kind)?.(result, c) ?? result };
    } catch (err) {
      const e = err as Error & { code?: string };
      outcome = { ok: false, error: { code: e.code ?? "internal", message: e.message } };
    }
    this.running.delete(c.id);
    this.journal.set(c.id, outcome);
    this.send({ v: PROTOCOL_VERSION, type: "result", id: c.id, ...outcome });
    this.notify();
  }

  /** Runs the command's phases as denvd reports them: start, a log line, end with its evidence. */
  private async progress(c: CommandFrame, produced: Omit<Produced, "host">): Promise<void> {
    for (const phase of HostPhases[c.kind]) {
      if (phase === "switch" || phase === "transfer" || phase === "smoke verify") continue;
      this.send({ v: PROTOCOL_VERSION, type: "progress", id: c.id, phase });
      await new Promise((r) => setTimeout(r, this.o.stepDelayMs ?? 2));
      this.send({ v: PROTOCOL_VERSION, type: "progress", id: c.id, line: `${phase} done` });
      const base = phaseEvidence(phase, { ...produced, host: this.id });
      const evidence =
        phase === "validate"
          ? {
              ...base,
              ...(this.o.validatePool !== undefined ? { pool: this.o.validatePool } : {}),
              ...(this.o.validateSmoke !== undefined ? { smoke: this.o.validateSmoke } : {}),
            }
          : base;
      this.send({ v: PROTOCOL_VERSION, type: "progress", id: c.id, ended: phase, evidence });
    }
  }

  private async handle(c: CommandFrame): Promise<unknown> {
    const p = c.payload as Record<string, never>;
    const notFound = (what: string) =>
      Object.assign(new Error(`${what} not found on ${this.id}`), { code: "not_found" });
    const env = (id: string) => {
      const e = this.environments.get(id);
      if (!e) throw notFound(`environment ${id}`);
      return e;
    };
    switch (c.kind) {
      case "env.deploy": {
        const { project, environment, source_stream, git } = CommandPayloads["env.deploy"].parse(p);
        if (git) {
          // A fake host fetches nothing: it records what it was asked to fetch, with what.
          this.gitFetches.push({ command: c.id, ...git });
          const id = `${project}/${environment}`;
          const created = hostEnvironment(id, "running", undefined, this.o.caps);
          await this.progress(c, { env: created });
          this.environments.set(id, { id, status: "running" });
          return created;
        }
        const r = this.reader(source_stream ?? "");
        const error = await r.ended;
        // As denvd: a source cut off by a dropped connection makes the deploy "interrupted".
        if (error)
          throw Object.assign(new Error(`the connection dropped during the source: ${error}`), {
            code: "interrupted",
          });
        this.sources.set(c.id, { bytes: r.bytes, sha256: r.sha256() });
        const id = `${project}/${environment}`;
        const created = hostEnvironment(id, "running", undefined, this.o.caps);
        await this.progress(c, { env: created });
        this.environments.set(id, { id, status: "running" });
        return created;
      }
      case "env.fork": {
        const { version, name } = CommandPayloads["env.fork"].parse(p);
        if (!this.versions.has(version)) throw notFound(`version ${version}`);
        const id = `${version.split("@")[0]}/${name}`;
        const created = hostEnvironment(id, "running", version, this.o.caps);
        await this.progress(c, { env: created });
        this.environments.set(id, { id, status: "running", parent_version: version });
        return created;
      }
      case "env.snapshot": {
        const { environment, number } = CommandPayloads["env.snapshot"].parse(p);
        env(environment);
        const project = environment.split("/")[0] as string;
        const v = hostVersion(project, number ?? this.versions.size + 1, environment);
        await this.progress(c, { version: v });
        this.versions.add(v.id);
        return v;
      }
      case "env.stop":
      case "env.start": {
        const { environment } = CommandPayloads["env.stop"].parse(p);
        const e = env(environment);
        const status = c.kind === "env.stop" ? "stopped" : "running";
        const changed = hostEnvironment(environment, status, e.parent_version, this.o.caps);
        await this.progress(c, { env: changed });
        e.status = status;
        return changed;
      }
      case "env.destroy": {
        const { environment } = CommandPayloads["env.destroy"].parse(p);
        env(environment);
        await this.progress(c, {});
        this.environments.delete(environment);
        return { environment, destroyed: true };
      }
      case "env.verify": {
        const { environment, number, version } = CommandPayloads["env.verify"].parse(p);
        env(environment);
        if (version !== undefined) {
          // A smoke verify: the version graded untouched; no agent stopped, nothing snapshotted.
          if (!this.versions.has(version)) throw notFound(`version ${version}`);
          const [project, n] = version.split("@v") as [string, string];
          const graded = verifyResult(environment, hostVersion(project, Number(n), environment));
          const { agent: _agent, ...evidence } = graded.evidence;
          const reward = this.smokeReward;
          const result = { ...graded, reward, rewards: { tests: reward }, evidence };
          await this.progress(c, { verify: result });
          return result;
        }
        // As denvd: the episode's snapshot is a version the host now holds.
        const project = environment.split("/")[0] as string;
        const result = verifyResult(
          environment,
          hostVersion(project, number ?? this.versions.size + 1, environment),
        );
        await this.progress(c, { verify: result });
        this.versions.add(result.version);
        return result;
      }
      case "version.delete": {
        const { version } = CommandPayloads["version.delete"].parse(p);
        if (!this.versions.delete(version)) throw notFound(`version ${version}`);
        return { version, deleted: true };
      }
      case "env.logs":
        env(CommandPayloads["env.logs"].parse(p).environment);
        return { stdout: "api listening on :8080\n", stderr: "" };
      case "env.probe_egress": {
        const { environment } = CommandPayloads["env.probe_egress"].parse(p);
        env(environment);
        return hostEnvironment(environment, "running").evidence.probe;
      }
      case "env.exec":
      case "env.files.put":
      case "env.files.get":
      case "env.connect":
        return streamCommand(c, {
          reader: (id) => this.reader(id),
          writer: (id) => this.writer(id),
          holds: (id) => this.environments.has(id),
          fileBytes: this.o.fileBytes ?? 1024,
        });
      default:
        return { removed: [] };
    }
  }
}
