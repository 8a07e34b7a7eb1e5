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

/** A fenced code block of a docs page and the marker comment on the line before it (if any). */
export interface CodeBlock {
  /** 1-based line of the opening fence. */
  line: number;
  /** The fence's info string (`sh`, `sh example`, `python`, ...; empty for none). */
  info: string;
  /** The last non-empty line before the fence, when it is an HTML comment. */
  marker: string | undefined;
  /** Whether the block follows another block's closing fence with only blank lines between. */
  followsBlock: boolean;
}

/** Every fenced block of a markdown text (``` or ~~~ fences, at any indentation). */
export function codeBlocks(text: string): CodeBlock[] {
  const lines = text.split("\n");
  const out: CodeBlock[] = [];
  let lastNonEmpty = "";
  let lastWasFenceEnd = false;
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i] as string;
    const open = /^\s*(`{3,}|~{3,})(.*)$/.exec(l);
    if (open) {
      const fence = open[1] as string;
      const prev = lastNonEmpty.trim();
      out.push({
        line: i + 1,
        info: (open[2] as string).trim(),
        marker: /^<!--.*-->$/.test(prev) ? prev : undefined,
        followsBlock: lastWasFenceEnd,
      });
      const close = new RegExp(`^\\s*${fence[0] === "`" ? "`" : "~"}{${fence.length},}\\s*$`);
      for (i++; i < lines.length && !close.test(lines[i] as string); i++);
      lastNonEmpty = "```";
      lastWasFenceEnd = true;
      continue;
    }
    if (l.trim() !== "") {
      lastNonEmpty = l;
      lastWasFenceEnd = false;
    }
  }
  return out;
}
