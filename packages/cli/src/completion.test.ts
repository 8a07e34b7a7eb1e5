import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Entry } from "./command.js";
import { buildCli, denv, oneJson, removeTempDirs, tempDir } from "./testing/harness.js";

/**
 * `denv completion bash|zsh|fish` against the command table: every command, subcommand and
 * flag is in each script where that shell looks for it. bash runs the script (syntax, then
 * completions of typed lines); zsh and fish check syntax when installed.
 */

const scripts = new Map<string, string>();
// Imported after the build: the command table sees @denv/sdk and @denv/spec through their dist.
let COMMANDS: Entry[];
let groups: Entry[];
let command: typeof import("./command.js");

beforeAll(async () => {
  buildCli();
  command = await import("./command.js");
  ({ COMMANDS } = await import("./commands/index.js"));
  groups = COMMANDS.filter((e) => "subcommands" in e);
  for (const shell of ["bash", "zsh", "fish"]) {
    const r = await denv(["completion", shell]);
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    scripts.set(shell, r.stdout);
  }
});

afterAll(removeTempDirs);

/** Every command path with its long flags: ["env fork", ["--version", "--name", ...]]. */
function leaves(entries: readonly Entry[]): Array<[string, string[]]> {
  const { allFlags, COMMON_FLAGS } = command;
  const longs = (flags: object) => Object.keys(flags).map((f) => `--${f}`);
  return entries.flatMap((e): Array<[string, string[]]> => {
    if ("subcommands" in e)
      return e.subcommands.map((c) => [`${e.name} ${command.leafName(c)}`, longs(allFlags(c))]);
    return [[e.name, longs("raw" in e ? COMMON_FLAGS : allFlags(e))]];
  });
}

const script = (shell: string) => scripts.get(shell) ?? "";

/** The script in a file, for shells that check a file's syntax. */
function saved(shell: string): string {
  const file = path.join(tempDir("completion"), `denv.${shell}`);
  writeFileSync(file, script(shell));
  return file;
}

const installed = (shell: string) => spawnSync(shell, ["-c", "true"]).status === 0;

describe("denv completion bash", () => {
  it("lists every command, subcommand and flag", () => {
    const bash = script("bash");
    const top = /compgen -W "([^"$]*)"/.exec(bash)?.[1]?.split(" ") ?? [];
    expect(top).toEqual([...COMMANDS.map((e) => e.name), "--help", "-h", "--version"]);
    for (const g of groups) {
      if (!("subcommands" in g)) continue;
      expect(bash, g.name).toContain(`subs="${g.subcommands.map(command.leafName).join(" ")}"`);
    }
    for (const [leaf, flags] of leaves(COMMANDS)) {
      const name = leaf.split(" ").at(-1) ?? leaf;
      const line = new RegExp(`^ +${name}\\) flags="([^"]*)"`, "m");
      const own = bash
        .slice(bash.indexOf(`    ${leaf.split(" ")[0]})`))
        .match(line)?.[1]
        ?.split(" ");
      expect(own, leaf).toEqual(expect.arrayContaining(flags));
    }
  });

  it("is valid bash and completes what is typed", () => {
    expect(spawnSync("bash", ["-n", saved("bash")], { encoding: "utf8" })).toMatchObject({
      status: 0,
      stderr: "",
    });
    const complete = (...words: string[]) => {
      const line = words.map((w) => `'${w}'`).join(" ");
      const r = spawnSync(
        "bash",
        [
          "-c",
          `source "$1"; COMP_WORDS=(denv ${line}); COMP_CWORD=${words.length}; _denv; printf '%s\\n' "\${COMPREPLY[@]}"`,
          "bash",
          saved("bash"),
        ],
        { encoding: "utf8" },
      );
      expect(r.stderr).toBe("");
      return r.stdout.split("\n").filter((w) => w !== "");
    };
    expect(complete("")).toContain("deploy");
    expect(complete("dep")).toEqual(["deploy", "deployments"]);
    expect(complete("env", "")).toEqual(
      (groups.find((g) => g.name === "env") as { subcommands: Entry[] }).subcommands.map((c) =>
        command.leafName(c as never),
      ),
    );
    expect(complete("env", "fork", "--na")).toEqual(["--name"]);
    // A flag's value and positional arguments are left to file-name completion.
    expect(complete("env", "fork", "--name", "")).toEqual([]);
    expect(complete("deploy", "examples/quickstart", "--env", "alpha", "--pl")).toEqual(["--placement"]);
    expect(complete("--ver")).toEqual(["--version"]);
  });
});

