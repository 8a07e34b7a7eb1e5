import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { DenvClient, saveClientConfig } from "@denv/sdk";
import type { CommandSpec } from "../command.js";
import type { Context } from "../context.js";
import { CliError } from "../exit-codes.js";
import {
  alive,
  binaries,
  CP_NODE_OPTIONS,
  checkBinary,
  DENVD_NODE_OPTIONS,
  defaultDataDir,
  readPid,
  runs,
  runToEnd,
  type StackPaths,
  sleep,
  stackPaths,
  startDetached,
  tail,
  writePid,
} from "../local-stack.js";

const HEALTH_TIMEOUT_MS = 30_000;
const HOST_TIMEOUT_MS = 60_000;
const STORES = ["auto", "btrfs", "copy"];

export const up: CommandSpec = {
  name: "up",
  summary: "start a control plane and a denvd on this machine, in the background",
  args: "[--data-dir DIR] [--listen HOST:PORT] [--store auto|btrfs|copy]",
  description: `
Starts the control plane (denv-cp) and one denvd host joined to its target 'local', as
background processes: logs in DIR/cp.log and DIR/denvd.log, pid files DIR/cp.pid and
DIR/denvd.pid, the control plane's database in DIR/cp and its admin token in
DIR/admin-token, denvd's state in DIR/denvd. Waits until the control plane answers /healthz
and the host is online, then writes the URL and the admin token to the config file. Running
it again while both run says so and changes nothing. --json prints
{url, data_dir, pids, already_up}.`,
  flags: {
    "data-dir": {
      type: "string",
      value: "DIR",
      description: "where data, logs and pid files live (default ~/.local/share/denv)",
    },
    listen: {
      type: "string",
      value: "HOST:PORT",
      description: "the control plane's address (default 127.0.0.1:8420)",
    },
    store: {
      type: "string",
      value: "STORE",
      description: "denvd's snapshot store: auto (btrfs when it can, else copy; the default), btrfs or copy",
    },
  },
  remote: false,
  async run(ctx) {
    ctx.args(0, 0, "");
    const dataDir = path.resolve(ctx.io.cwd, ctx.string("data-dir") ?? defaultDataDir(ctx.io.env));
    const listen = ctx.string("listen") ?? "127.0.0.1:8420";
    const match = /^(.+):(\d{1,5})$/.exec(listen);
    if (match === null) throw ctx.usage(`--listen is HOST:PORT, not '${listen}'`);
    const store = ctx.string("store") ?? "auto";
    if (!STORES.includes(store)) throw ctx.usage(`--store is one of ${STORES.join(", ")}, not '${store}'`);
    const host = match[1] === "0.0.0.0" || match[1] === "::" ? "127.0.0.1" : (match[1] ?? "");
    const paths = stackPaths(dataDir);
    const bins = binaries(ctx.io.env);
    checkBinary("cp", bins.cp);
    checkBinary("denvd", bins.denvd);
    mkdirSync(paths.denvdState, { recursive: true, mode: 0o700 });
    mkdirSync(paths.cpData, { recursive: true, mode: 0o700 });

    const urlFile = path.join(dataDir, "url");
    let cpPid = runningPid(paths, "cp", bins.cp);
    let denvdPid = runningPid(paths, "denvd", bins.denvd);
    const alreadyUp = cpPid !== undefined && denvdPid !== undefined;
    // A running control plane keeps the address it was started with.
    const url =
      cpPid !== undefined && existsSync(urlFile)
        ? readFileSync(urlFile, "utf8").trim()
        : `http://${host.includes(":") && !host.startsWith("[") ? `[${host}]` : host}:${match[2]}`;

    if (cpPid === undefined) {
      ctx.progress(`starting the control plane on ${listen} (log: ${paths.log.cp})`);
      const child = startDetached(
        bins.cp,
        [],
        paths.log.cp,
        {
          ...ctx.io.env,
          DENV_CP_DATA_DIR: paths.cpData,
          DENV_CP_ADMIN_TOKEN_FILE: paths.adminToken,
          DENV_CP_LISTEN: listen,
          DENV_CP_PUBLIC_URL: url,
        },
        CP_NODE_OPTIONS,
      );
      cpPid = child.pid ?? 0;
      writePid(paths.pid.cp, cpPid);
      writeFileSync(urlFile, `${url}\n`);
    }
    const anonymous = new DenvClient({ url });
    await waitFor(
      `the control plane at ${url} to answer /healthz`,
      HEALTH_TIMEOUT_MS,
      paths.log.cp,
      cpPid,
      async () => {
        await anonymous.health();
        return existsSync(paths.adminToken);
      },
    );
    const adminToken = readFileSync(paths.adminToken, "utf8").trim();
    const admin = new DenvClient({ url, token: adminToken });

    // A host the control plane still counts online (a crashed denvd, until its heartbeats are
    // missed) is not proof: a denvd started now must have said hello since.
    let since = 0;
    if (denvdPid === undefined) {
      await join(ctx, admin, bins.denvd, paths, url);
      since = Date.now() - 2_000;
      ctx.progress(`starting denvd (log: ${paths.log.denvd})`);
      const storeArgs = ["--store", store];
      const child = startDetached(
        bins.denvd,
        ["run", "--state-dir", paths.denvdState, ...storeArgs],
        paths.log.denvd,
        ctx.io.env,
        DENVD_NODE_OPTIONS,
      );
      denvdPid = child.pid ?? 0;
      writePid(paths.pid.denvd, denvdPid);
    }
    await waitFor(
      "the host to show online in /v1/hosts",
      HOST_TIMEOUT_MS,
      paths.log.denvd,
      denvdPid,
      async () =>
        (await admin.listHosts()).some(
          (h) =>
            h.status === "online" && (h.last_seen_at === undefined || Date.parse(h.last_seen_at) >= since),
        ),
    );

    const configPath = saveClientConfig({ url, token: adminToken }, { env: ctx.io.env });
    const pids = { cp: cpPid, denvd: denvdPid };
    ctx.print(
      { url, data_dir: dataDir, pids, already_up: alreadyUp },
      alreadyUp
        ? `denv is already up at ${url} (control plane pid ${cpPid}, denvd pid ${denvdPid})`
        : `denv is up at ${url} (control plane pid ${cpPid}, denvd pid ${denvdPid})\nconfig written to ${configPath}; try: denv hosts list`,
    );
    return 0;
  },
};

