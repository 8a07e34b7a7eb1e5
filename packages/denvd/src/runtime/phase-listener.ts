import type { HostPhaseName, PhaseEvidence } from "@denv/spec";

/**
 * Told when a phase of an operation starts and when it ends (names and evidence schemas from
 * spec's protocol). A phase's evidence leaves the runtime only with its end. `end(..., next)`
 * also starts `next` at the same moment. A phase that fails is not ended: the error is its end.
 */
export interface PhaseListener {
  start(phase: HostPhaseName): void;
  end<P extends HostPhaseName>(phase: P, evidence: PhaseEvidence<P>, next?: HostPhaseName): void;
}

export const noPhases: PhaseListener = { start: () => undefined, end: () => undefined };
