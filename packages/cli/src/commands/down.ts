import path from "node:path";
import type { CommandSpec } from "../command.js";
import { binaries, defaultDataDir, readPid, removePid, runs, stackPaths, stop } from "../local-stack.js";

export const down: CommandSpec = {
  name: "down",
  summary: "stop the control plane and denvd that 'denv up' started",
  args: "[--data-dir DIR] [--grace SEC]",
  description: `
Stops denvd, then the control plane, started by 'denv up' with the same data folder: SIGTERM,
then SIGKILL after the grace period. Removes their pid files; data, logs and the config file
stay. --json prints {data_dir, stopped: {cp, denvd}} (each a pid, or null when not running).`,
  flags: {
    "data-dir": {
      type: "string",
      value: "DIR",
      description: "the data folder given to 'denv up' (default ~/.local/share/denv)",
    },
    grace: {
      type: "string",
      value: "SEC",
      description: "seconds to wait after SIGTERM before SIGKILL (default 10)",
    },
  },
  remote: false,
  async run(ctx) {
    ctx.args(0, 0, "");
    const dataDir = path.resolve(ctx.io.cwd, ctx.string("data-dir") ?? defaultDataDir(ctx.io.env));
    const graceMs = (ctx.seconds("grace") ?? 10) * 1000;
    const paths = stackPaths(dataDir);
    const bins = binaries(ctx.io.env);
    const stopped: { cp: number | null; denvd: number | null } = { cp: null, denvd: null };
    // denvd first: it reports to the control plane while it shuts down.
    for (const role of ["denvd", "cp"] as const) {
      const pid = readPid(paths.pid[role]);
      if (pid !== undefined && runs(pid, bins[role])) {
        const how = await stop(pid, bins[role], graceMs);
        ctx.progress(`${role === "cp" ? "control plane" : "denvd"} (pid ${pid}) ${how}`);
        stopped[role] = pid;
      }
      removePid(paths.pid[role]);
    }
    const nothing = stopped.cp === null && stopped.denvd === null;
    ctx.print(
      { data_dir: dataDir, stopped },
      nothing ? `denv is not running (data folder ${dataDir})` : "denv is down",
    );
    return 0;
  },
};
