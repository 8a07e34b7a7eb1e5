#!/usr/bin/env node
// Builds the runtime benchmark (and the packages it imports) with `tsc -b bench`, then runs it.
//   node bench/runtime/run.mjs [--smoke] [--help]
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildAndRun } from "../build-and-run.mjs";

await buildAndRun(import.meta.url, join(dirname(fileURLToPath(import.meta.url)), ".."));
