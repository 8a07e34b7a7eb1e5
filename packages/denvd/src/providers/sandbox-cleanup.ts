import type { HostEnvironment, Version } from "@denv/spec";
import { Labels } from "@denv/spec/labels";
import type { HostRuntime, Settled } from "../runtime/host-runtime.js";

/** A sandbox at the provider, as gc and settle see it. */
export interface ProviderSandbox {
  id: string;
  labels: Record<string, string>;
  remove(): Promise<void>;
}

/** A snapshot at the provider named as one of this host's versions. */
export interface ProviderSnapshot {
  /** What a version record keeps of it (compared with `snapshotOf`). */
  key: string;
  /** How the removal is reported ("snapshot <name>"). */
  name: string;
  remove(): Promise<void>;
}

/** What the cleanup of a provider runtime needs of its host (the E2B and Daytona hosts both are). */
export interface CleanupHost<E, V> {
  readonly hostId: string;
  /** Commands under way: what they are making is theirs, not garbage. */
  readonly inFlight: ReadonlySet<string>;
  readonly records: {
    environments(): Promise<E[]>;
    versions(): Promise<V[]>;
    deleteEnvironment(id: string): Promise<void>;
    sweepTests(inFlight: ReadonlySet<string>): Promise<string[]>;
  };
}

/** What the cleanup needs of a provider: its sandboxes and snapshots, and how records name them. */
export interface CleanupProvider<E, V> {
  /** For the error gc throws ("e2b gc: ..."). */
  name: string;
  /** The sandboxes denv made whose labels hold `labels` (and denv's managed label), every page. */
  sandboxes(labels: Record<string, string>): Promise<ProviderSandbox[]>;
  /** Whether the sandbox is still there (a recorded environment's, after a crash). */
  exists(sandboxId: string): Promise<boolean>;
  /** The snapshots named as this host's versions, recorded or not. */
  versionSnapshots(): Promise<ProviderSnapshot[]>;
  /** The sandbox an environment's record names (or, one per service, every one). */
  sandboxOf(rec: E): string | readonly string[];
  /** The snapshot a version's record names (or, one per service, every one). */
  snapshotOf(v: V): string | readonly string[];
  environmentReport(hostId: string, rec: E): HostEnvironment;
  versionReport(hostId: string, v: V): Version;
}

/**
 * Removes the sandboxes that carry this host's id and no record owns (nor a command still making
 * them, a verify's own included), the snapshots named as this host's versions that no version
 * records, and the tests archives that no record names. What one removal fails at does not stop
 * the others; gc throws once, with all of them.
 */
export async function collectGarbage<E, V>(
  host: CleanupHost<E, V>,
  p: CleanupProvider<E, V>,
): Promise<{ removed: string[] }> {
  const owned = new Set((await host.records.environments()).flatMap((r) => p.sandboxOf(r)));
  const removed: string[] = [];
  const errors: unknown[] = [];
  for (const sbx of await p.sandboxes({ [Labels.host]: host.hostId })) {
    const cmd = sbx.labels[Labels.command];
    if (owned.has(sbx.id) || (cmd !== undefined && host.inFlight.has(cmd))) continue;
    await sbx.remove().then(
      () => removed.push(`sandbox ${sbx.id}`),
      (e: unknown) => errors.push(e),
    );
  }
  const kept = new Set((await host.records.versions()).flatMap((v) => p.snapshotOf(v)));
  for (const s of await p.versionSnapshots()) {
    if (kept.has(s.key)) continue;
    await s.remove().then(
      () => removed.push(`snapshot ${s.name}`),
      (e: unknown) => errors.push(e),
    );
  }
  removed.push(...(await host.records.sweepTests(host.inFlight)));
  if (errors.length > 0) throw new AggregateError(errors, `${p.name} gc: ${errors.length} removal(s) failed`);
  return { removed };
}

/**
 * What a crash left of a command: a deploy or fork whose sandbox was recorded and is still there
 * is done; one that made a sandbox and did not record it has it removed. A snapshot whose version
 * was recorded is done; otherwise gc removes what it left (its snapshot is named as this host's).
 */
export async function settleCommand<E extends { command: string; id: string }, V extends { command: string }>(
  host: CleanupHost<E, V>,
  p: CleanupProvider<E, V>,
  command: Parameters<HostRuntime["settle"]>[0],
): Promise<Settled> {
  switch (command.kind) {
    case "env.deploy":
    case "env.fork":
    case "env.restore": {
      const made = (await host.records.environments()).filter((r) => r.command === command.id);
      const rec = made[0];
      if (made.length === 1 && rec && (await allExist(p, [p.sandboxOf(rec)].flat()))) {
        return { done: true, result: p.environmentReport(host.hostId, rec) };
      }
      for (const r of made) await host.records.deleteEnvironment(r.id);
      for (const sbx of await p.sandboxes({ [Labels.host]: host.hostId, [Labels.command]: command.id })) {
        await sbx.remove();
      }
      return { done: false, rolledBack: true };
    }
    case "env.snapshot": {
      const v = (await host.records.versions()).find((x) => x.command === command.id);
      if (v) return { done: true, result: p.versionReport(host.hostId, v) };
      await collectGarbage(host, p);
      return { done: false, rolledBack: true };
    }
    default:
      return { done: false, rolledBack: false };
  }
}

/** Whether every one of the sandboxes is still there. */
async function allExist<E, V>(p: CleanupProvider<E, V>, ids: readonly string[]): Promise<boolean> {
  for (const id of ids) if (!(await p.exists(id))) return false;
  return true;
}
