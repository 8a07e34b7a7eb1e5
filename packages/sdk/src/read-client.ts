import {
  Deployment,
  DeploymentList,
  Environment,
  EnvironmentList,
  EpisodeLog,
  Pool,
  PoolList,
  type Project,
  ProjectList,
  ReplayList,
  type ReplaySummary,
  SandboxList,
  type Version,
  VersionList,
  WhoAmI,
} from "@denv/spec";
import {
  type DeploymentEvent,
  deploymentEvents,
  type FollowOptions,
  waitForDeployment,
} from "./deployments.js";
import type { Query, Transport } from "./http.js";
import { enc, envPath } from "./paths.js";

/**
 * The read routes that both DenvClient (node) and DenvBrowserClient (a page) answer, written once.
 * It imports no node: module and no WebSocket library, so that the dashboard's bundle can hold it.
 */
export class DenvReadClient {
  readonly #http: Transport;

  protected constructor(http: Transport) {
    this.#http = http;
  }

  protected get http(): Transport {
    return this.#http;
  }

  whoami(): Promise<WhoAmI> {
    return this.#http.json("GET", "/v1/whoami", WhoAmI);
  }

  async listProjects(): Promise<Project[]> {
    return (await this.#http.json("GET", "/v1/projects", ProjectList)).projects;
  }

  async listDeployments(project: string): Promise<Deployment[]> {
    const path = `/v1/projects/${enc(project)}/deployments`;
    return (await this.#http.json("GET", path, DeploymentList)).deployments;
  }

  getDeployment(id: string): Promise<Deployment> {
    return this.#http.json("GET", `/v1/deployments/${enc(id)}`, Deployment);
  }

  /** The events of a deployment's log: the past first, then live until it finishes. */
  deploymentEvents(id: string, options: { signal?: AbortSignal } = {}): AsyncGenerator<DeploymentEvent> {
    return deploymentEvents(this.#http, id, options.signal);
  }

  /** Follows a deployment's log (reconnecting when it drops) until it finishes; returns its final state. */
  waitForDeployment(id: string, options: FollowOptions = {}): Promise<Deployment> {
    return waitForDeployment(this.#http, id, options);
  }

  async listEnvironments(project: string): Promise<Environment[]> {
    const path = `/v1/projects/${enc(project)}/environments`;
    return (await this.#http.json("GET", path, EnvironmentList)).environments;
  }

  getEnvironment(env: string): Promise<Environment> {
    return this.#http.json("GET", envPath(env), Environment);
  }

  /** One page of an episode's command log (`after`: the `next` of the page before). */
  episodeLog(env: string, options: { after?: number; limit?: number } = {}): Promise<EpisodeLog> {
    const query: Query = { after: options.after, limit: options.limit };
    return this.#http.json("GET", `${envPath(env)}/episode`, EpisodeLog, { query });
  }

  /** An episode's kept replays, newest first: the fork, the version, each step's status. */
  async replays(env: string): Promise<ReplaySummary[]> {
    return (await this.#http.json("GET", `${envPath(env)}/replays`, ReplayList)).replays;
  }

  async listVersions(project: string): Promise<Version[]> {
    const path = `/v1/projects/${enc(project)}/versions`;
    return (await this.#http.json("GET", path, VersionList)).versions;
  }

  /** Every project's warm fork pool (size, where it comes from, ready and filling forks). */
  async listPools(): Promise<Pool[]> {
    return (await this.#http.json("GET", "/v1/pools", PoolList)).pools;
  }

  getPool(project: string): Promise<Pool> {
    return this.#http.json("GET", `/v1/projects/${enc(project)}/pool`, Pool);
  }

  async listSandboxes(): Promise<Environment[]> {
    return (await this.#http.json("GET", "/v1/sandboxes", SandboxList)).sandboxes;
  }
}
