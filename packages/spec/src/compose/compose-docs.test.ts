import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { DefaultCaps, RefusedServiceKeys } from "../messages.js";
import { validateCompose } from "./validate-compose.js";
import { ACCEPTED_SERVICE_KEYS } from "./validate-service.js";

/** docs/reference/compose.md must not drift from the validator: its examples run here. */
const page = readFileSync(
  fileURLToPath(new URL("../../../../docs/reference/compose.md", import.meta.url)),
  "utf8",
);

interface Example {
  expect: "ok" | "refused";
  yaml: string;
  /** The ```text block right after a refused example: its exact refusals. */
  refusals?: string[];
  line: number;
}

function examples(markdown: string): Example[] {
  const out: Example[] = [];
  const marker = /<!-- validate: (ok|refused) -->\s*```yaml\n([\s\S]*?)```\n(?:\s*```text\n([\s\S]*?)```)?/g;
  for (const m of markdown.matchAll(marker)) {
    const example: Example = {
      expect: m[1] === "ok" ? "ok" : "refused",
      yaml: m[2] ?? "",
      line: markdown.slice(0, m.index).split("\n").length,
    };
    if (m[3] !== undefined) example.refusals = m[3].trimEnd().split("\n");
    out.push(example);
  }
  return out;
}

/** The examples name files they do not ship (build contexts, tests folders): they all exist here. */
const ctx = {
  env: {},
  readFile: () => undefined,
  exists: () => true,
  projectName: "example",
  source: "compose.yaml",
};

describe("docs/reference/compose.md", () => {
  const found = examples(page);

  it("has validated examples of both kinds, refused ones with their refusals", () => {
    expect(found.filter((e) => e.expect === "ok").length).toBeGreaterThanOrEqual(2);
    const refused = found.filter((e) => e.expect === "refused");
    expect(refused.length).toBeGreaterThanOrEqual(1);
    for (const example of refused) expect(example.refusals, `line ${example.line}`).toBeDefined();
  });

  for (const example of found) {
    it(`the example at line ${example.line} is ${example.expect === "ok" ? "accepted" : "refused"}`, () => {
      const result = validateCompose(example.yaml, ctx);
      if (example.expect === "ok") {
        expect(result.ok ? [] : result.refusals).toEqual([]);
      } else {
        expect(result.ok).toBe(false);
        if (!result.ok && example.refusals !== undefined) expect(result.refusals).toEqual(example.refusals);
      }
    });
  }

  // Table rows as the formatter pads them: "| `key`   | ... |".
  const row = (key: string) =>
    page.split("\n").find((line) => new RegExp(`^\\|\\s*\`${key}\`\\s*\\|`).test(line));

  it("lists every accepted service key", () => {
    for (const key of ACCEPTED_SERVICE_KEYS) expect(row(key), key).toBeDefined();
  });

  it("lists every refused service key with its exact reason", () => {
    for (const [key, reason] of Object.entries(RefusedServiceKeys)) expect(row(key), key).toContain(reason);
  });

  it("states the default caps", () => {
    expect(DefaultCaps).toEqual({ memoryBytes: 2 * 1024 ** 3, cpus: 2, pids: 1024 });
    expect(page).toContain("2 GiB of memory, 2 CPUs, 1024 pids");
  });
});
