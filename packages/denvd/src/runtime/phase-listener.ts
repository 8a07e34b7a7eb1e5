/** Told when a phase of an operation starts (names from spec's Phases), with its evidence when it ends. */
export type PhaseListener = (phase: string, evidence?: Record<string, unknown>) => void;

export const noPhases: PhaseListener = () => undefined;
