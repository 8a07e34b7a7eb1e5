import path from "node:path";
import type { CommandSpec, GroupSpec } from "../command.js";
import { fields } from "../format.js";
import { isDir } from "../harbor-task.js";
import { importHarborTask, projectFromDir } from "../import-harbor-task.js";

/** `denv import harbor DIR`: a denv project folder from a Harbor task folder (no control plane). */
const harbor: CommandSpec = {
  name: "import harbor",
  summary: "write a denv project folder from a Harbor task folder",
  args: "DIR [--out OUT] [--project P] [--agent-sandbox gvisor|none]",
  description: `
Reads DIR/task.toml, DIR/instruction.md, DIR/environment (a Dockerfile, a docker-compose.yaml with
service main, or [environment] docker_image), DIR/tests/test.sh and DIR/solution, and writes OUT
(default DIR-denv; missing or empty): compose.yaml with x-denv (agent: service main in the task's
workdir, root in gVisor's kernel as Harbor's agent is root, or uid 1000 with --agent-sandbox none;
egress: the task's network_mode, public as the host's package mirrors through denvd's proxy;
verifier: the task's image built again, root unless [verifier] user says otherwise, which copies the
agent's work back from /submission and runs bash /tests/test.sh), the environment
folder with a generated Dockerfile.denv, tests/, solution/, instruction.md and task.toml. Deploy OUT
with 'denv deploy OUT' and grade an episode with 'denv verify'. What cannot be mapped is refused in one
line naming the file and the key.`,
  flags: {
    out: { type: "string", value: "OUT", description: "the project folder to write (default DIR-denv)" },
    project: {
      type: "string",
      value: "P",
      description: "the compose name, the project 'denv deploy OUT' uses (default: DIR's name)",
    },
    "agent-sandbox": {
      type: "string",
      value: "S",
      description: "gvisor (default: the agent is root inside gVisor) or none (the agent is uid 1000)",
    },
  },
  remote: false,
  async run(ctx) {
    const [dir = ""] = ctx.args(1, 1, "DIR");
    const src = path.resolve(ctx.io.cwd, dir);
    if (!isDir(src)) throw ctx.usage(`${dir} is not a folder`);
    const outArg = ctx.string("out") ?? `${dir.replace(/\/+$/, "")}-denv`;
    const out = path.resolve(ctx.io.cwd, outArg);
    const project = ctx.string("project") ?? projectFromDir(src);
    const sandbox = ctx.string("agent-sandbox") ?? "gvisor";
    if (sandbox !== "gvisor" && sandbox !== "none") {
      throw ctx.usage(`--agent-sandbox ${sandbox}: expected gvisor or none`);
    }
    const r = importHarborTask(
      src,
      out,
      project,
      { dir: dir.replace(/\/+$/, ""), out: outArg },
      { agentSandbox: sandbox },
    );
    ctx.print(r, () =>
      fields([
        ["directory", r.directory],
        ["project", r.project],
        ["services", r.services.join(" ")],
        ["workdir", r.workdir],
        ["files", r.files.join(" ")],
        ["next", `denv deploy ${outArg}`],
      ]),
    );
    return 0;
  },
};

export const importCmd: GroupSpec = {
  name: "import",
  summary: "import a task from another framework as a denv project folder",
  subcommands: [harbor],
};
