import { z } from "zod";

export const DeploymentKind = z.enum([
  "deploy",
  "fork",
  "rollback",
  "snapshot",
  "verify",
  "stop",
  "start",
  "destroy",
]);
export type DeploymentKind = z.infer<typeof DeploymentKind>;

/** The phases of each deployment kind, in order (ARCHITECTURE "Deployments and phases"). */
export const Phases: Record<DeploymentKind, readonly string[]> = {
  // The host that builds is the host that runs (images stay where they were built), so a
  // deploy is placed before it is validated and built there.
  deploy: ["resolve source", "place", "validate", "build", "start", "health", "probe", "snapshot", "switch"],
  fork: ["place", "restore", "start", "health", "probe"],
  rollback: ["place", "restore", "start", "health", "probe", "switch"],
  snapshot: ["freeze", "capture layers", "capture volumes", "thaw", "record"],
  verify: ["stop agent", "snapshot", "fork", "probe", "run verifier", "collect", "clean up"],
  stop: ["stop"],
  start: ["start", "health", "probe"],
  destroy: ["destroy"],
};
