import { readFile } from "node:fs/promises";
import { resolve, sep } from "node:path";
import { DenvError, type Plan, ProviderMessages, type ServicePlan } from "@denv/spec";
import { type ImageDefaults, imageDefaults } from "../dockerfile-steps.js";
import { shellQuote } from "../e2b/sandbox-exec.js";
import { passwdUser, SETPRIV } from "../e2b/sandbox-user.js";
import { waitHealthyWith } from "../service-health.js";
import { PROVIDER, type PrimeHost, provider } from "./prime-host.js";
import type { PrimeEnvironmentRecord } from "./prime-records.js";

/** Where a service's output goes in its sandbox (the sandbox's own, not the agent's to read back). */
const SERVICE_LOG = "/tmp/.denv-service.log";

/** How a service starts in its sandbox: its argv, as whom, where. */
export interface ServiceStart {
  argv: string[];
  /** The compose user, else the Dockerfile's USER; none: the sandbox's default (root). */
  user?: string;
  workdir: string;
}

/** An ENTRYPOINT's or command's form as an argv: a shell line runs under /bin/sh -c. */
function argv(form: string[] | string): string[] {
  return typeof form === "string" ? ["/bin/sh", "-c", form] : form;
}

/**
 * What a service runs, as Docker would start its container: compose's `entrypoint` replaces the
 * image's and drops its CMD, compose's `command` replaces the CMD, the entrypoint's argv comes
 * first (a shell-form entrypoint takes no CMD). `image` is what its Dockerfile says (none for a
 * service of an `image:`, whose config denv does not read here). Undefined when it runs nothing.
 */
export function serviceStart(service: ServicePlan, image: ImageDefaults): ServiceStart | undefined {
  const entrypoint = service.entrypoint ?? image.entrypoint;
  const cmd = service.entrypoint !== undefined ? service.command : (service.command ?? image.cmd);
  const line =
    typeof entrypoint === "string"
      ? argv(entrypoint)
      : [...(entrypoint ?? []), ...(cmd === undefined ? [] : argv(cmd))];
  if (line.length === 0) return undefined;
  const user = service.user ?? image.user;
  return {
    argv: line,
    ...(user !== undefined ? { user } : {}),
    workdir: service.workingDir ?? image.workdir ?? "/",
  };
}

/**
 * Starts the service in the background in its sandbox, detached from the command session that
 * started it, as `start.user` in `start.workdir`. With `cap_drop`, root starts it through the
 * system's setpriv, which becomes that user (uid, gid and groups from the sandbox's passwd, read
 * by Prime's file API) with the capabilities dropped from its bounding and inheritable sets, so
 * neither the process nor what it runs has them; an image without /usr/bin/setpriv fails closed.
 */
export async function startService(
  host: PrimeHost,
  sandboxId: string,
  service: ServicePlan,
  start: ServiceStart,
): Promise<void> {
  let line = start.argv.map(shellQuote).join(" ");
  let user = start.user;
  if (service.capDrop.length > 0) {
    const passwd = (await provider(() => host.api.downloadFile(sandboxId, "/etc/passwd"))).toString("utf8");
    const who = passwdUser(passwd, start.user ?? "0", PROVIDER);
    const caps = service.capDrop.map((c) =>
      c.toUpperCase() === "ALL" ? "-all" : `-${c.toLowerCase().replace(/^cap_/, "")}`,
    );
    line = [
      SETPRIV,
      `--reuid=${who.uid}`,
      `--regid=${who.gid}`,
      "--init-groups",
      `--bounding-set=${caps.join(",")}`,
      `--inh-caps=${caps.join(",")}`,
      "--",
      line,
    ]
      .map((w, i, all) => (i === all.length - 1 ? w : shellQuote(w)))
      .join(" ");
    user = "root";
  }
  const r = await provider(() =>
    host.api.runCommand(
      sandboxId,
      ["/bin/sh", "-c", `nohup /bin/sh -c "$1" >${SERVICE_LOG} 2>&1 </dev/null &`, "sh", `exec ${line}`],
      { ...(user !== undefined ? { user } : {}), cwd: start.workdir },
    ),
  );
  if (r.exitCode !== 0) {
    throw new DenvError(
      "docker",
      `service '${service.name}' could not start: ${r.stderr.toString().trim() || `exit ${r.exitCode}`}`,
    );
  }
}

/**
 * The last `tail` lines a service's start wrote in its sandbox (stdout and stderr together; the
 * agent service's when `name` is undefined), read as the service's own user and never through a
 * link (a service of the agent's user writes a log the agent may replace); a service that runs
 * nothing has none.
 */
export async function serviceLog(
  host: PrimeHost,
  rec: PrimeEnvironmentRecord,
  name: string | undefined,
  tail: number,
): Promise<string> {
  const service = rec.plan.services.find((s) => s.name === (name ?? rec.plan.agent.service));
  const sandboxId =
    service?.name === rec.plan.agent.service ? rec.sandboxId : rec.peers?.[service?.name ?? ""]?.sandboxId;
  if (!service || !sandboxId)
    throw new DenvError("not_found", `environment ${rec.id} has no service '${name}'`);
  const start = serviceStart(service, rec.imageDefaults?.[service.name] ?? {});
  if (!start) return "";
  const r = await provider(() =>
    host.api.runCommand(
      sandboxId,
      [
        "/bin/sh",
        "-c",
        '[ -f "$1" ] && [ ! -L "$1" ] && tail -n "$2" -- "$1"; true',
        "sh",
        SERVICE_LOG,
        String(tail),
      ],
      { ...(start.user !== undefined ? { user: start.user } : {}), cwd: "/" },
    ),
  );
  return r.stdout.toString("utf8");
}

/** Runs the service's healthcheck until it passes (service-health.ts), as the service's user. */
export function waitHealthy(
  host: PrimeHost,
  sandboxId: string,
  service: ServicePlan,
  start: ServiceStart | undefined,
): Promise<void> {
  return waitHealthyWith(service, async (script) => {
    const r = await provider(() =>
      host.api.runCommand(sandboxId, ["/bin/sh", "-c", script], {
        ...(start?.user !== undefined ? { user: start.user } : {}),
        cwd: start?.workdir ?? service.workingDir ?? "/",
      }),
    );
    return { exitCode: r.exitCode, output: r.stdout.toString() + r.stderr.toString() };
  });
}

/**
 * What each built service's Dockerfile runs, as whom, where (dockerfile-steps.ts), for a service
 * compose gives no command; a healthcheck of a service that then runs nothing is refused, as the
 * check of a command it would watch.
 */
export async function dockerfileDefaults(
  projectDir: string,
  plan: Plan,
): Promise<Record<string, ImageDefaults>> {
  const out: Record<string, ImageDefaults> = {};
  for (const s of plan.services) {
    if (s.build) {
      const file = resolve(projectDir, s.build.context, s.build.dockerfile);
      if (!file.startsWith(resolve(projectDir) + sep))
        throw new DenvError("invalid_compose", `service '${s.name}': its Dockerfile is outside the project`);
      const text = await readFile(file, "utf8");
      out[s.name] = imageDefaults(text);
    }
    if (s.healthcheck && !serviceStart(s, out[s.name] ?? {})) {
      throw new DenvError(
        "invalid_compose",
        ProviderMessages.unsupportedKey(
          PROVIDER,
          s.name,
          "healthcheck",
          "the service runs nothing: it has no command, nor has its Dockerfile",
        ),
      );
    }
  }
  return out;
}
