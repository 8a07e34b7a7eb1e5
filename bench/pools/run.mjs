#!/usr/bin/env node
// Builds the warm pools benchmark (and what it imports: the packages, the CLI's stack helper,
// bench/runtime's and bench/api's helpers) with `tsc -b bench/pools`, then runs it.
//   node bench/pools/run.mjs [--smoke] [--help]
import { buildAndRun } from "../build-and-run.mjs";

await buildAndRun(import.meta.url);
