import { ComposeMessages, ComposeNotes, ComposeReasons } from "../messages.js";
import type { Resources, VerifierPlan } from "../plan.js";
import { sameUser } from "../users.js";
import { parseBuild } from "./build.js";
import type { ComposeContext } from "./compose-context.js";
import { parseEnvironment } from "./environment.js";
import type { Findings, Refuse } from "./findings.js";
import type { ImageTags } from "./image-tags.js";
import { projectPath } from "./project-path.js";
import { parseResourceBlock, withDefaults } from "./resources.js";
import { parseDuration } from "./units.js";
import {
  describe,
  isExtensionKey,
  isMapping,
  numberValue,
  scalarString,
  stringList,
  stringOrList,
} from "./values.js";

const VERIFIER_DEFAULT_USER = "1001";
const VERIFIER_DEFAULT_TIMEOUT_SEC = 600;

export interface VerifierScope {
  ctx: ComposeContext;
  findings: Findings;
  defaults: Resources;
  tags: ImageTags;
  /**
   * The agent's user, which the verifier's must differ from; undefined when unknown, and for a
   * sandboxed agent (its uid is one of gVisor's kernel, never shared with the verifier's
   * container).
   */
  agentUser: string | undefined;
}

/** x-denv.verifier: the grader, its own image, uid and caps; see docs/reference/compose.md. */
export function parseVerifier(value: unknown, scope: VerifierScope): VerifierPlan | undefined {
  const { findings, ctx } = scope;
  let ok = true;
  const refuse: Refuse = (key, reason) => {
    findings.top(`x-denv.verifier.${key}`, reason);
    ok = false;
  };
  if (!isMapping(value)) {
    findings.top("x-denv.verifier", ComposeReasons.expected("a mapping", describe(value)));
    return undefined;
  }
  const verifier: VerifierPlan = {
    image: "",
    command: [],
    timeoutSec: VERIFIER_DEFAULT_TIMEOUT_SEC,
    submission: [],
    user: VERIFIER_DEFAULT_USER,
    environment: {},
    resources: scope.defaults,
  };
  for (const [key, v] of Object.entries(value)) {
    if (isExtensionKey(key) || v === null) continue;
    switch (key) {
      case "image": {
        const image = scalarString(v);
        if (image === undefined || image === "" || /\s/.test(image)) {
          refuse(key, ComposeReasons.expected("an image reference", describe(v)));
        } else {
          verifier.image = image;
        }
        break;
      }
      case "build": {
        const build = parseBuild(v, key, refuse, ctx);
        if (build !== undefined) verifier.build = build;
        break;
      }
      case "command": {
        const command = typeof v === "string" ? v : stringList(v);
        if (command === undefined || command.length === 0) {
          refuse(key, ComposeReasons.expected("a string or a list of strings", describe(v)));
        } else {
          verifier.command = command;
        }
        break;
      }
      case "timeout": {
        const seconds = numberValue(v);
        const ms = seconds === undefined ? parseDuration(v) : seconds * 1000;
        if (ms === undefined || ms <= 0) {
          refuse(
            key,
            ComposeReasons.expected("a number of seconds or a duration such as '10m'", describe(v)),
          );
        } else {
          verifier.timeoutSec = Math.ceil(ms / 1000);
        }
        break;
      }
      case "tests": {
        const raw = scalarString(v);
        if (raw === undefined || raw === "") {
          refuse(key, ComposeReasons.expected("a folder in the project", describe(v)));
          break;
        }
        const rel = projectPath(raw);
        if (!rel.ok) refuse(key, rel.reason);
        else if (!ctx.exists(rel.path)) refuse(key, ComposeReasons.notFound(raw));
        else verifier.tests = rel.path;
        break;
      }
      case "submission": {
        const paths = stringOrList(v);
        if (paths === undefined) {
          refuse(key, ComposeReasons.expected("an absolute path or a list of them", describe(v)));
          break;
        }
        for (const path of paths) {
          const normalized = submissionPath(path);
          if (normalized === undefined) refuse(key, ComposeReasons.submissionPath(path));
          else if (!verifier.submission.includes(normalized)) verifier.submission.push(normalized);
        }
        break;
      }
      case "user": {
        // Root is allowed here, and only here: the verifier's container is its own (the agent's
        // processes are gone and it never shares a container with them), as Harbor and Karotte
        // grade. The file must say so; the default is a non-root uid.
        const user = scalarString(v);
        if (user === undefined || user === "" || /\s/.test(user)) {
          refuse(key, ComposeReasons.expected("a user name or uid[:gid]", describe(v)));
        } else {
          verifier.user = user;
        }
        break;
      }
      case "egress": {
        if (v === "deny" || v === "mirrors") verifier.egress = v;
        else refuse(key, ComposeReasons.verifierEgress(scalarString(v) ?? describe(v)));
        break;
      }
      case "environment":
        verifier.environment =
          parseEnvironment(v, key, refuse, ctx.env, (name) =>
            findings.note(ComposeNotes.verifierEnvironmentUnset(name)),
          ) ?? {};
        break;
      case "resources":
        verifier.resources = withDefaults(parseResourceBlock(v, key, refuse), scope.defaults);
        break;
      case "services": {
        if (v === false) verifier.services = false;
        else if (v !== true) refuse(key, ComposeReasons.verifierServices(describe(v)));
        break;
      }
      case "smoke": {
        const smoke = parseSmoke(v);
        if (smoke === "refused") refuse(key, ComposeReasons.smoke(describe(v)));
        else if (smoke !== undefined) verifier.smoke = smoke;
        break;
      }
      default:
        refuse(key, ComposeReasons.unknownKey);
    }
  }
  if ((value.image ?? null) === null && (value.build ?? null) === null) {
    findings.refuse(ComposeMessages.topMissing("x-denv.verifier.image", "give 'image' or 'build'"));
    ok = false;
  }
  if ((value.command ?? null) === null) {
    findings.refuse(
      ComposeMessages.topMissing(
        "x-denv.verifier.command",
        "the verifier needs a command, e.g. [sh, /tests/test.sh]",
      ),
    );
    ok = false;
  }
  if (verifier.services === false && verifier.egress === "mirrors") {
    refuse("services", ComposeReasons.verifierServicesEgress);
  }
  if (scope.agentUser !== undefined && sameUser(scope.agentUser, verifier.user)) {
    refuse("user", ComposeReasons.verifierSameUser(verifier.user));
  }
  if (!ok) return undefined;
  if (verifier.image === "") verifier.image = scope.tags.derive("verifier");
  return verifier;
}

/** `true`, `false`, or `{ expect: REWARD }`; "refused" for anything else. */
function parseSmoke(v: unknown): VerifierPlan["smoke"] | "refused" {
  if (v === true) return {};
  if (v === false) return undefined;
  if (!isMapping(v)) return "refused";
  const smoke: NonNullable<VerifierPlan["smoke"]> = {};
  for (const [k, x] of Object.entries(v)) {
    if (isExtensionKey(k) || x === null) continue;
    if (k !== "expect" || typeof x !== "number" || !Number.isFinite(x)) return "refused";
    smoke.expect = x;
  }
  return smoke;
}

/** An absolute path below / without `..`, normalized; undefined otherwise. */
function submissionPath(path: string): string | undefined {
  if (!path.startsWith("/")) return undefined;
  const parts = path.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.length === 0 || parts.includes("..")) return undefined;
  return `/${parts.join("/")}`;
}
