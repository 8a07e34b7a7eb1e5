import { type ProgressFrame, parseFrame } from "@denv/spec";
import { describe, expect, it } from "vitest";
import type { PhaseListener } from "../runtime/phase-listener.js";
import { phaseFrames } from "./phase-frames.js";

/** No Docker: the frames a command's phase listener sends, as the control plane parses them. */

function listener(interruptible = false, signal = new AbortController().signal) {
  const sent: ProgressFrame[] = [];
  const phases = phaseFrames(
    "cmd-1",
    (f) => sent.push(parseFrame(JSON.stringify(f)) as ProgressFrame),
    signal,
    interruptible,
  );
  return { sent, phases };
}

describe("phaseFrames", () => {
  it("sends a start, then the end with its evidence; an end may start the next phase", () => {
    const { sent, phases } = listener();
    phases.start("freeze");
    phases.end("freeze", { paused: ["db", "app"] });
    phases.end("thaw", { frozen_ms: 41 }, "record");
    expect(sent.map(({ phase, ended, evidence }) => ({ phase, ended, evidence }))).toEqual([
      { phase: "freeze", ended: undefined, evidence: undefined },
      { phase: undefined, ended: "freeze", evidence: { paused: ["db", "app"] } },
      { phase: "record", ended: "thaw", evidence: { frozen_ms: 41 } },
    ]);
  });

  it("refuses evidence that is not its phase's shape before anything leaves the host", () => {
    const { sent, phases } = listener();
    const loose = phases as unknown as { end(p: string, e: unknown): void };
    expect(() => loose.end("thaw", { frozenMs: 41 })).toThrow(
      "denvd built malformed evidence for phase thaw",
    );
    expect(sent).toEqual([]);
  });

  it("stops an interruptible op at the next phase once its signal is aborted", () => {
    const abort = new AbortController();
    const { sent, phases }: { sent: ProgressFrame[]; phases: PhaseListener } = listener(true, abort.signal);
    phases.start("build");
    abort.abort("cancelled");
    phases.end("build", { digests: {} });
    expect(() => phases.start("place")).toThrow("cancelled by the control plane");
    expect(sent.map((f) => f.phase ?? f.ended)).toEqual(["build", "build", "place"]);
  });
});