function runningPid(paths: StackPaths, role: "cp" | "denvd", binary: string): number | undefined {
  const pid = readPid(paths.pid[role]);
  return pid !== undefined && runs(pid, binary) ? pid : undefined;
}

/** Joins the local denvd to this control plane once (the marker remembers which one). */
async function join(
  ctx: Context,
  admin: DenvClient,
  denvd: string,
  paths: StackPaths,
  url: string,
): Promise<void> {
  if (existsSync(paths.joined) && readFileSync(paths.joined, "utf8").trim() === url) return;
  ctx.progress("joining denvd to the target 'local'");
  const token = await admin.createJoinToken("local", { uses: 1, ttl_sec: 600 });
  if (token.token === undefined)
    throw new CliError("invalid_response", "the control plane returned a join token without its secret");
  const code = await runToEnd(
    denvd,
    // --force: a state folder joined to an earlier control plane (another data folder) joins this one.
    ["join", "--url", url, "--token", token.token, "--state-dir", paths.denvdState, "--force"],
    paths.log.denvd,
    ctx.io.env,
  );
  if (code !== 0) {
    throw new CliError(
      "internal",
      `denvd join exited with ${code}; the end of ${paths.log.denvd}:\n${tail(paths.log.denvd)}`,
    );
  }
  writeFileSync(paths.joined, `${url}\n`);
}

/** Polls `ready` until it is true; fails early, with the log's end, when the process died. */
async function waitFor(
  what: string,
  timeoutMs: number,
  log: string,
  pid: number,
  ready: () => Promise<boolean>,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    try {
      if (await ready()) return;
    } catch (err) {
      last = (err as Error).message;
    }
    if (!alive(pid)) {
      throw new CliError(
        "internal",
        `the process (pid ${pid}) exited while waiting for ${what}; the end of ${log}:\n${tail(log)}`,
      );
    }
    await sleep(200);
  }
  throw new CliError(
    "timeout",
    `timed out after ${timeoutMs / 1000}s waiting for ${what}${last === "" ? "" : ` (${last})`}; the end of ${log}:\n${tail(log)}`,
  );
}
