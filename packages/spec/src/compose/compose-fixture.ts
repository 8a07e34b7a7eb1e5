import type { Plan, ServicePlan } from "../plan.js";
import type { ComposeContext } from "./compose-context.js";
import { type ValidateResult, validateCompose } from "./validate-compose.js";

/** The compose tests' world: what a ComposeContext reads, given inline. */
export interface ComposeFixture {
  env?: Record<string, string>;
  /** Project-relative files (their folders exist too). */
  files?: Record<string, string>;
  projectName?: string;
}

function context(fixture: ComposeFixture = {}): ComposeContext {
  const files = fixture.files ?? {};
  return {
    env: fixture.env ?? {},
    readFile: (rel) => (Object.hasOwn(files, rel) ? files[rel] : undefined),
    exists: (rel) =>
      rel === "." || Object.hasOwn(files, rel) || Object.keys(files).some((f) => f.startsWith(`${rel}/`)),
    projectName: fixture.projectName ?? "demo",
    source: "compose.yaml",
  };
}

/** The plan of a file the test expects accepted; throws with the refusals otherwise. */
export function accept(yaml: string, fixture?: ComposeFixture): Plan {
  const result = validateCompose(yaml, context(fixture));
  if (!result.ok) throw new Error(`expected the file to be accepted, got:\n${result.refusals.join("\n")}`);
  return result.plan;
}

/** The refusals of a file the test expects refused; throws when it is accepted. */
export function refusals(yaml: string, fixture?: ComposeFixture): string[] {
  const result: ValidateResult = validateCompose(yaml, context(fixture));
  if (result.ok) throw new Error("expected refusals, the file was accepted");
  return result.refusals;
}

export function service(plan: Plan, name: string): ServicePlan {
  const found = plan.services.find((s) => s.name === name);
  if (found === undefined) throw new Error(`no service ${name}`);
  return found;
}
