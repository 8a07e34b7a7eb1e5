import { Labels } from "@denv/spec/labels";
import { removeRejectRule } from "../host/firewall.js";
import type { EnvironmentRecord } from "../records.js";
import { hostEnvironment, hostVersion } from "../runtime/host-reports.js";
import type { Runtime } from "../runtime/runtime.js";
import { errorText } from "./connection.js";
import type { Journal, JournalEntry, Outcome } from "./journal.js";
import type { Log } from "./log.js";

/**
 * After a crash, commands the journal holds as `started` are settled before the socket opens,
 * from what Docker and the records show (everything a command creates carries its id):
 * finished -> done with its result; half done -> what it created is removed, done with
 * `interrupted`. Either way the command is done and never runs again.
 */

const ROLLED_BACK = "denvd restarted during the command; what it created was removed";
const STOPPED = "denvd restarted during the command; send it again under a new id to retry";

const interrupted = (message: string): Outcome => ({ ok: false, error: { code: "interrupted", message } });

export async function reconcile(rt: Runtime, journal: Journal, log: Log): Promise<JournalEntry[]> {
  const settled: JournalEntry[] = [];
  for (const entry of await journal.all()) {
    if (entry.state !== "started") continue;
    let outcome: Outcome;
    try {
      outcome = await settle(rt, entry);
    } catch (err) {
      outcome = interrupted(`${STOPPED} (reconciling failed: ${errorText(err)})`);
    }
    settled.push(await journal.done(entry, outcome));
    log("command reconciled", {
      id: entry.id,
      kind: entry.kind,
      ok: outcome.ok,
      ...(outcome.ok ? {} : { message: outcome.error.message }),
    });
  }
  return settled;
}

async function settle(rt: Runtime, entry: JournalEntry): Promise<Outcome> {
  // Loaded only when a crash left a command to settle (as the agent loads it at a command).
  const { checkedResult } = await import("./checked-result.js");
  const environment = typeof entry.payload?.environment === "string" ? entry.payload.environment : undefined;
  switch (entry.kind) {
    case "env.deploy":
    case "env.fork":
    case "env.restore": {
      const made = await environmentsOf(rt, entry.id);
      const rec = made[0];
      if (made.length === 1 && rec && (await allRunning(rt, rec))) {
        return checkedResult(entry.kind, hostEnvironment(rec));
      }
      await rollBack(rt, entry.id, made);
      return interrupted(ROLLED_BACK);
    }
    case "env.snapshot": {
      // A crash between freeze and thaw leaves the services paused.
      if (environment) await thaw(rt, environment);
      const version = await versionOf(rt, entry.id);
      if (version) return checkedResult(entry.kind, hostVersion(version, rt.host.hostId));
      await rollBack(rt, entry.id, []);
      return interrupted(ROLLED_BACK);
    }
    case "env.verify": {
      // The fork it graded on is its own; the version it snapshotted is kept (a valid snapshot).
      if (environment) await thaw(rt, environment);
      await rollBack(rt, entry.id, await environmentsOf(rt, entry.id));
      return interrupted(ROLLED_BACK);
    }
    default:
      if (environment) await thaw(rt, environment);
      return interrupted(STOPPED);
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
