import type { Entry } from "../command.js";
import { completion } from "./completion.js";
import { config } from "./config.js";
import { cp } from "./cp.js";
import { deploy } from "./deploy.js";
import { deployments } from "./deployments.js";
import { down } from "./down.js";
import { env } from "./env.js";
import { exec } from "./exec.js";
import { exportCmd } from "./export.js";
import { hosts } from "./hosts.js";
import { importCmd } from "./import.js";
import { joinToken } from "./join-token.js";
import { login } from "./login.js";
import { logs } from "./logs.js";
import { pools } from "./pools.js";
import { portForward } from "./port-forward.js";
import { projects } from "./projects.js";
import { episode, replay, replays } from "./replay.js";
import { sandboxes } from "./sandboxes.js";
import { targets } from "./targets.js";
import { up } from "./up.js";
import { validate } from "./validate.js";
import { verify } from "./verify.js";
import { versions } from "./versions.js";

/** A part of `denv --help`: a heading, as gh writes them, and its commands in order. */
export interface HelpSection {
  heading: string;
  commands: Entry[];
}

/**
 * Every command, in the parts and the order `denv --help` lists them: one module each. The
 * grouping is the table's, not the modules': it is how the help presents them.
 */
export const SECTIONS: HelpSection[] = [
  { heading: "CORE COMMANDS", commands: [up, down, deploy, exec, verify] },
  {
    heading: "ENVIRONMENT COMMANDS",
    commands: [env, versions, sandboxes, pools, cp, logs, portForward, episode, replay, replays],
  },
  { heading: "PROJECT COMMANDS", commands: [projects, deployments] },
  { heading: "HOST COMMANDS", commands: [targets, hosts, joinToken] },
  {
    heading: "TASK COMMANDS",
    commands: [
      { name: "validate", summary: "check a compose file and print the normalized plan", raw: validate },
      importCmd,
      exportCmd,
    ],
  },
  { heading: "ADDITIONAL COMMANDS", commands: [login, config, completion(() => COMMANDS)] },
];

export const COMMANDS: Entry[] = SECTIONS.flatMap((s) => s.commands);
