#!/usr/bin/env node
// Builds the API benchmark (and what it imports: the packages and bench/runtime's helpers) with
// `tsc -b bench/api`, then runs it.
//   node bench/api/run.mjs [--smoke] [--help]
import { buildAndRun } from "../build-and-run.mjs";

await buildAndRun(import.meta.url);
