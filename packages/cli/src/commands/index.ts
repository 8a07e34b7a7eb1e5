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
import { portForward } from "./port-forward.js";
import { projects } from "./projects.js";
import { sandboxes } from "./sandboxes.js";
import { targets } from "./targets.js";
import { up } from "./up.js";
import { validate } from "./validate.js";
import { verify } from "./verify.js";
import { versions } from "./versions.js";

/** Every command, in the order `denv --help` lists them: one module each. */
export const COMMANDS: Entry[] = [
  up,
  down,
  login,
  config,
  projects,
  deploy,
  deployments,
  env,
  versions,
  exec,
  cp,
  logs,
  portForward,
  verify,
  sandboxes,
  exportCmd,
  importCmd,
  targets,
  hosts,
  joinToken,
  { name: "validate", summary: "check a compose file and print the normalized plan", raw: validate },
  completion(() => COMMANDS),
];
