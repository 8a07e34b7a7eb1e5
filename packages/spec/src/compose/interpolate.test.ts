// biome-ignore-all lint/suspicious/noTemplateCurlyInString: compose interpolation syntax (${VAR}) is what these tests are about
import { describe, expect, it } from "vitest";
import { ComposeNotes, ComposeReasons, Refusal } from "../messages.js";
import { accept, refusals, service } from "./compose-fixture.js";

const svc = Refusal.serviceKey;
const R = ComposeReasons;

describe("interpolation", () => {
  const env = { SET: "value", EMPTY: "" };
  const cases: [string, string][] = [
    ["$SET", "value"],
    ["${SET}", "value"],
    ["${UNSET:-fallback}", "fallback"],
    ["${EMPTY:-fallback}", "fallback"],
    ["${EMPTY-fallback}", ""],
    ["${UNSET-fallback}", "fallback"],
    ["${SET:+alt}", "alt"],
    ["${EMPTY:+alt}", ""],
    ["${EMPTY+alt}", "alt"],
    ["${UNSET:-${SET}}", "value"],
    ["${SET:?never}", "value"],
    ["cost: $$5 and $${SET}", "cost: $5 and ${SET}"],
    ["a${SET}b$SET-c", "avaluebvalue-c"],
  ];
  for (const [input, output] of cases) {
    it(`expands ${input}`, () => {
      const plan = accept(`services:\n  app:\n    image: alpine\n    environment:\n      V: '${input}'\n`, {
        env,
      });
      expect(service(plan, "app").environment.V).toBe(output);
    });
  }

  it("substitutes an empty string for an unset variable, with a note", () => {
    const plan = accept("services:\n  app:\n    image: alpine\n    command: echo ${NOPE}\n");
    expect(service(plan, "app").command).toBe("echo ");
    expect(plan.notes).toEqual([ComposeNotes.variableUnset("NOPE")]);
  });

  it("refuses a required variable that is missing, naming the key", () => {
    expect(
      refusals("services:\n  app:\n    image: ${IMAGE:?set IMAGE}\n    command: [a, '${X?}']\n"),
    ).toEqual([
      svc("app", "image", R.requiredVariable("IMAGE", "set IMAGE")),
      svc("app", "command[1]", "required variable 'X' is missing a value"),
    ]);
    expect(refusals("services:\n  app:\n    image: ${E:?}\n", { env: { E: "" } })[0]).toBe(
      svc("app", "image", R.requiredVariable("E", "")),
    );
  });

  it("refuses an invalid format", () => {
    expect(refusals("services:\n  app:\n    image: alpine\n    command: echo $ 1\n")).toEqual([
      svc("app", "command", R.invalidInterpolation("echo $ 1")),
    ]);
    expect(refusals("services:\n  app:\n    image: 'a${'\n")[0]).toBe(
      svc("app", "image", R.invalidInterpolation("a${")),
    );
  });

  it("interpolates values, not keys, and leaves x-* anchors alone", () => {
    const plan = accept(
      "x-raw: ${NOT_NEEDED:?}\nservices:\n  app:\n    image: alpine\n    labels:\n      ${K}: v\n",
    );
    expect(service(plan, "app").labels).toEqual({ "${K}": "v" });
  });

  it("interpolates project name, volumes and x-denv", () => {
    const plan = accept(
      "name: ${P}\nservices:\n  app:\n    image: a\nx-denv:\n  agent: {workdir: '${W}'}\n",
      {
        env: { P: "proj", W: "/w" },
      },
    );
    expect(plan.name).toBe("proj");
    expect(plan.agent.workdir).toBe("/w");
  });

  it("takes a bare environment variable from the context, and notes one that is not set", () => {
    const plan = accept("services:\n  app:\n    image: a\n    environment: [SET, MISSING, 'EQ=a=b']\n", {
      env,
    });
    expect(service(plan, "app").environment).toEqual({ SET: "value", EQ: "a=b" });
    expect(plan.notes).toEqual([ComposeNotes.environmentUnset("app", "MISSING")]);
    const mapped = accept("services:\n  app:\n    image: a\n    environment: {SET: , N: 1, B: true}\n", {
      env,
    });
    expect(service(mapped, "app").environment).toEqual({ SET: "value", N: "1", B: "true" });
  });

  it("coerces interpolated numbers and booleans", () => {
    const plan = accept("services:\n  app:\n    image: a\n    cpus: ${C}\n    init: ${I}\n", {
      env: { C: "0.25", I: "true" },
    });
    expect(service(plan, "app").resources.cpus).toBe(0.25);
    expect(service(plan, "app").init).toBe(true);
  });
});
