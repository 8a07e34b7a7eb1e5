export { DockerClient } from "./docker/docker-client.js";
export type { RawExecResult } from "./exec-runner.js";
export type { ProbeResult } from "./probe.js";
export { findComposeFile, loadPlan } from "./project-loader.js";
export type { ExecOptions } from "./runtime/environment-exec.js";
export type { RuntimeOptions } from "./runtime/host-context.js";
export type { VersionInfo } from "./runtime/host-reports.js";
export { type DeployRequest, Runtime } from "./runtime/runtime.js";
