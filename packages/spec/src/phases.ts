import { z } from "zod";

/** What a deployment changes (ARCHITECTURE "Deployments and phases"). */
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

/**
 * Every phase name: those of deployments (`Phases`) and those of the host operations inside them
 * (`HostPhases` in the protocol). One table, so that a misspelt phase fails to compile in denvd
 * and in the control plane alike.
 */
export const PhaseName = z.enum([
  "resolve source",
  "place",
  // A fork placed on a host without its version: the version streamed there from a holder.
  "transfer",
  "validate",
  "build",
  "restore",
  "start",
  "health",
  "probe",
  "snapshot",
  // A deploy whose verifier asks for it (x-denv.verifier.smoke): its new version graded untouched.
  "smoke verify",
  "switch",
  "freeze",
  "capture layers",
  "capture volumes",
  "thaw",
  "record",
  "stop agent",
  "fork",
  "run verifier",
  "collect",
  "clean up",
  "stop",
  "destroy",
  // A tunnel (env.connect): dialling the service, then the open connection.
  "connect",
  "connected",
]);
export type PhaseName = z.infer<typeof PhaseName>;

/** The phases of each deployment kind, in order (ARCHITECTURE "Deployments and phases"). */
export const Phases: Record<DeploymentKind, readonly PhaseName[]> = {
  // The host that builds is the host that runs (images stay where they were built), so a
  // deploy is placed before it is validated and built there.
  deploy: [
    "resolve source",
    "place",
    "validate",
    "build",
    "start",
    "health",
    "probe",
    "snapshot",
    "smoke verify",
    "switch",
  ],
  fork: ["place", "transfer", "restore", "start", "health", "probe"],
  rollback: ["place", "transfer", "restore", "start", "health", "probe", "switch"],
  snapshot: ["freeze", "capture layers", "capture volumes", "thaw", "record"],
  verify: ["stop agent", "snapshot", "fork", "probe", "run verifier", "collect", "clean up"],
  stop: ["stop"],
  start: ["start", "health", "probe"],
  destroy: ["destroy"],
};
