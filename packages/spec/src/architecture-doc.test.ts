import { existsSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const root = new URL("../../../", import.meta.url);
const doc = readFileSync(new URL("docs/explanation/architecture.md", root), "utf8");

describe("docs/explanation/architecture.md", () => {
  const paths = [
    ...new Set([...doc.matchAll(/`((?:packages|python)\/[^`\s]+\.(?:ts|py))`/g)].map((m) => m[1] as string)),
  ];

  it("names the files of the command flow", () => {
    expect(paths.length).toBeGreaterThan(15);
  });

  it.each(paths)("%s exists", (path) => {
    expect(existsSync(new URL(path, root))).toBe(true);
  });
});
