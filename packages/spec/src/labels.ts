/** Docker labels on everything denvd creates. A host reconciles and collects only what carries its own host id. */
export const LABEL_PREFIX = "ai.denv.";

export const Labels = {
  managed: "ai.denv.managed",
  host: "ai.denv.host",
  project: "ai.denv.project",
  environment: "ai.denv.environment",
  version: "ai.denv.version",
  role: "ai.denv.role",
  command: "ai.denv.command",
  service: "ai.denv.service",
  volume: "ai.denv.volume",
} as const;

/** What a labelled object is for: an environment's service (and its network and volumes), a
 * verifier container, a probe, a warm-pool member, a build, or a version's committed image. */
export type Role = "service" | "verifier" | "probe" | "pool" | "build" | "version";

export interface LabelSet {
  host: string;
  project: string;
  environment: string;
  version?: string;
  role: Role;
  command: string;
  service?: string;
  volume?: string;
}

export function labelsFor(set: LabelSet): Record<string, string> {
  const out: Record<string, string> = {
    [Labels.managed]: "true",
    [Labels.host]: set.host,
    [Labels.project]: set.project,
    [Labels.environment]: set.environment,
    [Labels.role]: set.role,
    [Labels.command]: set.command,
  };
  if (set.version !== undefined) out[Labels.version] = set.version;
  if (set.service !== undefined) out[Labels.service] = set.service;
  if (set.volume !== undefined) out[Labels.volume] = set.volume;
  return out;
}

/** The labels of a version's committed image: it belongs to a project and a version, not to an environment. */
export function versionImageLabels(set: {
  host: string;
  project: string;
  version: string;
  service: string;
  command: string;
}): Record<string, string> {
  return {
    [Labels.managed]: "true",
    [Labels.host]: set.host,
    [Labels.project]: set.project,
    [Labels.version]: set.version,
    [Labels.role]: "version",
    [Labels.service]: set.service,
    [Labels.command]: set.command,
  };
}
