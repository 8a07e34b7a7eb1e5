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

export type Role = "service" | "verifier" | "probe" | "pool" | "build";

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
