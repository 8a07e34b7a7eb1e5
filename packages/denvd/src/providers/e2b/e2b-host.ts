import { DenvError } from "@denv/spec";
import { PROVIDER } from "./check-plan.js";
import type { E2bRecords } from "./e2b-records.js";
import { type E2bSandbox, loadE2b, type sdkOptions } from "./e2b-sdk.js";
import type { EgressCanary } from "./egress-probe.js";

/** What the E2B runtime's parts share: who the host is, how it reaches E2B, what it records. */
export interface E2bHost {
  readonly hostId: string;
  /** The SDK's connection options (the user's API key, E2B's URLs). */
  readonly api: ReturnType<typeof sdkOptions>;
  readonly records: E2bRecords;
  /** Commands whose sandboxes are being made and not recorded yet: gc leaves them alone. */
  readonly inFlight: Set<string>;
  /** Every sandbox is created with this timeout, and renewed while its record lives. */
  readonly timeoutMs: number;
  /** Listeners the egress probe connects to from inside each sandbox (protection 5). */
  readonly canaries: readonly EgressCanary[];
  log(line: string): void;
}

/** E2B's errors as denv's: a missing sandbox or file, a refused key, or E2B failing (502). */
export async function provider<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof DenvError) throw err;
    const sdk = await loadE2b();
    const message = err instanceof Error ? err.message : String(err);
    if (err instanceof sdk.SandboxNotFoundError) throw new DenvError("not_found", `${PROVIDER}: ${message}`);
    if (err instanceof sdk.AuthenticationError)
      throw new DenvError("unauthorized", `${PROVIDER}: ${message}`);
    if (err instanceof sdk.FileNotFoundError) throw new DenvError("not_found", `${PROVIDER}: ${message}`);
    throw new DenvError("docker", `${PROVIDER}: ${message}`);
  }
}

/** The SDK connected to a recorded sandbox (a paused one is resumed), with the host's timeout. */
export async function connectSandbox(host: E2bHost, sandboxId: string): Promise<E2bSandbox> {
  const { Sandbox } = await loadE2b();
  return provider(() => Sandbox.connect(sandboxId, { ...host.api, timeoutMs: host.timeoutMs }));
}

/** Every running recorded sandbox's timeout set again (E2B kills one when it passes; a paused one has none). */
export async function renewTimeouts(host: E2bHost): Promise<void> {
  const { Sandbox } = await loadE2b();
  for (const rec of await host.records.environments()) {
    if (rec.paused) continue;
    await Sandbox.setTimeout(rec.sandboxId, host.timeoutMs, host.api).catch((e: unknown) =>
      host.log(`${rec.id}: sandbox ${rec.sandboxId} not renewed: ${String(e)}`),
    );
  }
}
