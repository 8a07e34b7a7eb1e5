import type { CommandKind } from "@denv/spec";
import { Labels } from "@denv/spec/labels";
import { removeRejectRule } from "../host/firewall.js";
import type { EnvironmentRecord } from "../records.js";
import { hostEnvironment, hostVersion } from "./host-reports.js";
import type { Settled } from "./host-runtime.js";
import type { Runtime } from "./runtime.js";

/**
 * What a crash left of a command on this engine, from what Docker and the records show
 * (everything a command creates carries its id): a deploy, fork or restore whose one environment
 * runs is done; a snapshot whose version was recorded is done; anything else half done is removed.
 * A snapshot or verify interrupted between freeze and thaw leaves its services paused: thawed.
 */
export async function settleCommand(
  rt: Runtime,
  command: { id: string; kind: CommandKind; environment?: string | undefined },
): Promise<Settled> {
  const { id, environment } = command;
  switch (command.kind) {
    case "env.deploy":
    case "env.fork":
    case "env.restore": {
      const made = await environmentsOf(rt, id);
      const rec = made[0];
      if (made.length === 1 && rec && (await allRunning(rt, rec))) {
        return { done: true, result: hostEnvironment(rec) };
      }
      await rollBack(rt, id, made);
      return { done: false, rolledBack: true };
    }
    case "env.snapshot": {
      if (environment) await thaw(rt, environment);
      const version = await versionOf(rt, id);
      if (version) return { done: true, result: hostVersion(version, rt.host.hostId) };
      await rollBack(rt, id, []);
      return { done: false, rolledBack: true };
    }
    case "env.verify": {
      // The fork it graded on is its own; the version it snapshotted is kept (a valid snapshot).
      if (environment) await thaw(rt, environment);
      await rollBack(rt, id, await environmentsOf(rt, id));
      return { done: false, rolledBack: true };
    }
    default:
      if (environment) await thaw(rt, environment);
      return { done: false, rolledBack: false };
  }
}

function environmentsOf(rt: Runtime, command: string): Promise<EnvironmentRecord[]> {
  return rt.host.records.environments().then((all) => all.filter((e) => e.command === command));
}

async function allRunning(rt: Runtime, rec: EnvironmentRecord): Promise<boolean> {
  for (const svc of rec.plan.services) {
    const id = rec.containers[svc.name];
    const state = id ? await rt.host.docker.containers.inspect(id) : undefined;
    // A one-shot service that completed is as ready as it gets.
    const ok = state !== undefined && (state.running ? !state.paused : state.exitCode === 0);
    if (!ok) return false;
  }
  return true;
}

/** The version a snapshot command recorded: its committed images carry the command's id. */
async function versionOf(rt: Runtime, command: string) {
  const images = await rt.host.docker.images.list({
    [Labels.host]: rt.host.hostId,
    [Labels.command]: command,
    [Labels.role]: "version",
  });
  const id = images.map((i) => i.labels[Labels.version]).find((v) => v !== undefined);
  return id && (await rt.host.records.getVersion(id)) ? rt.version(id) : undefined;
}

async function thaw(rt: Runtime, envId: string): Promise<void> {
  const rec = await rt.host.records.getEnvironment(envId);
  for (const id of Object.values(rec?.containers ?? {})) {
    if ((await rt.host.docker.containers.inspect(id))?.paused) await rt.host.docker.containers.unpause(id);
  }
}

/** Removes the environments a command recorded and whatever else carries its id, then gc. */
async function rollBack(rt: Runtime, command: string, made: EnvironmentRecord[]): Promise<void> {
  for (const rec of made) await rt.destroy(rec.id);
  const mine = { [Labels.managed]: "true", [Labels.host]: rt.host.hostId, [Labels.command]: command };
  for (const c of await rt.host.docker.containers.list(mine)) await rt.host.docker.containers.remove(c.id);
  for (const n of await rt.host.docker.networks.list(mine)) {
    await removeRejectRule(n.id);
    await rt.host.docker.networks.remove(n.id);
  }
  for (const v of await rt.host.docker.volumes.list(mine)) await rt.host.docker.volumes.remove(v.name);
  // Store directories, firewall rules and version images are not labelled: gc removes what no
  // record owns.
  await rt.gc();
}
