import { DenvError } from "@denv/spec/errors";
import { PhaseEvidence } from "@denv/spec/protocol/evidence";
import { PROTOCOL_VERSION, type ProgressFrame } from "@denv/spec/protocol/frames";
import type { PhaseListener } from "../runtime/phase-listener.js";
import { abortCode, CommandAborted } from "./command-context.js";

/**
 * A command's phase listener: each start and each end goes out as a progress frame, an end with
 * its evidence, which is checked with spec's schema first (the control plane checks it again).
 * `interruptible`: a phase that starts once `signal` is aborted throws, which stops the op there.
 */
export function phaseFrames(
  id: string,
  send: (frame: ProgressFrame) => void,
  signal: AbortSignal,
  interruptible: boolean,
): PhaseListener {
  const stopIfAborted = () => {
    if (interruptible && signal.aborted) throw new CommandAborted(abortCode(signal));
  };
  return {
    start(phase) {
      send({ v: PROTOCOL_VERSION, type: "progress", id, phase });
      stopIfAborted();
    },
    end(phase, evidence, next) {
      const checked = PhaseEvidence[phase].safeParse(evidence);
      if (!checked.success) {
        const issues = checked.error.issues.map((i) => `${i.path.join(".") || "(evidence)"}: ${i.message}`);
        throw new DenvError(
          "internal",
          `denvd built malformed evidence for phase ${phase} (a denvd bug)`,
          issues,
        );
      }
      const frame: ProgressFrame = {
        v: PROTOCOL_VERSION,
        type: "progress",
        id,
        ended: phase,
        evidence: checked.data,
      };
      send(next ? { ...frame, phase: next } : frame);
      if (next) stopIfAborted();
    },
  };
}
