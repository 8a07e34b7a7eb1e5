import { DenvError, type HostEnvironment, ProviderMessages, type Version } from "@denv/spec";
import type { SandboxRecords } from "./sandbox-records.js";

/**
 * What a provider runtime answers from its records alone, the same for every provider: what the
 * host holds, one environment or version by id (`not_found` naming the host), and the logs it
 * cannot read. A provider's runtime extends it with the verbs that reach the provider.
 */
export abstract class SandboxRuntime<
  E extends { id: string; testsTar?: string },
  V extends { id: string; project: string; number: number; testsTar?: string },
> {
  abstract get hostId(): string;
  /** The provider's name, as refusals say it. */
  protected abstract readonly provider: string;
  protected abstract get records(): SandboxRecords<E, V>;
  protected abstract reportEnvironment(rec: E): HostEnvironment;
  protected abstract reportVersion(v: V): Version;

  list(): Promise<{ environments: HostEnvironment[]; versions: Version[] }> {
    return this.records.report(
      (r) => this.reportEnvironment(r),
      (v) => this.reportVersion(v),
    );
  }

  async has(envId: string): Promise<boolean> {
    return (await this.records.getEnvironment(envId)) !== undefined;
  }

  async version(versionId: string): Promise<Version> {
    return this.reportVersion(await this.requireVersion(versionId));
  }

  async logs(_envId: string): Promise<{ stdout: string; stderr: string }> {
    throw new DenvError(
      "conflict",
      ProviderMessages.unsupportedVerb(
        this.provider,
        "logs",
        "a sandbox runs no service process of denv's to read the logs of",
      ),
    );
  }

  /** Refuses (`conflict`) stop or start on a provider that has no pause. */
  protected refuseNoPause(verb: "stop" | "start"): never {
    throw new DenvError(
      "conflict",
      ProviderMessages.unsupportedVerb(this.provider, verb, ProviderMessages.noPause(this.provider)),
    );
  }

  /** Refuses (`conflict`) an id the host already holds an environment under. */
  protected async refuseExisting(id: string, message: string): Promise<void> {
    if (await this.records.getEnvironment(id)) throw new DenvError("conflict", message);
  }

  protected requireEnvironment(envId: string): Promise<E> {
    return this.records.requireEnvironment(envId, this.hostId);
  }

  protected requireVersion(versionId: string): Promise<V> {
    return this.records.requireVersion(versionId, this.hostId);
  }
}
