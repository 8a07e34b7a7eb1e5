import { Labels } from "@denv/spec/labels";
import type { HostRuntime, Settled } from "../../runtime/host-runtime.js";
import { templatePrefix } from "./build-template.js";
import { type E2bHost, provider } from "./e2b-host.js";
import { hostEnvironment, hostVersion } from "./e2b-reports.js";
import { loadE2b } from "./e2b-sdk.js";

/**
 * Kills the sandboxes that carry this host's id and no record owns (nor a command still making
 * them), deletes the snapshots named as this host's that no version records, and the tests
 * archives that no record names.
 */
export async function gc(host: E2bHost): Promise<{ removed: string[] }> {
  const { Sandbox } = await loadE2b();
  const owned = new Set((await host.records.environments()).map((r) => r.sandboxId));
  const removed: string[] = [];
  const errors: unknown[] = [];
  for (const info of await sandboxesWith(host, { [Labels.host]: host.hostId })) {
    const cmd = info.metadata[Labels.command];
    if (owned.has(info.sandboxId) || (cmd !== undefined && host.inFlight.has(cmd))) continue;
    await Sandbox.kill(info.sandboxId, host.api).then(
      () => removed.push(`sandbox ${info.sandboxId}`),
      (e: unknown) => errors.push(e),
    );
  }
  const kept = new Set((await host.records.versions()).map((v) => v.snapshotId));
  const prefix = templatePrefix(host.hostId);
  const pages = Sandbox.listSnapshots(host.api);
  const snapshots = [];
  while (pages.hasNext) snapshots.push(...(await pages.nextItems()));
  for (const s of snapshots) {
    const ours = s.names.some((n) => (n.split("/").pop() ?? "").startsWith(prefix) && /-v\d+-/.test(n));
    if (!ours || kept.has(s.snapshotId)) continue;
    await Sandbox.deleteSnapshot(s.snapshotId, host.api).then(
      () => removed.push(`snapshot ${s.snapshotId}`),
      (e: unknown) => errors.push(e),
    );
  }
  removed.push(...(await host.records.sweepTests(host.inFlight)));
  if (errors.length > 0) throw new AggregateError(errors, `e2b gc: ${errors.length} removal(s) failed`);
  return { removed };
}

/**
 * Everything this host holds at E2B removed, for `denvd release` when its target goes: every
 * environment's sandbox and every version's snapshot (through the runtime's own verbs, records
 * with them), what gc finds, and the templates it built.
 */
export async function releaseAll(
  host: E2bHost,
  runtime: { destroy(envId: string): Promise<void>; deleteVersion(versionId: string): Promise<void> },
): Promise<{ removed: string[] }> {
  const removed = await host.records.releaseRecorded(runtime, {
    environment: (rec) => `sandbox ${rec.sandboxId}`,
    version: (v) => `snapshot ${v.snapshotId}`,
  });
  removed.push(...(await gc(host)).removed);
  for (const alias of await host.records.templates()) {
    await provider(() => deleteTemplate(host, alias));
    await host.records.deleteTemplate(alias);
    removed.push(`template ${alias}`);
  }
  return { removed };
}

/**
 * What a crash left of a command: a deploy or fork whose sandbox was recorded and still runs is
 * done; one that made a sandbox and did not record it has it killed. A snapshot whose version
 * was recorded is done; otherwise gc deletes what it left (its snapshot is named as this host's).
 */
export async function settle(host: E2bHost, command: Parameters<HostRuntime["settle"]>[0]): Promise<Settled> {
  const { Sandbox } = await loadE2b();
  switch (command.kind) {
    case "env.deploy":
    case "env.fork":
    case "env.restore": {
      const made = (await host.records.environments()).filter((r) => r.command === command.id);
      const rec = made[0];
      if (made.length === 1 && rec) {
        const running = await Sandbox.getInfo(rec.sandboxId, host.api).then(
          () => true,
          () => false,
        );
        if (running) return { done: true, result: hostEnvironment(host.hostId, rec) };
      }
      for (const r of made) await host.records.deleteEnvironment(r.id);
      for (const info of await sandboxesWith(host, {
        [Labels.host]: host.hostId,
        [Labels.command]: command.id,
      })) {
        await Sandbox.kill(info.sandboxId, host.api);
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

/** The sandboxes denv made whose metadata holds `metadata`, every page of them. */
async function sandboxesWith(host: E2bHost, metadata: Record<string, string>) {
  const { Sandbox } = await loadE2b();
  const pages = Sandbox.list({
    ...host.api,
    // Paused ones too (a stopped environment's): they are kept at E2B, and cost storage.
    query: { metadata: { [Labels.managed]: "true", ...metadata }, state: ["running", "paused"] },
  });
  const out = [];
  while (pages.hasNext) out.push(...(await pages.nextItems()));
  return out;
}

/** Deletes a template at E2B (DELETE /templates/{templateID}, which takes its alias too). */
export async function deleteTemplate(host: E2bHost, alias: string): Promise<void> {
  const { ApiClient, ConnectionConfig } = await loadE2b();
  const res = await new ApiClient(new ConnectionConfig(host.api)).api.DELETE("/templates/{templateID}", {
    params: { path: { templateID: alias } },
  });
  // Already gone is what was asked.
  if (res.error && res.response.status !== 404) {
    throw new Error(`template ${alias}: ${res.response.status} ${JSON.stringify(res.error)}`);
  }
}
