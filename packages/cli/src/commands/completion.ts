import type { CommandSpec, Entry } from "../command.js";
import { completionScript, SHELLS, type Shell } from "../completion.js";

/** `denv completion SHELL`; takes the command table lazily, as it is itself one of its entries. */
export function completion(entries: () => readonly Entry[]): CommandSpec {
  return {
    name: "completion",
    summary: "print a shell completion script (bash, zsh or fish)",
    args: "bash|zsh|fish",
    description: `
Prints a completion script for the shell, generated from denv's own command table: commands,
subcommands and flags (arguments complete as file names). Load it in the current shell or save
it where the shell looks for completions:

  source <(denv completion bash)          # bash; or save it in /etc/bash_completion.d/denv
  source <(denv completion zsh)           # zsh, after compinit; or save it as _denv in $fpath
  denv completion fish | source           # fish; or save it as ~/.config/fish/completions/denv.fish

--json prints {shell, script}.`,
    remote: false,
    async run(ctx) {
      const [shell] = ctx.args(1, 1, "SHELL (bash, zsh or fish)");
      if (!(SHELLS as readonly string[]).includes(shell ?? ""))
        throw ctx.usage(`unknown shell '${shell}': denv completes bash, zsh and fish`);
      const script = completionScript(shell as Shell, entries());
      ctx.print({ shell, script }, script);
      return 0;
    },
  };
}
