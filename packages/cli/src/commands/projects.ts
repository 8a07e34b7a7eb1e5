import type { CommandSpec, GroupSpec } from "../command.js";
import { table, when } from "../format.js";

const list: CommandSpec = {
  name: "projects list",
  summary: "list the projects the token can see",
  args: "",
  remote: true,
  async run(ctx) {
    ctx.args(0, 0, "");
    const projects = await ctx.client().listProjects();
    ctx.print({ projects }, () =>
      table(
        ["NAME", "KIND", "COMPOSE", "REPO", "CREATED"],
        projects.map((p) => [p.name, p.kind, p.compose_path, p.repo, when(p.created_at)]),
        "no projects; create one with: denv projects create NAME",
      ),
    );
    return 0;
  },
};

const create: CommandSpec = {
  name: "projects create",
  summary: "create a project (admin)",
  args: "NAME [--kind KIND] [--repo URL] [--compose-path PATH]",
  flags: {
    kind: {
      type: "string",
      value: "KIND",
      description: "rl-environment (the default: protections on) or service",
    },
    repo: {
      type: "string",
      value: "URL",
      description: "a git URL to deploy from (deploy --ref then picks the ref)",
    },
    "compose-path": {
      type: "string",
      value: "PATH",
      description: "the compose file inside the project (default compose.yaml)",
    },
  },
  remote: true,
  async run(ctx) {
    const [name = ""] = ctx.args(1, 1, "NAME");
    const kind = ctx.string("kind");
    if (kind !== undefined && kind !== "rl-environment" && kind !== "service") {
      throw ctx.usage(`--kind is rl-environment or service, not '${kind}'`);
    }
    const project = await ctx.client().createProject({
      name,
      kind,
      repo: ctx.string("repo"),
      compose_path: ctx.string("compose-path"),
    });
    ctx.print(project, `project ${project.name} created (${project.kind})`);
    return 0;
  },
};

const rm: CommandSpec = {
  name: "projects rm",
  summary: "delete a project that has no environments (admin)",
  args: "NAME",
  remote: true,
  async run(ctx) {
    const [name = ""] = ctx.args(1, 1, "NAME");
    await ctx.client().deleteProject(name);
    ctx.print({ deleted: name }, `project ${name} deleted`);
    return 0;
  },
};

const connectGithub: CommandSpec = {
  name: "projects connect-github",
  summary: "connect the project to a GitHub repository: each push to its branch deploys alpha",
  args: "OWNER/REPO [--project PROJECT] [--branch BRANCH]",
  description: `The control plane's GitHub App must be installed on the repository
(docs/how-to/push-to-deploy.md). Pushes to BRANCH (default: the repository's default branch)
deploy alpha at the pushed commit and report a check run "denv / alpha" on it.`,
  flags: {
    branch: {
      type: "string",
      value: "BRANCH",
      description: "the branch whose pushes deploy (default: the repository's default branch)",
    },
  },
  remote: true,
  async run(ctx) {
    const [repository = ""] = ctx.args(1, 1, "OWNER/REPO");
    if (!/^[^/\s]+\/[^/\s]+$/.test(repository)) throw ctx.usage(`expected OWNER/REPO, not '${repository}'`);
    const project = ctx.project();
    const c = await ctx.client().connectGithub(project, repository, ctx.string("branch"));
    ctx.print(
      c,
      `project ${c.project} connected to ${c.repository}: pushes to ${c.branch} deploy ${c.project}/alpha`,
    );
    return 0;
  },
};

export const projects: GroupSpec = {
  name: "projects",
  summary: "list, create and delete projects; connect one to GitHub",
  subcommands: [list, create, rm, connectGithub],
};
