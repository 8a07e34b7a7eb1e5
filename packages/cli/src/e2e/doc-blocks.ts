import { readFileSync } from "node:fs";
import path from "node:path";
import { repo } from "./stack.js";

/**
 * The runnable commands of a docs page: each line of a ```sh block preceded by `<!-- run -->`
 * (or `<!-- run: TAG -->`, for blocks that need another setup than the single-host stack, such
 * as several hosts). A line must exit 0 unless it ends with `# exits N`.
 */
export function runnableLines(page: string, tag?: string): Array<{ line: string; code: number }> {
  const text = readFileSync(path.join(repo, "docs", page), "utf8");
  const marker = tag === undefined ? "<!-- run -->" : `<!-- run: ${tag} -->`;
  const out: Array<{ line: string; code: number }> = [];
  for (const block of text.split(`${marker}\n\`\`\`sh\n`).slice(1)) {
    const body = block.slice(0, block.indexOf("```"));
    for (const line of body.split("\n").filter((l) => l.trim() !== "")) {
      const code = /# exits (\d+)/.exec(line);
      out.push({ line, code: code ? Number(code[1]) : 0 });
    }
  }
  return out;
}
