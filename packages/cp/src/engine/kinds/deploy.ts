import { createReadStream } from "node:fs";
import { rm } from "node:fs/promises";
import { ControlPlaneMessages, composeServiceCount, DenvError, type PhaseName } from "@denv/spec";
import { z } from "zod";
import { readTarEntry } from "../../targets/tar-entry.js";
import { DeployState, PlacementValue } from "../requests.js";
import type { RunContext } from "../run-context.js";
import {
  destroyQuietly,
  environmentResult,
  fromHost,
  hostEnvName,
  type KindRunner,
  pendingEnvironment,
} from "./common.js";
import { recordVersion, switchTo } from "./switch.js";

/** The deploy's phases that run inside env.deploy (`resolve source` and `place` are the cp's). */
const HOST_PHASES: readonly PhaseName[] = ["validate", "build", "start", "health", "probe"];
/** A deploy from git: the host resolves the source too (it fetches the commit). */
const GIT_HOST_PHASES: readonly PhaseName[] = ["resolve source", ...HOST_PHASES];

/**
 * deploy: the uploaded source is streamed to the placed host, which validates, builds and starts
 * it as a new host environment next to the running one; the cp snapshots it as the next version
 * and switches PROJECT/ENV to it, then destroys the previous host environment.
 */
export const deploy: KindRunner = {
  async run(ctx) {
    const req = ctx.request(DeployState);
    const { store, placer } = ctx.deps;
    const project = ctx.d.project;
    await ctx.memo("env", z.boolean(), async () => {
      if (await store.getEnvironment(ctx.d.environment)) return false;
      await store.putEnvironment(pendingEnvironment(ctx.d.environment));
      return true;
    });
    // The upload was spooled and hashed when the request came in; the phase records what arrived.
    // A git source is resolved by the host that builds, after placement.
    if (!req.git)
      await ctx.cpPhase("resolve source", z.boolean(), async () => ({
        value: true,
        evidence: { source: req.source },
      }));
    const place = await ctx.cpPhase("place", PlacementValue, async () => {
      // What the file asks of the target, refused here when the target lacks it (nothing exists yet).
      const text = req.spool
        ? await readTarEntry(req.spool, req.compose_file).catch(() => undefined)
        : undefined;
      const services = text === undefined ? undefined : composeServiceCount(text);
      const kind = (await store.getProject(project))?.kind ?? "rl-environment";
      const p = await placer.place({
        ...(services === undefined ? {} : { needs: { services, kind } }),
        target: req.target,
        project,
        environment: ctx.d.environment,
        labels: req.placement,
        deployment: ctx.d.id,
      });
      return { value: { hostId: p.hostId, reason: p.reason }, evidence: p.evidence };
    });
    ctx.d.hostId = place.hostId;
    const hostEnv = hostEnvName(ctx.d.environment.split("/")[1] ?? "alpha", ctx.d.id);
    const kind = (await store.getProject(project))?.kind;
    const git = req.git;
    const spool = req.spool;
    // The token is asked for when the command is sent (it expires within the hour) and is never
    // part of the deployment's row.
    const authorization =
      git && !("deploy" in ctx.d.state.steps) ? await ctx.deps.gitAuthorization?.(project) : undefined;
    const created = await ctx.command(
      "deploy",
      place.hostId,
      "env.deploy",
      git
        ? {
            project,
            environment: hostEnv,
            git: { ...git, ...(authorization ? { authorization } : {}) },
            compose_file: req.compose_file,
            kind,
          }
        : (stream) => ({
            project,
            environment: hostEnv,
            source_stream: stream,
            compose_file: req.compose_file,
            kind,
          }),
      git || !spool
        ? { phases: GIT_HOST_PHASES }
        : { phases: HOST_PHASES, upload: () => createReadStream(spool) },
    );
    const number = await ctx.memo("version-number", z.number(), () => store.nextVersionNumber(project));
    const version = await ctx.command(
      "snapshot",
      place.hostId,
      "env.snapshot",
      { environment: `${project}/${hostEnv}`, number },
      { phases: [], within: "snapshot" },
    );
    await recordVersion(ctx, version, place.hostId);
    // The file's x-denv.pool and x-denv.verifier.smoke, as the host read them.
    const validated = ctx.d.phases.find((ph) => ph.name === "validate")?.evidence as
      | { pool?: unknown; smoke?: { expect?: number } }
      | undefined;
    if (validated?.smoke)
      await smokeVerify(ctx, place.hostId, `${project}/${hostEnv}`, version.id, validated.smoke);
    const env = await switchTo(ctx, (base) =>
      fromHost(base, created, { hostId: place.hostId, hostEnv, version: version.id }),
    );
    await ctx.deps.afterVersion(project);
    // The file's x-denv.pool is the project's pool size by default.
    await ctx.deps.afterDeploy?.(project, typeof validated?.pool === "number" ? validated.pool : undefined);
    return environmentResult(env);
  },

  async cleanup(ctx) {
    const hostId = ctx.d.hostId;
    // Once placed, the host may hold a half-built environment (a host that never got the
    // command answers not_found, which is fine).
    if (hostId) {
      const hostEnv = hostEnvName(ctx.d.environment.split("/")[1] ?? "alpha", ctx.d.id);
      await destroyQuietly(ctx, "cleanup", hostId, `${ctx.d.project}/${hostEnv}`);
    }
    if (ctx.d.state.steps.env === true) {
      const env = await ctx.deps.store.getEnvironment(ctx.d.environment);
      if (env && !env.hostEnv) await ctx.deps.store.deleteEnvironment(env.id);
    }
  },

  async dispose(ctx) {
    const req = DeployState.safeParse(ctx.d.state.request);
    if (req.success && req.data.spool) await rm(req.data.spool, { force: true });
  },
};

/**
 * x-denv.verifier.smoke: the new version graded once, untouched, on a fork of it (the host's
 * verify of a version: no agent stopped, nothing snapshotted), before the environment switches.
 * The outcome is the phase's evidence (the check run's reward); with `expect`, any other outcome
 * fails the deploy here: the version is kept (fork it to see why) and nothing switches.
 */
function smokeVerify(
  ctx: RunContext,
  hostId: string,
  hostEnv: string,
  version: string,
  smoke: { expect?: number },
): Promise<void> {
  return ctx.phase("smoke verify", async () => {
    // The host's own phases (fork, probe, run verifier...) join this phase's evidence by name.
    const graded = await ctx.command(
      "smoke",
      hostId,
      "env.verify",
      { environment: hostEnv, version },
      { phases: [] },
    );
    const met = smoke.expect === undefined || (graded.status === "graded" && graded.reward === smoke.expect);
    if (!met) {
      const got =
        graded.status === "graded"
          ? `reward ${graded.reward}`
          : `${graded.status}${graded.message ? ` (${graded.message})` : ""}`;
      throw new DenvError(
        "verifier_failed",
        ControlPlaneMessages.smokeMismatch(version, got, smoke.expect as number),
      );
    }
    return {
      value: undefined,
      evidence: {
        status: graded.status,
        reward: graded.reward,
        rewards: graded.rewards,
        ...(graded.message ? { message: graded.message } : {}),
        ...(smoke.expect !== undefined ? { expect: smoke.expect } : {}),
        verifier: { user: graded.evidence.verifier.user, duration_ms: graded.evidence.verifier.duration_ms },
      },
    };
  });
}
