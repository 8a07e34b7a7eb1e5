#!/usr/bin/env node
// Builds the many-hosts benchmark (and what it imports: the packages, the CLI's hosts fixture,
// bench/runtime's helpers) with `tsc -b bench/hosts`, then runs it.
//   node bench/hosts/run.mjs [--smoke] [--help]
import { buildAndRun } from "../build-and-run.mjs";

await buildAndRun(import.meta.url);
