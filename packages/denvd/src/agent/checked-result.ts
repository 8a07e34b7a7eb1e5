import { type CommandKind, CommandResults } from "@denv/spec";
import type { Outcome } from "./journal.js";

/**
 * A handler's result, checked with spec's schema of its kind before it is journalled and sent
 * (the control plane parses it with the same schema). A result that does not match is a denvd
 * bug: the command fails with `internal`, naming the fields.
 */
export function checkedResult(kind: CommandKind, result: unknown): Outcome {
  const checked = CommandResults[kind].safeParse(result);
  if (checked.success) return { ok: true, result: checked.data };
  const fields = checked.error.issues
    .map((i) => `${i.path.join(".") || "(result)"}: ${i.message}`)
    .join("; ");
  return {
    ok: false,
    error: { code: "internal", message: `denvd built a malformed ${kind} result (a denvd bug): ${fields}` },
  };
}
