import { Labels } from "@denv/spec";
import type { HostRuntime, Settled } from "../../runtime/host-runtime.js";
import { templatePrefix } from "../e2b/build-template.js";
import { type DaytonaHost, provider } from "./daytona-host.js";
import { hostEnvironment, hostVersion } from "./daytona-reports.js";
import type { DaytonaSandbox } from "./daytona-sdk.js";

/** The sandboxes denv made whose labels hold `labels`, every page of them. */
async function sandboxesWith(host: DaytonaHost, labels: Record<string, string>): Promise<DaytonaSandbox[]> {
  const out: DaytonaSandbox[] = [];
  for await (const sbx of host.client.list({ labels: { [Labels.managed]: "true", ...labels } }))
    out.push(sbx);
  return out;
}

/**
 * Deletes the sandboxes that carry this host's id and no record owns (nor a command still making
 * them, a verify's own included), the snapshots named as this host's versions that no version
 * records, and the tests archives that no record names.
 */
export async function gc(host: DaytonaHost): Promise<{ removed: string[] }> {
  const owned = new Set((await host.records.environments()).map((r) => r.sandboxId));
  const removed: string[] = [];
  const errors: unknown[] = [];
  for (const sbx of await sandboxesWith(host, { [Labels.host]: host.hostId })) {
    const cmd = sbx.labels[Labels.command];
    if (owned.has(sbx.id) || (cmd !== undefined && host.inFlight.has(cmd))) continue;
    await sbx.delete().then(
      () => removed.push(`sandbox ${sbx.id}`),
      (e: unknown) => errors.push(e),
    );
  }
  const kept = new Set((await host.records.versions()).map((v) => v.snapshot));
  const prefix = templatePrefix(host.hostId);
  const page = await host.client.snapshot.list({ limit: 200 });
  for (const s of page.items) {
    if (!s.name.startsWith(prefix) || !/-v\d+-[0-9a-f]{8}$/.test(s.name) || kept.has(s.name)) continue;
    await host.client.snapshot.delete(s).then(
      () => removed.push(`snapshot ${s.name}`),
      (e: unknown) => errors.push(e),
    );
  }
  removed.push(...(await host.records.sweepTests(host.inFlight)));
  if (errors.length > 0) throw new AggregateError(errors, `daytona gc: ${errors.length} removal(s) failed`);
  return { removed };
}

/**
 * Everything this host holds at Daytona removed, for `denvd release` when its target goes: every
 * environment's sandbox and every version's snapshot (through the runtime's own verbs, records
 * with them), what gc finds, and the snapshots it built for services.
 */
export async function releaseAll(
  host: DaytonaHost,
  runtime: { destroy(envId: string): Promise<void>; deleteVersion(versionId: string): Promise<void> },
): Promise<{ removed: string[] }> {
  const removed = await host.records.releaseRecorded(runtime, {
    environment: (rec) => `sandbox ${rec.sandboxId}`,
    version: (v) => `snapshot ${v.snapshot}`,
  });
  removed.push(...(await gc(host)).removed);
  const prefix = templatePrefix(host.hostId);
  for (const s of (await host.client.snapshot.list({ limit: 200 })).items) {
    if (!s.name.startsWith(prefix)) continue;
    await provider(() => host.client.snapshot.delete(s));
    removed.push(`snapshot ${s.name}`);
  }
  return { removed };
}

/**
 * What a crash left of a command: a deploy or fork whose sandbox was recorded and is still there
 * is done; one that made a sandbox and did not record it has it deleted. A snapshot whose version
 * was recorded is done; otherwise gc deletes what it left (its snapshot is named as this host's).
 */
export async function settle(
  host: DaytonaHost,
  command: Parameters<HostRuntime["settle"]>[0],
): Promise<Settled> {
  switch (command.kind) {
    case "env.deploy":
    case "env.fork":
    case "env.restore": {
      const made = (await host.records.environments()).filter((r) => r.command === command.id);
      const rec = made[0];
      if (made.length === 1 && rec) {
        const there = await host.client.get(rec.sandboxId).then(
          () => true,
          () => false,
        );
        if (there) return { done: true, result: hostEnvironment(host.hostId, rec) };
      }
      for (const r of made) await host.records.deleteEnvironment(r.id);
      for (const sbx of await sandboxesWith(host, {
        [Labels.host]: host.hostId,
        [Labels.command]: command.id,
      })) {
        await provider(() => sbx.delete());
      }
      return { done: false, rolledBack: true };
    }
    case "env.snapshot": {
      const v = (await host.records.versions()).find((x) => x.command === command.id);
      if (v) return { done: true, result: hostVersion(host.hostId, v) };
      await gc(host);
      return { done: false, rolledBack: true };
    }
    default:
      return { done: false, rolledBack: false };
  }
}
