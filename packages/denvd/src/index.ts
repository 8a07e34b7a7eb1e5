export { DockerClient } from "./docker/docker-client.js";
export type { RawExecResult } from "./exec-runner.js";
export type { ProbeResult } from "./probe.js";
export { findComposeFile, loadPlan } from "./project-loader.js";
export {
  type DeployRequest,
  type EnvironmentInfo,
  type ExecOptions,
  Runtime,
  type RuntimeOptions,
  type VersionInfo,
} from "./runtime.js";
export type { VerifyResult } from "./verifier.js";
