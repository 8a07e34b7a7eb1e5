import { describe, expect, it } from "vitest";
import { ComposeNotes, ComposeReasons, Refusal } from "../messages.js";
import { accept, refusals, service } from "./compose-fixture.js";

const svc = Refusal.serviceKey;
const R = ComposeReasons;

describe("depends_on", () => {
  it("orders services dependencies first, stable by file order", () => {
    const plan = accept(`
services:
  main: {image: x, depends_on: [api, cache]}
  api: {image: x, depends_on: {db: {condition: service_healthy}, migrate: {condition: service_completed_successfully}}}
  cache: {image: x}
  migrate: {image: x, depends_on: [db]}
  db: {image: x}
`);
    expect(plan.services.map((s) => s.name)).toEqual(["cache", "db", "migrate", "api", "main"]);
    expect(service(plan, "api").dependsOn).toEqual([
      { service: "db", condition: "service_healthy" },
      { service: "migrate", condition: "service_completed_successfully" },
    ]);
  });

  it("refuses cycles once each, and unknown services", () => {
    expect(
      refusals(`
services:
  main: {image: x, depends_on: [a]}
  a: {image: x, depends_on: [b]}
  b: {image: x, depends_on: [a, ghost]}
  c: {image: x, depends_on: [c]}
`),
    ).toEqual([
      svc("b", "depends_on", R.undefinedService("ghost")),
      svc("a", "depends_on", R.dependencyCycle(["a", "b", "a"])),
      "service 'c': 'depends_on' is refused: dependency cycle c -> c",
    ]);
  });

  it("refuses an unknown condition and ignores optional missing services with a note", () => {
    expect(
      refusals(
        "services:\n  a: {image: x, depends_on: {b: {condition: up}}}\n  b: {image: x}\nx-denv: {agent: a}\n",
      ),
    ).toEqual([
      svc(
        "a",
        "depends_on.b.condition",
        R.expected(
          "one of service_started, service_healthy, service_completed_successfully",
          'the string "up"',
        ),
      ),
    ]);
    const plan = accept("services:\n  a: {image: x, depends_on: {gone: {required: false, restart: true}}}\n");
    expect(plan.notes).toEqual([
      ComposeNotes.dependsOnRestartIgnored("a", "gone"),
      ComposeNotes.optionalDependencyMissing("a", "gone"),
    ]);
  });
});
