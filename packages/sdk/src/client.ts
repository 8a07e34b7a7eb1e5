import type { Duplex } from "node:stream";
import { Readable } from "node:stream";
import {
  ApiToken,
  type CreateApiToken,
  type CreateJoinToken,
  type CreateProject,
  type CreateSandbox,
  Deployment,
  Environment,
  type ExecRequest,
  ExecResponse,
  FilesPutResponse,
  type ForkRequest,
  GithubConnection,
  Health,
  HOSTS_PAGE,
  Host,
  HostList,
  JoinToken,
  JoinTokenList,
  LogsResponse,
  MachineList,
  Pool,
  ProbeResult,
  Project,
  RemovedHost,
  type ReplayRequest,
  ReplayResponse,
  type RollbackRequest,
  SandboxBatch,
  SandboxDestroy,
  Target,
  type TargetKind,
  TargetKindList,
  TargetList,
  TokenList,
  Version,
} from "@denv/spec";
import { type FollowOptions, isFinished, waitForDeployment } from "./deployments.js";
import { DenvApiError } from "./errors.js";
import { type ExecStreamOptions, runExecStream } from "./exec-stream.js";
import { type Query, Transport } from "./http.js";
import { checkExec, enc, envPath, parseServicePort, splitEnv, versionPath, withSignal } from "./paths.js";
import { DenvReadClient } from "./read-client.js";
import { listenForward, openTunnel, type PortForward, type PortForwardOptions } from "./tunnel.js";

/** What a spec schema accepts (defaults optional) and what it gives, without importing zod. */
type Input<S> = S extends { _zod: { input: infer I } } ? I : never;
type Output<S> = S extends { _zod: { output: infer O } } ? O : never;

export type ApiTokenInfo = Output<typeof ApiToken>;
export type JoinTokenInfo = Output<typeof JoinToken>;
export type RemovedHostInfo = Output<typeof RemovedHost>;

export interface DenvClientOptions {
  /** The control plane's URL, e.g. http://127.0.0.1:8420. */
  url: string;
  /** An API token (sent as `Authorization: Bearer`). */
  token?: string | undefined;
  /** A fetch implementation (default: the global fetch). */
  fetch?: typeof fetch;
}

/** Options of the routes that start a deployment. */
export interface WaitOptions extends FollowOptions {
  /** Follow the deployment until it finishes and return its final state (default: return at once). */
  wait?: boolean;
}

export type DeploySource =
  /** The project folder as a tar stream (optionally gzip-compressed). */
  | { tar: AsyncIterable<Uint8Array> | Uint8Array }
  /** A git ref of a project that deploys from a repository. */
  | { gitRef: string };

/** Files routes act in the agent service as the agent user unless told otherwise. */
export interface FilesOptions {
  service?: string;
  user?: string;
  signal?: AbortSignal;
}

/**
 * A client of the denv control plane's REST API (contracts/routes.md): one method per route
 * (the read routes a page also needs are DenvReadClient's), answers parsed with the @denv/spec
 * schemas, failures thrown as DenvApiError.
 */
export class DenvClient extends DenvReadClient {
  constructor(options: DenvClientOptions) {
    super(new Transport(options.url, options.token, options.fetch));
  }

  /** The control plane's URL, without a trailing slash. */
  get url(): string {
    return this.http.url;
  }

  health(): Promise<{ ok: true }> {
    return this.http.json("GET", "/healthz", Health);
  }

  // Tokens (admin).

  createToken(body: Input<typeof CreateApiToken>): Promise<ApiTokenInfo> {
    return this.http.json("POST", "/v1/tokens", ApiToken, { json: body });
  }

  async listTokens(): Promise<ApiTokenInfo[]> {
    return (await this.http.json("GET", "/v1/tokens", TokenList)).tokens;
  }

  deleteToken(id: string): Promise<void> {
    return this.http.empty("DELETE", `/v1/tokens/${enc(id)}`);
  }

  // Projects.

  createProject(body: Input<typeof CreateProject>): Promise<Project> {
    return this.http.json("POST", "/v1/projects", Project, { json: body });
  }

  getProject(project: string): Promise<Project> {
    return this.http.json("GET", `/v1/projects/${enc(project)}`, Project);
  }

  deleteProject(project: string): Promise<void> {
    return this.http.empty("DELETE", `/v1/projects/${enc(project)}`);
  }

