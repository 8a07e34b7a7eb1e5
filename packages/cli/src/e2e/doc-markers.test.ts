import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { codeBlocks } from "./doc-blocks.js";
import { repo } from "./stack.js";

/**
 * No code block under docs/ can drift unnoticed: each one says, on the line before it, which test
 * keeps it true, or why none can run it. Fast, no Docker: it reads the pages and the tests.
 *
 * - `<!-- run -->` before a ```sh block: docs.test.ts runs the page's blocks (runPage("PAGE"));
 * - `<!-- run: TAG -->`: the test of that setup runs them (runnableLines("PAGE", "TAG"));
 * - `<!-- validate: ok|refused -->` before a ```yaml block: a test validates it (compose-docs),
 *   the ```text block right after a refused one being its refusals;
 * - `<!-- checked: FILE[, FILE] -->`: those test files (which name the page) check the block
 *   another way (a --help text compared, a JSON example parsed with its schema, ...);
 * - `<!-- not run: REASON -->`: nothing can run it here, and why.
 */

const DOCS = path.join(repo, "docs");
const SKIP = new Set(["node_modules", "dist", ".venv", "__pycache__", ".git"]);

function walk(dir: string, keep: (file: string) => boolean): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (SKIP.has(entry.name)) continue;
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...walk(file, keep));
    else if (keep(file)) out.push(file);
  }
  return out;
}

const pages = walk(DOCS, (f) => f.endsWith(".md"))
  .map((f) => path.relative(DOCS, f))
  .sort();
const testFiles = [
  ...walk(path.join(repo, "packages"), (f) => /\.test\.tsx?$/.test(f)),
  ...walk(path.join(repo, "bench"), (f) => /\.test\.ts$/.test(f)),
  ...walk(path.join(repo, "python", "tests"), (f) => f.endsWith(".py")),
];
// This file names markers and calls in its own expectations: it proves nothing about a page.
const testText = new Map(
  testFiles.filter((f) => f !== fileURLToPath(import.meta.url)).map((f) => [f, readFileSync(f, "utf8")]),
);
const docsTest = readFileSync(path.join(repo, "packages/cli/src/e2e/docs.test.ts"), "utf8");

/** Whether a file names the page: `how-to/x.md`, Python's `"how-to" / "x.md"`, or `"x.md"` (a reader of one folder). */
const names = (text: string, page: string) => {
  const [dir, file] = page.split("/");
  return (
    text.includes(page) ||
    (file !== undefined && (text.includes(`"${dir}" / "${file}"`) || text.includes(`"${file}"`)))
  );
};

/** What is wrong with one block's marker, or undefined when it holds. */
export function problem(
  page: string,
  block: ReturnType<typeof codeBlocks>[number],
  previous?: string,
): string | undefined {
  const m = block.marker;
  if (m === undefined) {
    if (block.followsBlock && previous === "<!-- validate: refused -->" && block.info === "text")
      return undefined;
    return "has no marker: precede it with <!-- run -->, <!-- run: TAG -->, <!-- validate: ok|refused -->, <!-- checked: TEST_FILE --> or <!-- not run: REASON -->";
  }
  if (m === "<!-- run -->") {
    if (block.info !== "sh") return `is marked ${m} but is a '${block.info}' block (only sh blocks run)`;
    if (!docsTest.includes(`runPage("${page}")`))
      return `is marked ${m} but packages/cli/src/e2e/docs.test.ts does not run the page (runPage("${page}"))`;
    return undefined;
  }
  const tag = /^<!-- run: ([\w-]+) -->$/.exec(m);
  if (tag) {
    if (block.info !== "sh") return `is marked ${m} but is a '${block.info}' block (only sh blocks run)`;
    const call = `runnableLines("${page}", "${tag[1]}")`;
    if (![...testText.values()].some((t) => t.includes(call)))
      return `is marked ${m} but no test calls ${call}`;
    return undefined;
  }
  if (/^<!-- validate: (ok|refused) -->$/.test(m)) {
    if (block.info !== "yaml")
      return `is marked ${m} but is a '${block.info}' block (only yaml is validated)`;
    const validator = [...testText.values()].some(
      (t) => t.includes("validate: (ok|refused)") && names(t, page),
    );
    return validator ? undefined : `is marked ${m} but no test validates the examples of ${page}`;
  }
  const checked = /^<!-- checked: (.+) -->$/.exec(m);
  if (checked) {
    for (const file of (checked[1] as string).split(",").map((f) => f.trim())) {
      const text = testText.get(path.join(repo, file));
      if (text === undefined)
        return `is marked checked by ${file}, which is not a test file of this repository`;
      if (!names(text, page)) return `is marked checked by ${file}, which does not read ${page}`;
    }
    return undefined;
  }
  const notRun = /^<!-- not run: (.+) -->$/.exec(m);
  if (notRun) return (notRun[1] as string).trim().length >= 8 ? undefined : `is marked ${m} without a reason`;
  return `has an unknown marker ${m}`;
}

