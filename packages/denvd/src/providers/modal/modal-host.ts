import { DenvError } from "@denv/spec";
import type { Sandbox } from "modal";
import type { ModalHost } from "./modal-materialize.js";
import type { ModalRecords } from "./modal-records.js";

export { PROVIDER } from "./modal-dockerfile.js";

/** What the Modal runtime's parts share beyond a sandbox's making: its records and commands under way. */
export interface ModalBridge extends ModalHost {
  readonly records: ModalRecords;
  /** Commands whose sandboxes or snapshots are being made and not recorded yet: gc leaves them alone. */
  readonly inFlight: Set<string>;
  /** The SDK's handle of a sandbox by id (it calls nothing until used), one per sandbox. */
  sandbox(sandboxId: string): Promise<Sandbox>;
  /** Forgets a sandbox's handle once the sandbox is gone. */
  forget(sandboxId: string): void;
}

/** gRPC status codes the SDK passes through from Modal's API. */
const UNAUTHENTICATED = 16;
const PERMISSION_DENIED = 7;
const NOT_FOUND = 5;

/**
 * Modal's errors as denv's: a missing sandbox or image (`not_found`), a refused token
 * (`unauthorized`), anything else Modal failing (`docker`, 502), in one line with Modal's words.
 */
export async function modal<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof DenvError) throw err;
    const e = err as { name?: string; code?: number; details?: string; message?: string };
    const words = `Modal: ${String(e.details ?? e.message ?? err).split("\n")[0]}`;
    if (e.name === "NotFoundError" || e.code === NOT_FOUND) throw new DenvError("not_found", words);
    if (e.code === UNAUTHENTICATED || e.code === PERMISSION_DENIED)
      throw new DenvError("unauthorized", words);
    throw new DenvError("docker", words);
  }
}