describe("denv completion zsh", () => {
  it("lists every command, subcommand and flag", () => {
    const zsh = script("zsh");
    expect(zsh.startsWith("#compdef denv\n")).toBe(true);
    for (const e of COMMANDS)
      expect(zsh, e.name).toContain(`'${e.name}:${e.summary.replace(/'/g, "'\\''")}'`);
    for (const g of groups) {
      if (!("subcommands" in g)) continue;
      for (const c of g.subcommands) expect(zsh, c.name).toContain(`'${command.leafName(c)}:`);
    }
    for (const [leaf, flags] of leaves(COMMANDS)) {
      for (const flag of flags) expect(zsh, `${leaf} ${flag}`).toContain(`'${flag}:`);
    }
    expect(zsh).toContain("compdef _denv denv");
  });

  it("is valid zsh and completes what is typed", () => {
    // scripts/setup-host installs it: CI never skips.
    expect(installed("zsh"), "zsh is not installed: run scripts/setup-host").toBe(true);
    expect(spawnSync("zsh", ["-n", saved("zsh")], { encoding: "utf8" })).toMatchObject({
      status: 0,
      stderr: "",
    });
    // Without compinit: _describe and _files stand in, printing what they were offered.
    const complete = (...words: string[]) => {
      const r = spawnSync(
        "zsh",
        [
          "-c",
          `compdef() { :; }; source "$1"; shift
_describe() { print -rl -- "\${(@)\${(@P)2}%%:*}"; }
_files() { print files; }
words=(denv "$@"); CURRENT=\${#words}; PREFIX=\${words[-1]}; _denv`,
          "zsh",
          saved("zsh"),
          ...words,
        ],
        { encoding: "utf8" },
      );
      expect(r.stderr).toBe("");
      return r.stdout.split("\n").filter((w) => w !== "");
    };
    expect(complete("")).toEqual(COMMANDS.map((e) => e.name));
    expect(complete("env", "fork", "--")).toContain("--name");
    expect(complete("env", "fork", "--name", "")).toEqual(["files"]);
    expect(complete("deploy", "examples/quickstart", "")).toEqual(["files"]);
  });
});

describe("denv completion fish", () => {
  it("lists every command, subcommand and flag", () => {
    const fish = script("fish");
    for (const e of COMMANDS) expect(fish, e.name).toContain(`-n '__denv_at' -a ${e.name} -d `);
    for (const g of groups) {
      if (!("subcommands" in g)) continue;
      for (const c of g.subcommands)
        expect(fish, c.name).toContain(`-n '__denv_at ${g.name}' -a ${command.leafName(c)} -d `);
    }
    for (const [leaf, flags] of leaves(COMMANDS)) {
      for (const flag of flags)
        expect(fish, `${leaf} ${flag}`).toContain(`-n '__denv_in ${leaf}' -l ${flag.slice(2)}`);
    }
  });

  it("is valid fish and completes what is typed", () => {
    // scripts/setup-host installs it: CI never skips.
    expect(installed("fish"), "fish is not installed: run scripts/setup-host").toBe(true);
    expect(spawnSync("fish", ["-n", saved("fish")], { encoding: "utf8" })).toMatchObject({
      status: 0,
      stderr: "",
    });
    const complete = (line: string) => {
      const r = spawnSync("fish", ["-c", "source $argv[1]; complete -C $argv[2]", saved("fish"), line], {
        encoding: "utf8",
      });
      expect(r.stderr).toBe("");
      return r.stdout
        .split("\n")
        .filter((w) => w !== "")
        .map((w) => w.split("\t")[0]);
    };
    expect(complete("denv ").sort()).toEqual(COMMANDS.map((e) => e.name).sort());
    expect(complete("denv env fork --na")).toEqual(["--name"]);
    expect(complete("denv deploy examples/quickstart --env alpha --pl")).toEqual(["--placement"]);
    expect(complete("denv --ver")).toEqual(["--version"]);
  });
});

describe("denv completion", () => {
  it("refuses a missing or unknown shell with exit 2, and prints {shell, script} with --json", async () => {
    const none = await denv(["completion"]);
    expect(none.status).toBe(2);
    expect(none.stderr).toContain("usage: denv completion bash|zsh|fish");
    const tcsh = await denv(["completion", "tcsh"]);
    expect(tcsh.status).toBe(2);
    expect(tcsh.stderr).toContain("unknown shell 'tcsh': denv completes bash, zsh and fish");
    const json = oneJson((await denv(["completion", "fish", "--json"])).stdout);
    expect(json).toEqual({ shell: "fish", script: script("fish") });
  });
});
