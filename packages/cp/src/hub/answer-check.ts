import {
  type CommandKind,
  type CommandPayload,
  CommandPayloads,
  type CommandResult,
  CommandResults,
  ControlPlaneMessages,
  DenvError,
  parseEnvRef,
  parseVersionRef,
} from "@denv/spec";

/**
 * A host answers only for what it was asked about. Every result is checked against the command
 * that was sent (project, environment, version), so a host cannot make the control plane record
 * an environment or a version of a project it was not asked about, or another number than the
 * one the control plane allocated. Each check returns why a result does not answer its command.
 */
type Check<K extends CommandKind> = (
  payload: CommandPayload<K>,
  result: CommandResult<K>,
) => string | undefined;

const CHECKS: { [K in CommandKind]?: Check<K> } = {
  "env.deploy": (p, r) => same("environment", r.id, `${p.project}/${p.environment}`),
  "env.fork": (p, r) =>
    same("environment", r.id, `${parseVersionRef(p.version).project}/${p.name}`) ??
    same("parent version", r.parent_version, p.version),
  "env.restore": (p, r) =>
    same("environment", r.id, p.environment) ?? same("parent version", r.parent_version, p.version),
  "env.stop": (p, r) => same("environment", r.id, p.environment),
  "env.start": (p, r) => same("environment", r.id, p.environment),
  "env.snapshot": (p, r) => versionMismatch(r, p.environment, p.number),
  "env.verify": (p, r) => {
    const project = parseEnvRef(p.environment).project;
    return (
      versionMismatch(r.snapshot, p.environment, p.number) ??
      same("version", r.version, r.snapshot.id) ??
      // A smoke verify grades the version it was asked about, and no other.
      (p.version === undefined ? undefined : same("version", r.version, p.version)) ??
      (r.fork.startsWith(`${project}/`)
        ? undefined
        : `its fork ${JSON.stringify(r.fork)} is not in project ${project}`)
    );
  },
  "env.destroy": (p, r) => same("environment", r.environment, p.environment),
  "version.delete": (p, r) => same("version", r.version, p.version),
  "version.send": (p, r) => same("version", r.version, p.version),
  "version.receive": (p, r) => same("version", r.id, p.version) ?? same("sender", r.transfer.from, p.from),
};

export function answerMismatch<K extends CommandKind>(
  kind: K,
  payload: CommandPayload<K>,
  result: CommandResult<K>,
): string | undefined {
  const check = CHECKS[kind] as Check<K> | undefined;
  return check?.(payload, result);
}

function same(what: string, got: unknown, want: unknown): string | undefined {
  return got === want ? undefined : `its ${what} is ${JSON.stringify(got)}, not ${JSON.stringify(want)}`;
}

function versionMismatch(
  v: CommandResult<"env.snapshot">,
  environment: string,
  number: number | undefined,
): string | undefined {
  const project = parseEnvRef(environment).project;
  if (v.project !== project) return `its version's project is ${JSON.stringify(v.project)}, not "${project}"`;
  if (v.source_environment !== environment) {
    return `its version's source is ${JSON.stringify(v.source_environment)}, not "${environment}"`;
  }
  if (v.id !== `${project}@v${v.number}`) {
    return `its version id ${JSON.stringify(v.id)} does not match its number ${v.number}`;
  }
  if (number !== undefined && v.number !== number) return `its version number is ${v.number}, not ${number}`;
  return undefined;
}

/**
 * A host's result as the control plane takes it: parsed with the kind's schema, then checked
 * against the payload that was sent (its stream id aside, parsed as the host parsed it).
 */
export function checkedAnswer(
  hostId: string,
  kind: CommandKind,
  payload: Record<string, unknown>,
  result: unknown,
): { value: unknown; error?: undefined; wrong?: undefined } | { error: DenvError; wrong?: string } {
  const parsed = CommandResults[kind].safeParse(result ?? {});
  if (!parsed.success) {
    return {
      error: new DenvError(
        "internal",
        `host ${hostId} returned a malformed ${kind} result: ${oneLine(parsed.error.issues)}`,
      ),
    };
  }
  const sent = CommandPayloads[kind].parse(payload) as CommandPayload<CommandKind>;
  const wrong = answerMismatch(kind, sent, parsed.data as CommandResult<CommandKind>);
  if (wrong !== undefined) {
    return { error: new DenvError("internal", ControlPlaneMessages.wrongAnswer(hostId, kind, wrong)), wrong };
  }
  return { value: parsed.data };
}

/** Schema issues on one line: "id: expected string; sizes.layer_bytes: expected number" (3 at most). */
function oneLine(issues: ReadonlyArray<{ path: PropertyKey[]; message: string }>): string {
  const shown = issues.slice(0, 3).map((i) => `${i.path.map(String).join(".") || "(result)"}: ${i.message}`);
  return `${shown.join("; ")}${issues.length > 3 ? `; and ${issues.length - 3} more` : ""}`;
}
