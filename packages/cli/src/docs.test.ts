import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildCli, denv, removeTempDirs, repo } from "./testing/harness.js";

/**
 * docs/reference/cli.md against the built CLI's own help: every command and subcommand that
 * `denv --help` lists has a `### denv ...` section and every section names a real command;
 * every flag a command's help lists is in its section (or in the shared table of its `##`
 * part), and every flag a section's table lists is one the command takes.
 */

const doc = readFileSync(path.join(repo, "docs/reference/cli.md"), "utf8");

interface Section {
  /** The `### denv ...` section's own text. */
  own: string;
  /** The text of its `##` part before the first `###` (shared flags of a group). */
  shared: string;
}

function sections(): Map<string, Section> {
  const out = new Map<string, Section>();
  let shared = "";
  let current: { name: string; lines: string[] } | undefined;
  const flush = () => {
    if (current !== undefined) out.set(current.name, { own: current.lines.join("\n"), shared });
    current = undefined;
  };
  for (const line of doc.split("\n")) {
    if (line.startsWith("## ")) {
      flush();
      shared = "";
    } else if (line.startsWith("### denv ")) {
      flush();
      current = { name: line.slice("### denv ".length).trim(), lines: [] };
    } else if (current !== undefined) current.lines.push(line);
    else shared += `${line}\n`;
  }
  flush();
  return out;
}

/** `  name   summary` rows under a `heading:` line of a help text. */
function rows(help: string, heading: string): string[] {
  const start = help.indexOf(`\n${heading}\n`);
  if (start === -1) return [];
  const block = help.slice(start + heading.length + 2).split("\n\n")[0] ?? "";
  return block
    .split("\n")
    .map((l) => /^ {2}(\S+)/.exec(l)?.[1])
    .filter((x): x is string => x !== undefined);
}

/** The commands `denv --help` lists under its `... COMMANDS` headings (`  name:   summary`). */
function commandRows(help: string): string[] {
  return [...help.matchAll(/^[A-Z ]+ COMMANDS\n((?: {2}\S+: .*\n)+)/gm)].flatMap((m) =>
    (m[1] ?? "")
      .trimEnd()
      .split("\n")
      .map((l) => l.trim().split(":")[0] as string),
  );
}

/** The long flags of a help text's `flags:` block (validate's help lists them unheaded). */
function ownFlags(help: string): string[] {
  const block = help.includes("\nflags:\n")
    ? (help.split("\nflags:\n")[1]?.split("\n\n")[0] ?? "")
    : (help.split("\nglobal flags:\n")[0] ?? "");
  return [...block.matchAll(/^ {2}(?:-\w, )?(--[a-z-]+)/gm)].map((m) => m[1] as string);
}

/** Flags in the rows of a section's tables (`| \`--flag ...\` |`). */
function tableFlags(text: string): string[] {
  return [...text.matchAll(/^\| `(?:-\w`, `)?(--[a-z-]+)/gm)].map((m) => m[1] as string);
}

let helps: Map<string, string>;
let top: string;

beforeAll(async () => {
  buildCli();
  top = (await denv(["--help"])).stdout;
  const commands = commandRows(top);
  expect(commands.length).toBeGreaterThan(10);
  const groups = await Promise.all(
    commands.map(async (c) => [c, (await denv([c, "--help"])).stdout] as const),
  );
  const leaves: string[] = [];
  for (const [name, help] of groups) {
    const subs = rows(help, "subcommands:");
    if (subs.length === 0) leaves.push(name);
    else leaves.push(...subs.map((s) => `${name} ${s}`));
  }
  helps = new Map(
    await Promise.all(
      leaves.map(async (leaf) => [leaf, (await denv([...leaf.split(" "), "--help"])).stdout] as const),
    ),
  );
});

afterAll(removeTempDirs);

describe("docs/reference/cli.md", () => {
  it("documents every command and subcommand, and only those", () => {
    expect([...sections().keys()].sort()).toEqual([...helps.keys()].sort());
  });

  it("shows `denv --help` as it is", () => {
    const block = doc.split("\n## `denv --help`\n")[1]?.split("```text\n")[1]?.split("```")[0];
    expect(block).toBe(top);
  });

  it("documents every flag of each command in its section", () => {
    const docs = sections();
    for (const [leaf, help] of helps) {
      const section = docs.get(leaf);
      const text = `${section?.own ?? ""}\n${section?.shared ?? ""}`;
      for (const flag of ownFlags(help)) expect(text, `denv ${leaf} ${flag}`).toContain(`\`${flag}`);
      for (const flag of tableFlags(section?.own ?? "")) {
        expect([...ownFlags(help), "--json", "--help"], `denv ${leaf}: documented ${flag}`).toContain(flag);
      }
    }
  });

  it("documents the global flags, the configuration and the exit codes", () => {
    const global = doc.split("## Global flags")[1]?.split("\n## ")[0] ?? "";
    const top = helps.get("projects list") ?? "";
    for (const flag of top.split("global flags:")[1]?.matchAll(/(--[a-z-]+)/g) ?? []) {
      expect(global, flag[1]).toContain(`\`${flag[1]}`);
    }
    for (const word of ["DENV_URL", "DENV_TOKEN", "DENV_PROJECT", "DENV_CONFIG", "XDG_CONFIG_HOME", "0600"]) {
      expect(doc).toContain(word);
    }
    // Exit-code table rows (the formatter pads the cells).
    for (const code of [0, 1, 2, 124, 125, 126, 127])
      expect(doc).toMatch(new RegExp(`^\\| ${code} +\\|`, "m"));
  });
});
