import { ComposeReasons } from "../messages.js";
import type { Build } from "../plan.js";
import type { ComposeContext } from "./compose-context.js";
import type { Refuse } from "./findings.js";
import { joinProjectPath, projectPath } from "./project-path.js";
import { describe, isExtensionKey, isInert, isMapping, keyValues, put, scalarString } from "./values.js";

/** Build options that reach the host, its network or its credentials. */
const HOST_ACCESS = new Set(["network", "ssh", "secrets", "extra_hosts", "privileged", "entitlements"]);
/** Build options denv does not implement. */
const UNSUPPORTED = new Set([
  "additional_contexts",
  "cache_from",
  "cache_to",
  "dockerfile_inline",
  "isolation",
  "labels",
  "no_cache",
  "platforms",
  "pull",
  "shm_size",
  "tags",
  "ulimits",
]);

/**
 * `build:` of a service or of the verifier: a context string, or {context, dockerfile, args,
 * target}. The context and the Dockerfile must exist inside the project. `key` is where the
 * build sits ("build"), for refusals.
 */
export function parseBuild(
  value: unknown,
  key: string,
  refuse: Refuse,
  ctx: ComposeContext,
): Build | undefined {
  let contextRaw: unknown = ".";
  let dockerfileRaw: unknown = "Dockerfile";
  let args: Record<string, string> = {};
  let target: string | undefined;
  let ok = true;

  if (typeof value === "string") {
    contextRaw = value;
  } else if (isMapping(value)) {
    for (const [k, v] of Object.entries(value)) {
      if (isExtensionKey(k)) continue;
      switch (k) {
        case "context":
          contextRaw = v;
          break;
        case "dockerfile":
          dockerfileRaw = v;
          break;
        case "args": {
          const pairs = keyValues(v);
          if (pairs === undefined) {
            refuse(`${key}.args`, ComposeReasons.expected("a list of KEY=VALUE or a mapping", describe(v)));
            ok = false;
            break;
          }
          args = {};
          for (const { key: name, value: arg } of pairs) {
            // A build arg without a value takes it from the environment, or stays unset.
            const resolved = arg ?? ctx.env[name];
            if (resolved !== undefined) put(args, name, resolved);
          }
          break;
        }
        case "target": {
          const t = scalarString(v);
          if (t === undefined || t === "") {
            refuse(`${key}.target`, ComposeReasons.expected("a build stage name", describe(v)));
            ok = false;
          } else {
            target = t;
          }
          break;
        }
        default:
          if (isInert(v)) break;
          ok = false;
          if (HOST_ACCESS.has(k)) refuse(`${key}.${k}`, ComposeReasons.buildHostAccess(k));
          else if (UNSUPPORTED.has(k)) refuse(`${key}.${k}`, ComposeReasons.buildOption(k));
          else refuse(`${key}.${k}`, ComposeReasons.unknownKey);
      }
    }
  } else {
    refuse(key, ComposeReasons.expected("a context path or a mapping", describe(value)));
    return undefined;
  }

  if (typeof contextRaw !== "string" || contextRaw === "") {
    refuse(`${key}.context`, ComposeReasons.expected("a folder in the project", describe(contextRaw)));
    return undefined;
  }
  if (/^[a-z][a-z0-9+.-]*:\/\/|^git@|\.git(#.*)?$/i.test(contextRaw)) {
    refuse(`${key}.context`, ComposeReasons.remoteContext(contextRaw));
    return undefined;
  }
  const context = projectPath(contextRaw);
  if (!context.ok) {
    refuse(`${key}.context`, context.reason);
    return undefined;
  }
  if (!ctx.exists(context.path)) {
    refuse(`${key}.context`, ComposeReasons.notFound(contextRaw));
    return undefined;
  }

  if (typeof dockerfileRaw !== "string" || dockerfileRaw === "") {
    refuse(`${key}.dockerfile`, ComposeReasons.expected("a Dockerfile path", describe(dockerfileRaw)));
    return undefined;
  }
  const dockerfile = projectPath(dockerfileRaw, context.path);
  if (!dockerfile.ok) {
    refuse(`${key}.dockerfile`, dockerfile.reason);
    return undefined;
  }
  if (!ctx.exists(dockerfile.path)) {
    refuse(`${key}.dockerfile`, ComposeReasons.notFound(joinProjectPath(context.path, dockerfileRaw)));
    return undefined;
  }
  if (!ok) return undefined;
  const build: Build = { context: context.path, dockerfile: dockerfileRaw, args };
  if (target !== undefined) build.target = target;
  return build;
}