describe("every code block under docs/ is run, checked, or says why not", () => {
  it("finds the pages", () => {
    expect(pages).toContain("tutorials/quickstart.md");
    expect(pages.length).toBeGreaterThan(20);
  });

  it.each(pages)("%s", (page) => {
    const blocks = codeBlocks(readFileSync(path.join(DOCS, page), "utf8"));
    const problems: string[] = [];
    blocks.forEach((b, i) => {
      const p = problem(page, b, blocks[i - 1]?.marker);
      if (p !== undefined) problems.push(`docs/${page}:${b.line}: the ${b.info || "plain"} block ${p}`);
    });
    expect(problems).toEqual([]);
  });
});

describe("the checker", () => {
  const block = (marker: string | undefined, info = "sh", followsBlock = false) => ({
    line: 1,
    info,
    marker,
    followsBlock,
  });

  it("refuses an unmarked block, a run tag no test runs, a checked file that does not read the page", () => {
    expect(problem("how-to/x.md", block(undefined))).toMatch(/^has no marker/);
    expect(problem("how-to/connect-a-target.md", block("<!-- run: nosuchtag -->"))).toBe(
      'is marked <!-- run: nosuchtag --> but no test calls runnableLines("how-to/connect-a-target.md", "nosuchtag")',
    );
    expect(problem("how-to/connect-a-target.md", block("<!-- run: hosts -->"))).toBeUndefined();
    expect(problem("how-to/x.md", block("<!-- run -->"))).toMatch(/does not run the page/);
    expect(problem("how-to/verify.md", block("<!-- run -->", "python"))).toMatch(/only sh blocks run/);
    expect(
      problem(
        "reference/cli.md",
        block("<!-- checked: packages/spec/src/protections-doc.test.ts -->", "text"),
      ),
    ).toBe(
      "is marked checked by packages/spec/src/protections-doc.test.ts, which does not read reference/cli.md",
    );
    expect(problem("reference/cli.md", block("<!-- checked: nope.test.ts -->"))).toMatch(/not a test file/);
    expect(problem("reference/cli.md", block("<!-- not run: -->"))).toMatch(/^has an unknown marker/);
    expect(problem("reference/cli.md", block("<!-- not run: x -->"))).toMatch(/without a reason/);
    expect(problem("reference/cli.md", block("<!-- frobnicate -->"))).toMatch(/^has an unknown marker/);
  });

  it("takes a refused example's refusals block after it", () => {
    expect(
      problem("reference/compose.md", block(undefined, "text", true), "<!-- validate: refused -->"),
    ).toBe(undefined);
    expect(problem("reference/compose.md", block(undefined, "text", true), "<!-- validate: ok -->")).toMatch(
      /^has no marker/,
    );
  });

  it("reads fences and the marker before each", () => {
    const blocks = codeBlocks(
      "text\n<!-- run -->\n```sh\ndenv up\n```\n\n```text\nout\n```\n  ```python\n  x = 1\n  ```\n",
    );
    expect(blocks).toEqual([
      { line: 3, info: "sh", marker: "<!-- run -->", followsBlock: false },
      { line: 7, info: "text", marker: undefined, followsBlock: true },
      { line: 10, info: "python", marker: undefined, followsBlock: true },
    ]);
  });
});