  /** Connects the project to a GitHub repository: pushes to `branch` (default: the repository's default branch) deploy alpha. */
  connectGithub(project: string, repository: string, branch?: string): Promise<GithubConnection> {
    return this.http.json("POST", `/v1/projects/${enc(project)}/github`, GithubConnection, {
      json: { repository, ...(branch !== undefined ? { branch } : {}) },
    });
  }

  // Deployments.

  /** Deploys a project into an environment (`alpha` unless `environment` says otherwise). */
  async deploy(
    project: string,
    source: DeploySource,
    options: WaitOptions & {
      environment?: string;
      /** Placement labels the host must carry (over the file's x-denv.placement). */
      placement?: Record<string, string>;
      /** The target whose hosts may take it (default: the control plane's, `local`). */
      target?: string;
    } = {},
  ): Promise<Deployment> {
    const path = `/v1/projects/${enc(project)}/deploy`;
    const labels = Object.entries(options.placement ?? {}).map(([k, v]) => `${k}=${v}`);
    const query = {
      environment: options.environment,
      placement: labels.length ? labels.join(",") : undefined,
      target: options.target,
    };
    const init =
      "tar" in source
        ? { query, body: source.tar, contentType: "application/x-tar" }
        : { query, json: { git_ref: source.gitRef } };
    const started = await this.http.json("POST", path, Deployment, withSignal(init, options.signal));
    return await this.#settle(started, options);
  }

  // Environments.

  /** Forks a version into a new environment (the result of the deployment is the Environment). */
  fork(env: string, body: Input<typeof ForkRequest> = {}, options: WaitOptions = {}): Promise<Deployment> {
    return this.#operation("POST", `${envPath(env)}/fork`, body, options);
  }

  /** Snapshots an environment into a new version (the result of the deployment is the Version). */
  snapshot(env: string, options: WaitOptions = {}): Promise<Deployment> {
    return this.#operation("POST", `${envPath(env)}/snapshot`, undefined, options);
  }

  rollback(env: string, body: Input<typeof RollbackRequest>, options: WaitOptions = {}): Promise<Deployment> {
    return this.#operation("POST", `${envPath(env)}/rollback`, body, options);
  }

  stop(env: string, options: WaitOptions = {}): Promise<Deployment> {
    return this.#operation("POST", `${envPath(env)}/stop`, undefined, options);
  }

  start(env: string, options: WaitOptions = {}): Promise<Deployment> {
    return this.#operation("POST", `${envPath(env)}/start`, undefined, options);
  }

  destroy(env: string, options: WaitOptions = {}): Promise<Deployment> {
    return this.#operation("DELETE", envPath(env), undefined, options);
  }

  /** Grades the environment on a fork (the result of the deployment is a VerifyResponse). */
  verify(env: string, options: WaitOptions = {}): Promise<Deployment> {
    return this.#operation("POST", `${envPath(env)}/verify`, undefined, options);
  }

  // Exec, files, tunnels, logs.

  /** Runs a command and returns its whole result (stdin, if any, given base64 in the request). */
  exec(env: string, request: Input<typeof ExecRequest>): Promise<ExecResponse> {
    return this.http.json("POST", `${envPath(env)}/exec`, ExecResponse, { json: checkExec(request) });
  }

  /** Runs a command with streamed stdin and output (WebSocket); resolves with its result. */
  execStream(
    env: string,
    request: Input<typeof ExecRequest>,
    options: ExecStreamOptions = {},
  ): Promise<ExecResponse> {
    return runExecStream(this.http, `${envPath(env)}/exec/stream`, checkExec(request), options);
  }

  /** Extracts a tar archive into directory `dir` of a service (created when missing). */
  putFiles(
    env: string,
    dir: string,
    tar: AsyncIterable<Uint8Array> | Uint8Array,
    options: FilesOptions = {},
  ): Promise<{ entries: number; bytes: number }> {
    const init = { query: filesQuery(dir, options), body: tar, contentType: "application/x-tar" };
    return this.http.json("PUT", `${envPath(env)}/files`, FilesPutResponse, withSignal(init, options.signal));
  }

