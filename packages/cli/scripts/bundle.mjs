#!/usr/bin/env node
// Builds the `denv` command as one file, packages/cli/dist/denv.mjs: the package's bin. Input is
// tsc's output (dist/main.js), so `npm run build` runs this after tsc -b.
//
// Why: a command runs once per invocation, and loading dist/main.js resolves and compiles some
// hundreds of modules (the CLI, the SDK, spec and zod) before it does anything: about 0.35 s of
// CPU for `denv --version` here, against 0.2 s for the bundle. The bundle sits in dist/ beside
// main.js, so what it finds relative to itself (package.json, dist/build.json, the other
// packages of a checkout for `denv up`) is where dist/main.js finds it.
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const pkg = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

await build({
  entryPoints: [path.join(pkg, "dist", "main.js")],
  outfile: path.join(pkg, "dist", "denv.mjs"),
  bundle: true,
  platform: "node",
  target: "node20",
  format: "esm",
  // ws's optional native helpers, which it tries in a try/catch.
  external: ["bufferutil", "utf-8-validate"],
  // Bundled CommonJS modules require Node's built-ins; an ES module has no `require` of its own.
  // (esbuild keeps main.js's #! line first.)
  banner: {
    js: "import { createRequire as __denvCreateRequire } from 'node:module';\nconst require = __denvCreateRequire(import.meta.url);",
  },
  legalComments: "none",
  logLevel: "warning",
});
