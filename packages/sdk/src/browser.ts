/**
 * @denv/sdk/browser: the part of the client a web page can run (the dashboard, packages/web).
 * No node: modules and no WebSocket library: the read routes and the deployment log (SSE over
 * fetch, since EventSource cannot send an Authorization header). Answers are parsed with the same
 * @denv/spec schemas as DenvClient's.
 */
import {
  Deployment,
  DeploymentList,
  Environment,
  EnvironmentList,
  EpisodeLog,
  HOSTS_PAGE,
  type Host,
  HostList,
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
import { Transport } from "./http.js";
import { enc, envPath } from "./paths.js";

export type { DeploymentEvent, FollowOptions } from "./deployments.js";
export { DenvApiError, DenvUnreachableError } from "./errors.js";

export interface BrowserClientOptions {
  /** The control plane's URL: the page's own origin when the control plane serves it. */
  url: string;
  token: string;
}

/** A read-only client of the control plane for a page, holding one user's token. */
export class DenvBrowserClient {
  readonly #http: Transport;

  constructor(options: BrowserClientOptions) {
    // The global fetch must be called unbound: a browser's throws "Illegal invocation" otherwise.
    this.#http = new Transport(options.url, options.token, (input, init) => fetch(input, init));
  }

  whoami(): Promise<WhoAmI> {
    return this.#http.json("GET", "/v1/whoami", WhoAmI);
  }

  async listProjects(): Promise<Project[]> {
    return (await this.#http.json("GET", "/v1/projects", ProjectList)).projects;
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
    return this.#http.json("GET", `${envPath(env)}/episode`, EpisodeLog, {
      query: { after: options.after, limit: options.limit },
    });
  }

  /** An episode's kept replays, newest first: the fork, the version, each step's status. */
  async replays(env: string): Promise<ReplaySummary[]> {
    return (await this.#http.json("GET", `${envPath(env)}/replays`, ReplayList)).replays;
  }

  async listVersions(project: string): Promise<Version[]> {
    const path = `/v1/projects/${enc(project)}/versions`;
    return (await this.#http.json("GET", path, VersionList)).versions;
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

  /** Follows a deployment's log (reconnecting when it drops) until it finishes. */
  waitForDeployment(id: string, options: FollowOptions = {}): Promise<Deployment> {
    return waitForDeployment(this.#http, id, options);
  }

  async listSandboxes(): Promise<Environment[]> {
    return (await this.#http.json("GET", "/v1/sandboxes", SandboxList)).sandboxes;
  }

  async listPools(): Promise<Pool[]> {
    return (await this.#http.json("GET", "/v1/pools", PoolList)).pools;
  }

  getPool(project: string): Promise<Pool> {
    return this.#http.json("GET", `/v1/projects/${enc(project)}/pool`, Pool);
  }

  /** Every host the token may list, page by page. */
  async listHosts(): Promise<Host[]> {
    const hosts: Host[] = [];
    let after: string | undefined;
    do {
      const page = await this.#http.json("GET", "/v1/hosts", HostList, {
        query: { limit: HOSTS_PAGE.max, after },
      });
      hosts.push(...page.hosts);
      if (page.next !== undefined && after !== undefined && page.next <= after) break;
      after = page.next;
    } while (after !== undefined);
    return hosts;
  }
}
