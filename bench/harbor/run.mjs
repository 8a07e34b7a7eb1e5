#!/usr/bin/env node
// Builds the Harbor benchmark (and what it imports: bench/runtime's helpers, the CLI's stack
// helper) with `tsc -b bench/harbor`, then runs it.
//   node bench/harbor/run.mjs [--smoke] [--trials N] [--concurrency N] [--help]
import { buildAndRun } from "../build-and-run.mjs";

await buildAndRun(import.meta.url);
