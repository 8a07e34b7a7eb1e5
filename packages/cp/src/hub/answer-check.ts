import type { CommandKind } from "@denv/spec";

/**
 * A host answers only for what it was asked about. Every result is checked against the command
 * that was sent (project, environment, version), so a host cannot make the control plane record
 * an environment or a version of a project it was not asked about, or another number than the
 * one the control plane allocated. Returns why a result does not answer its command.
 */
export function answerMismatch(
  kind: CommandKind,
  payload: Record<string, unknown>,
  result: unknown,
): string | undefined {
  const r = (result ?? {}) as Record<string, unknown>;
  const expect = (what: string, got: unknown, want: unknown): string | undefined =>
    got === want ? undefined : `its ${what} is ${JSON.stringify(got)}, not ${JSON.stringify(want)}`;
  const projectOf = (ref: string) => ref.split(/[/@]/)[0] ?? "";
  const str = (k: string) => String(payload[k] ?? "");
  switch (kind) {
    case "env.deploy":
      return expect("environment", r.id, `${str("project")}/${str("environment")}`);
    case "env.fork":
      return (
        expect("environment", r.id, `${projectOf(str("version"))}/${str("name")}`) ??
        expect("parent version", r.parent_version, str("version"))
      );
    case "env.restore":
      return (
        expect("environment", r.id, str("environment")) ??
        expect("parent version", r.parent_version, str("version"))
      );
    case "env.stop":
    case "env.start":
      return expect("environment", r.id, str("environment"));
    case "env.snapshot":
      return versionMismatch(r, str("environment"), payload.number, projectOf) ?? undefined;
    case "env.verify": {
      const env = str("environment");
      const snapshot = r.snapshot as Record<string, unknown> | undefined;
      return (
        (snapshot ? versionMismatch(snapshot, env, payload.number, projectOf) : undefined) ??
        (snapshot ? expect("version", r.version, snapshot.id) : undefined) ??
        (String(r.fork ?? "").startsWith(`${projectOf(env)}/`)
          ? undefined
          : `its fork ${JSON.stringify(r.fork)} is not in project ${projectOf(env)}`)
      );
    }
    case "env.destroy":
      return r.environment === undefined
        ? undefined
        : expect("environment", r.environment, str("environment"));
    case "version.delete":
      return r.version === undefined ? undefined : expect("version", r.version, str("version"));
    default:
      return undefined;
  }
}

function versionMismatch(
  v: Record<string, unknown>,
  environment: string,
  number: unknown,
  projectOf: (ref: string) => string,
): string | undefined {
  const project = projectOf(environment);
  if (v.project !== project) return `its version's project is ${JSON.stringify(v.project)}, not "${project}"`;
  if (v.source_environment !== environment) {
    return `its version's source is ${JSON.stringify(v.source_environment)}, not "${environment}"`;
  }
  if (typeof v.number !== "number" || v.id !== `${project}@v${v.number}`) {
    return `its version id ${JSON.stringify(v.id)} does not match its number ${JSON.stringify(v.number)}`;
  }
  if (number !== undefined && v.number !== number)
    return `its version number is ${v.number}, not ${String(number)}`;
  return undefined;
}
