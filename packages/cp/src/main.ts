#!/usr/bin/env node
import { parseConfig, redactConfig, usage } from "./config.js";
import { startControlPlane } from "./control-plane.js";
import { errorMessage, jsonLog } from "./log.js";
import { cpVersion } from "./version.js";

/** The composition root of the denv-cp binary: configuration once, then startControlPlane. */
async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv.includes("--help") || argv.includes("-h")) {
    process.stdout.write(usage());
    return;
  }
  if (argv.includes("--version")) {
    process.stdout.write(`${cpVersion()}\n`);
    return;
  }
  const config = parseConfig(argv, process.env);
  const log = jsonLog(config.logLevel);
  log.info("configuration", redactConfig(config));
  const cp = await startControlPlane({ ...config, log });
  process.stdout.write(`denv-cp listening on ${cp.url}\n`);
  const stop = (signal: string) => {
    log.info("shutting down", { signal });
    cp.close().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error("shutdown failed", { error: errorMessage(err) });
        process.exit(1);
      },
    );
  };
  process.once("SIGTERM", () => stop("SIGTERM"));
  process.once("SIGINT", () => stop("SIGINT"));
}

main().catch((err: unknown) => {
  process.stderr.write(`denv-cp: ${errorMessage(err)}\n`);
  process.exit(1);
});
