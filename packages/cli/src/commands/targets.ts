import { TARGET_SETTINGS, TargetKind } from "@denv/spec";
import type { CommandSpec, GroupSpec } from "../command.js";
import { table, when } from "../format.js";

const capabilityList = (caps: Record<string, boolean>) =>
  Object.entries(caps)
    .filter(([, on]) => on)
    .map(([name]) => name)
    .join(",");

const ls: CommandSpec = {
  name: "targets ls",
  summary: "list the targets environments can run on",
  args: "",
  remote: true,
  async run(ctx) {
    ctx.args(0, 0, "");
    const targets = await ctx.client().listTargets();
    ctx.print({ targets }, () =>
      table(
        ["NAME", "KIND", "CAPABILITIES", "CREATED"],
        targets.map((t) => [t.name, t.kind, capabilityList(t.capabilities), when(t.created_at)]),
        "no targets",
      ),
    );
    return 0;
  },
};

const kinds: CommandSpec = {
  name: "targets kinds",
  summary: "the target kinds: capabilities, settings, and whether this control plane has each",
  args: "",
  remote: true,
  async run(ctx) {
    ctx.args(0, 0, "");
    const all = await ctx.client().listTargetKinds();
    ctx.print({ kinds: all }, () =>
      table(
        ["KIND", "FAMILY", "AVAILABLE", "CAPABILITIES", "SETTINGS", "CREDENTIALS"],
        all.map((k) => [
          k.kind,
          k.family,
          k.available ? "yes" : "no",
          capabilityList(k.capabilities),
          k.settings.join(","),
          k.credentials.map((c) => `${c.name} (${c.env})`).join(","),
        ]),
        "no kinds",
      ),
    );
    return 0;
  },
};

const add: CommandSpec = {
  name: "targets add",
  summary:
    "add a target: hosts you join, a cloud account denv creates machines in, or a sandbox provider (admin)",
  args: "KIND NAME [SETTING=VALUE]...",
  description: `
KIND is ${TargetKind.options.join(", ")}. Settings are KEY=VALUE (denv targets kinds lists each
kind's); credentials are read from the environment, never from arguments: hetzner's api_token from
HCLOUD_TOKEN, aws's from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, e2b's api_key from
E2B_API_KEY, daytona's and daytona-docker's from DAYTONA_API_KEY, prime's from PRIME_API_KEY,
modal's token_id and token_secret from MODAL_TOKEN_ID and MODAL_TOKEN_SECRET. The control plane
stores them encrypted and never shows them again.`,
  remote: true,
  async run(ctx) {
    const [kindArg = "", name = "", ...pairs] = ctx.args(
      2,
      Number.POSITIVE_INFINITY,
      "KIND NAME [SETTING=VALUE]...",
    );
    const parsed = TargetKind.safeParse(kindArg);
    if (!parsed.success) throw ctx.usage(`KIND is one of ${TargetKind.options.join(", ")}, not '${kindArg}'`);
    const kind = parsed.data;
    const settings: Record<string, string> = {};
    for (const pair of pairs) {
      const i = pair.indexOf("=");
      if (i <= 0) throw ctx.usage(`'${pair}' is not SETTING=VALUE`);
      settings[pair.slice(0, i)] = pair.slice(i + 1);
    }
    const credentials: Record<string, string> = {};
    for (const c of TARGET_SETTINGS[kind].credentials) {
      const v = ctx.io.env[c.env];
      if (v) credentials[c.name] = v;
    }
    const target = await ctx.client().createTarget({ name, kind, settings, credentials });
    const next =
      kind === "hosts"
        ? `join hosts with: denv join-token create --target ${target.name}`
        : `its machines: denv targets machines ${target.name}`;
    ctx.print(target, `target ${target.name} created (${target.kind}); ${next}`);
    return 0;
  },
};

const show: CommandSpec = {
  name: "targets show",
  summary: "a target: its capabilities, settings and the names of its credentials (admin)",
  args: "NAME",
  remote: true,
  async run(ctx) {
    const [name = ""] = ctx.args(1, 1, "NAME");
    const t = await ctx.client().getTarget(name);
    ctx.print(t, () =>
      [
        `name          ${t.name}`,
        `kind          ${t.kind}`,
        `capabilities  ${capabilityList(t.capabilities)}`,
        ...Object.entries(t.settings).map(
          ([k, v]) => `${`setting ${k}`.padEnd(13)} ${typeof v === "string" ? v : JSON.stringify(v)}`,
        ),
        `credentials   ${t.credentials.length > 0 ? `${t.credentials.join(", ")} (stored encrypted)` : "none"}`,
        `created       ${when(t.created_at)}`,
      ].join("\n"),
    );
    return 0;
  },
};

const rm: CommandSpec = {
  name: "targets rm",
  summary: "remove a target with no hosts and no machines left (admin)",
  args: "NAME [--force]",
  flags: {
    force: {
      type: "boolean",
      description: "delete a provisioned target's machines (its servers at the provider) and hosts first",
    },
  },
  remote: true,
  async run(ctx) {
    const [name = ""] = ctx.args(1, 1, "NAME");
    await ctx.client().deleteTarget(name, { force: ctx.bool("force") });
    ctx.print({ deleted: name }, `target ${name} removed`);
    return 0;
  },
};

const machines: CommandSpec = {
  name: "targets machines",
  summary: "the machines a provisioned target created, with their status and cost class (admin)",
  args: "NAME",
  remote: true,
  async run(ctx) {
    const [name = ""] = ctx.args(1, 1, "NAME");
    const all = await ctx.client().listMachines(name);
    ctx.print({ machines: all }, () =>
      table(
        ["ID", "STATUS", "COST CLASS", "HOST", "CREATED", "NOTE"],
        all.map((m) => [m.id, m.status, m.cost_class, m.host_id, when(m.created_at), m.error]),
        `no machines; target ${name} creates them as placements need (and keeps min_machines)`,
      ),
    );
    return 0;
  },
};

export const targets: GroupSpec = {
  name: "targets",
  summary: "add, list, show and remove targets; a provisioned target's machines",
  subcommands: [ls, kinds, add, show, rm, machines],
};
