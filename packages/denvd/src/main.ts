#!/usr/bin/env node
import { parseArgs } from "node:util";
import { ExitCodes } from "@denv/spec/messages";
import { streamLog } from "./agent/log.js";
import { denvdVersion } from "./agent/version.js";
import { output } from "./commands/output.js";
import { USAGE } from "./commands/usage.js";
import { ConfigError, type Flags, loadConfig } from "./config.js";

/**
 * denvd's composition root: argv -> verb, flags + environment -> config (parsed once, here),
 * then the verb's module, loaded only for its verb (`run` stays resident: what it does not
 * load, it does not hold). Exit codes: 0 done, 1 failed, 2 usage.
 */

const common = { "state-dir": { type: "string" }, json: { type: "boolean" } } as const;
const VERBS = {
  join: {
    options: {
      ...common,
      url: { type: "string" },
      token: { type: "string" },
      name: { type: "string" },
      label: { type: "string", multiple: true },
      force: { type: "boolean" },
      insecure: { type: "boolean" },
    },
  },
  run: {
    options: {
      "state-dir": { type: "string" },
      "docker-socket": { type: "string" },
      store: { type: "string" },
      label: { type: "string", multiple: true },
      url: { type: "string" },
      insecure: { type: "boolean" },
      "capacity-memory": { type: "string" },
      "transfer-listen": { type: "string" },
      provider: { type: "string" },
      "provider-api-url": { type: "string" },
      "provider-canary": { type: "string", multiple: true },
    },
  },
  release: {
    options: {
      ...common,
      provider: { type: "string" },
      "provider-api-url": { type: "string" },
    },
  },
  status: { options: common },
  doctor: { options: { ...common, "docker-socket": { type: "string" } } },
} as const;
type Verb = keyof typeof VERBS;

async function main(argv: string[]): Promise<number> {
  const [verb, ...rest] = argv;
  if (verb === undefined || verb === "--help" || verb === "-h" || verb === "help") {
    process.stdout.write(USAGE);
    return verb === undefined ? ExitCodes.usage : ExitCodes.ok;
  }
  if (verb === "--version") {
    process.stdout.write(`${denvdVersion()}\n`);
    return ExitCodes.ok;
  }
  if (!(verb in VERBS)) {
    process.stderr.write(`denvd: unknown command '${verb}'\n\n${USAGE}`);
    return ExitCodes.usage;
  }
  if (rest.includes("--help") || rest.includes("-h")) {
    process.stdout.write(USAGE);
    return ExitCodes.ok;
  }
  let flags: Flags;
  try {
    flags = parseArgs({ args: rest, options: VERBS[verb as Verb].options, strict: true }).values as Flags;
  } catch (err) {
    process.stderr.write(`denvd ${verb}: ${(err as Error).message}\n`);
    return ExitCodes.usage;
  }
  const out = output(flags.json ?? false, process.stdout, process.stderr);
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig(flags, process.env);
  } catch (err) {
    if (err instanceof ConfigError) return out.fail(err.message, ExitCodes.usage);
    throw err;
  }
  const log = streamLog(process.stderr);
  switch (verb as Verb) {
    case "join":
      return (await import("./commands/join.js")).join(config, out);
    case "run":
      return (await import("./commands/run.js")).run(config, out, log);
    case "release":
      return (await import("./commands/release.js")).release(config, out, log);
    case "status":
      return (await import("./commands/status.js")).status(config, out);
    case "doctor":
      return (await import("./commands/doctor.js")).doctor(config, out);
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`denvd: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(ExitCodes.failure);
  },
);