  /** A tar archive of `path` (a file or a directory, under its own base name). */
  async getFiles(env: string, path: string, options: FilesOptions = {}): Promise<Readable> {
    const init = { query: filesQuery(path, options), accept: "application/x-tar" };
    const res = await this.http.send("GET", `${envPath(env)}/files`, withSignal(init, options.signal));
    if (res.body === null) return Readable.from([]);
    return Readable.fromWeb(res.body as import("node:stream/web").ReadableStream<Uint8Array>);
  }

  /** A TCP connection to `port` of `service`, as a duplex byte stream (one WebSocket). */
  connect(
    env: string,
    service: string,
    port: number,
    options: { signal?: AbortSignal } = {},
  ): Promise<Duplex> {
    return openTunnel(this.http, `${envPath(env)}/connect`, { service, port }, options.signal);
  }

  /**
   * Listens on a local port (127.0.0.1; 0 picks a free one) and forwards each connection to
   * `service:port` of the environment through its own WebSocket.
   */
  portForward(
    env: string,
    target: string,
    localPort = 0,
    options: PortForwardOptions = {},
  ): Promise<PortForward> {
    const { service, port } = parseServicePort(target);
    return listenForward(() => this.connect(env, service, port), localPort, options);
  }

  logs(env: string, options: { service?: string; tail?: number } = {}): Promise<Output<typeof LogsResponse>> {
    const query: Query = { service: options.service, tail: options.tail };
    return this.http.json("GET", `${envPath(env)}/logs`, LogsResponse, { query });
  }

  /** Runs the egress probe of an environment now and returns its findings. */
  probe(env: string): Promise<ProbeResult> {
    return this.http.json("GET", `${envPath(env)}/probe`, ProbeResult);
  }

  // Episode logs and replay.

  /**
   * Runs an episode's log again on a fresh fork of the version it started from (or `from`) and
   * answers each step's outcome; `fork` is the replayed environment, to verify like any other.
   */
  replay(env: string, body: Input<typeof ReplayRequest> = {}): Promise<ReplayResponse> {
    return this.http.json("POST", `${envPath(env)}/replay`, ReplayResponse, { json: body });
  }

  // Versions.

  /** `id` is PROJECT@vN. */
  getVersion(id: string): Promise<Version> {
    return this.http.json("GET", versionPath(id), Version);
  }

  deleteVersion(id: string): Promise<void> {
    return this.http.empty("DELETE", versionPath(id));
  }

  // Pools.

  /** Sets a project's pool size (admin); null goes back to its file's x-denv.pool. */
  setPool(project: string, size: number | null): Promise<Pool> {
    return this.http.json("PUT", `/v1/projects/${enc(project)}/pool`, Pool, { json: { size } });
  }

  // Sandboxes.

  /** Creates a sandbox: a ready fork with a TTL, for one episode. */
  createSandbox(body: Input<typeof CreateSandbox>): Promise<Environment> {
    return this.http.json("POST", "/v1/sandboxes", Environment, { json: body });
  }

  /**
   * Creates `count` sandboxes of one version in one call, each with its placement; all or none
   * (when one fails, those created are destroyed and the error names the one that failed).
   */
  async createSandboxes(
    body: Omit<Input<typeof CreateSandbox>, "count"> & { count: number },
  ): Promise<Output<typeof SandboxBatch>["sandboxes"]> {
    return (await this.http.json("POST", "/v1/sandboxes", SandboxBatch, { json: body })).sandboxes;
  }

  /**
   * Destroys a sandbox: answered once it is unreachable (`destroying`; the host finishes the
   * removal in the background), or with `wait` once it is gone (`destroyed`).
   */
  deleteSandbox(env: string, opts: { wait?: boolean } = {}): Promise<Output<typeof SandboxDestroy>> {
    const { project, name } = splitEnv(env);
    const query = opts.wait ? "?wait=true" : "";
    return this.http.json("DELETE", `/v1/sandboxes/${enc(project)}/${enc(name)}${query}`, SandboxDestroy);
  }

  // Targets and hosts.

  /** `settings` are validated per kind by the cp; `credentials` are sealed there and never returned. */
  createTarget(body: {
    name: string;
    kind: Output<typeof TargetKind>;
    settings?: Record<string, unknown>;
    credentials?: Record<string, string>;
  }): Promise<Target> {
    return this.http.json("POST", "/v1/targets", Target, { json: body });
  }

