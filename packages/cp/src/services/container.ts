import type { GithubService } from "../github/github-service.js";
import type { Metrics } from "../http/metrics.js";
import type { HostHub } from "../hub/hub.js";
import type { Store } from "../store/store.js";
import type { AuthService } from "./auth-service.js";
import type { DeploymentService } from "./deployment-service.js";
import type { EnvironmentService } from "./environment-service.js";
import type { EpisodeRecorder } from "./episode-recorder.js";
import type { HostService } from "./host-service.js";
import type { PoolService } from "./pool-service.js";
import type { ProjectService } from "./project-service.js";
import type { ReplayService } from "./replay-service.js";
import type { SandboxService } from "./sandbox-service.js";
import type { TargetService } from "./target-service.js";
import type { VersionService } from "./version-service.js";

/** Everything route modules may call. Built once in control-plane.ts. */
export interface Services {
  store: Store;
  hub: HostHub;
  metrics: Metrics;
  auth: AuthService;
  projects: ProjectService;
  environments: EnvironmentService;
  /** Episode command logs (recorded around exec and files) and their replays. */
  episodes: EpisodeRecorder;
  replays: ReplayService;
  deployments: DeploymentService;
  versions: VersionService;
  sandboxes: SandboxService;
  pools: PoolService;
  targets: TargetService;
  hosts: HostService;
  github: GithubService;
  /** The URL clients and hosts reach this control plane at. */
  publicUrl: string;
}
