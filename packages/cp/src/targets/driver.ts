import {
  type CommandKind,
  type CommandPayload,
  type CommandResult,
  ControlPlaneMessages,
  DenvError,
  type EnvironmentNeeds,
  missingCapability,
  TARGET_KINDS,
  type TargetKindName,
  type TargetKindSpec,
  TargetMessages,
} from "@denv/spec";
import type { HostHub, SendOptions, StreamCall } from "../hub/hub.js";
import type { TargetRecord } from "../store/records.js";

/**
 * A target kind's driver: how the control plane creates, reaches and removes environments on
 * targets of that kind, and how the target grows. Chosen per target by its kind (TargetDrivers).
 * `hosts` is the reference driver: every operation is a command to a denvd host over the hub.
 * Provisioned kinds (hetzner) are denvd hosts too, on machines the driver creates, so they reuse
 * it and add `provide` and `reconcile`.
 */
export interface TargetDriver {
  readonly kind: TargetKindName;
  /** The kind's row of the capability table, and what enforces its protections. */
  readonly spec: TargetKindSpec;

  createEnvironment(
    hostId: string,
    payload: CommandPayload<"env.deploy">,
    opts: SendOptions,
  ): Promise<CommandResult<"env.deploy">>;
  fork(
    hostId: string,
    payload: CommandPayload<"env.fork">,
    opts: SendOptions,
  ): Promise<CommandResult<"env.fork">>;
  snapshot(
    hostId: string,
    payload: CommandPayload<"env.snapshot">,
    opts: SendOptions,
  ): Promise<CommandResult<"env.snapshot">>;
  destroyEnvironment(
    hostId: string,
    environment: string,
    opts: SendOptions,
  ): Promise<CommandResult<"env.destroy">>;
  probe(hostId: string, environment: string, opts: SendOptions): Promise<CommandResult<"env.probe_egress">>;
  exec(
    hostId: string,
    payload: (stream: string) => CommandPayload<"env.exec">,
    opts: StreamOptions,
  ): StreamCall<"env.exec">;
  putFiles(
    hostId: string,
    payload: (stream: string) => CommandPayload<"env.files.put">,
    opts: StreamOptions,
  ): StreamCall<"env.files.put">;
  getFiles(
    hostId: string,
    payload: (stream: string) => CommandPayload<"env.files.get">,
    opts: StreamOptions,
  ): StreamCall<"env.files.get">;
  connect(
    hostId: string,
    payload: (stream: string) => CommandPayload<"env.connect">,
    opts: StreamOptions,
  ): StreamCall<"env.connect">;

  /**
   * Placement found no host of `target` that takes an environment: a provisioned driver creates a
   * machine (within max_machines) and says so; undefined when the driver cannot grow the target.
   */
  provide?(target: TargetRecord): Promise<string>;
  /** Brings the provider's machines and the store's records of them together (the reconcile loop). */
  reconcile?(target: TargetRecord): Promise<void>;
  /** A target of this kind is being removed: deletes what the driver created for it (inside `exclusive`). */
  removeTarget?(target: TargetRecord): Promise<void>;
  /**
   * Runs `fn` while no `provide` or `reconcile` of `target` runs, and none starts: a removal
   * counts the machines and deletes them with nothing created meanwhile.
   */
  exclusive?<T>(target: string, fn: () => Promise<T>): Promise<T>;
}

export interface StreamOptions {
  id: string;
  timeoutMs: number;
  bulk?: boolean;
}

/** The driver of every kind whose machines run denvd: each operation is one host command. */
export class DenvdDriver implements TargetDriver {
  readonly spec: TargetKindSpec;

  constructor(
    readonly kind: TargetKindName,
    protected readonly hub: Pick<HostHub, "send" | "stream">,
  ) {
    this.spec = TARGET_KINDS[kind];
  }

  createEnvironment(hostId: string, payload: CommandPayload<"env.deploy">, opts: SendOptions) {
    return this.hub.send(hostId, "env.deploy", payload, opts);
  }
  fork(hostId: string, payload: CommandPayload<"env.fork">, opts: SendOptions) {
    return this.hub.send(hostId, "env.fork", payload, opts);
  }
  snapshot(hostId: string, payload: CommandPayload<"env.snapshot">, opts: SendOptions) {
    return this.hub.send(hostId, "env.snapshot", payload, opts);
  }
  destroyEnvironment(hostId: string, environment: string, opts: SendOptions) {
    return this.hub.send(hostId, "env.destroy", { environment }, opts);
  }
  probe(hostId: string, environment: string, opts: SendOptions) {
    return this.hub.send(hostId, "env.probe_egress", { environment }, opts);
  }
  exec(hostId: string, payload: (stream: string) => CommandPayload<"env.exec">, opts: StreamOptions) {
    return this.hub.stream(hostId, "env.exec", payload, opts);
  }
  putFiles(
    hostId: string,
    payload: (stream: string) => CommandPayload<"env.files.put">,
    opts: StreamOptions,
  ) {
    return this.hub.stream(hostId, "env.files.put", payload, opts);
  }
  getFiles(
    hostId: string,
    payload: (stream: string) => CommandPayload<"env.files.get">,
    opts: StreamOptions,
  ) {
    return this.hub.stream(hostId, "env.files.get", payload, opts);
  }
  connect(hostId: string, payload: (stream: string) => CommandPayload<"env.connect">, opts: StreamOptions) {
    return this.hub.stream(hostId, "env.connect", payload, opts);
  }
}

/** The drivers by kind: a kind without one has no targets (creating one is refused). */
export class TargetDrivers {
  private readonly byKind = new Map<TargetKindName, TargetDriver>();

  register(driver: TargetDriver): this {
    this.byKind.set(driver.kind, driver);
    return this;
  }

  has(kind: TargetKindName): boolean {
    return this.byKind.has(kind);
  }

  for(kind: TargetKindName): TargetDriver {
    const d = this.byKind.get(kind);
    if (!d) throw new DenvError("invalid_request", ControlPlaneMessages.targetKindNotAvailable(kind));
    return d;
  }

  all(): TargetDriver[] {
    return [...this.byKind.values()];
  }

  /**
   * Refuses, before anything is created, an environment that needs a capability the target's kind
   * lacks: one line naming the capability (TargetMessages.capabilityMissing).
   */
  checkCapabilities(target: TargetRecord, needs: EnvironmentNeeds): void {
    const missing = missingCapability(target.kind, needs);
    if (missing) {
      throw new DenvError(
        "invalid_request",
        TargetMessages.capabilityMissing(target.name, target.kind, missing.capability, missing.why),
      );
    }
  }
}

export type { CommandKind };