  async listTargets(): Promise<Target[]> {
    return (await this.http.json("GET", "/v1/targets", TargetList)).targets;
  }

  /** The capability table: every kind, its settings and credentials, and whether it is available. */
  async listTargetKinds(): Promise<Output<typeof TargetKindList>["kinds"]> {
    return (await this.http.json("GET", "/v1/targets/kinds", TargetKindList)).kinds;
  }

  getTarget(name: string): Promise<Target> {
    return this.http.json("GET", `/v1/targets/${enc(name)}`, Target);
  }

  /** `force`: a provisioned target's machines are deleted first (their servers at the provider). */
  deleteTarget(name: string, options: { force?: boolean } = {}): Promise<void> {
    const query: Query = { force: options.force === true ? "true" : undefined };
    return this.http.empty("DELETE", `/v1/targets/${enc(name)}`, { query });
  }

  /** The machines a provisioned target created, deleted ones included. */
  async listMachines(target: string): Promise<Output<typeof MachineList>["machines"]> {
    return (await this.http.json("GET", `/v1/targets/${enc(target)}/machines`, MachineList)).machines;
  }

  /** Reconciles a provisioned target with its provider now. */
  reconcileTarget(target: string): Promise<void> {
    return this.http.empty("POST", `/v1/targets/${enc(target)}/reconcile`);
  }

  createJoinToken(target: string, body: Input<typeof CreateJoinToken> = {}): Promise<JoinTokenInfo> {
    return this.http.json("POST", `/v1/targets/${enc(target)}/join-tokens`, JoinToken, { json: body });
  }

  /** The target's join tokens, revoked ones included (never their secrets). */
  async listJoinTokens(target: string): Promise<JoinTokenInfo[]> {
    const path = `/v1/targets/${enc(target)}/join-tokens`;
    return (await this.http.json("GET", path, JoinTokenList)).join_tokens;
  }

  /** A revoked join token joins no more hosts; hosts that joined with it stay. */
  revokeJoinToken(target: string, id: string): Promise<void> {
    return this.http.empty("DELETE", `/v1/targets/${enc(target)}/join-tokens/${enc(id)}`);
  }

  /** Every host the token may list: follows GET /v1/hosts page by page (`next`) to the end. */
  async listHosts(): Promise<Host[]> {
    const hosts: Host[] = [];
    let after: string | undefined;
    do {
      const query: Query = { limit: HOSTS_PAGE.max, after };
      const page = await this.http.json("GET", "/v1/hosts", HostList, { query });
      hosts.push(...page.hosts);
      // Pages go forward by id; a server that answers the same cursor again would loop forever.
      if (page.next !== undefined && after !== undefined && page.next <= after)
        throw new DenvApiError(
          0,
          "invalid_response",
          `GET /v1/hosts answered next=${page.next} after ${after}`,
        );
      after = page.next;
    } while (after !== undefined);
    return hosts;
  }

  /** Placement never picks the host again; what it runs stays. */
  drainHost(id: string): Promise<Host> {
    return this.http.json("POST", `/v1/hosts/${enc(id)}/drain`, Host);
  }

  /** Removes a host and revokes its credential; `force` also when it holds environments. */
  removeHost(id: string, options: { force?: boolean } = {}): Promise<RemovedHostInfo> {
    const query: Query = { force: options.force === true ? "true" : undefined };
    return this.http.json("DELETE", `/v1/hosts/${enc(id)}`, RemovedHost, { query });
  }

  async #operation(method: string, path: string, body: unknown, options: WaitOptions): Promise<Deployment> {
    const init = body === undefined ? {} : { json: body };
    const started = await this.http.json(method, path, Deployment, withSignal(init, options.signal));
    return await this.#settle(started, options);
  }

  /**
   * `wait` follows the log route rather than asking for `?wait=true`: the phases arrive as they
   * happen, and no single HTTP request has to outlive a long build (fetch gives up on headers
   * after 5 minutes).
   */
  async #settle(started: Deployment, options: WaitOptions): Promise<Deployment> {
    if (options.wait !== true || isFinished(started)) {
      if (options.wait === true) for (const phase of started.phases) options.onPhase?.(phase);
      return started;
    }
    return await waitForDeployment(this.http, started.id, options);
  }
}

function filesQuery(path: string, options: FilesOptions): Query {
  return { path, service: options.service, user: options.user };
}
