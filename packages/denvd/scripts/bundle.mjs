#!/usr/bin/env node
// Builds denvd as one file a host runs with only Node installed: packages/denvd/dist/bundle/denvd.mjs
// (`node denvd.mjs run`). The path is fixed: deploy/install.sh installs it and the control plane
// serves it to the machines it provisions. Input is tsc's output (dist/main.js), so `npm run build`
// runs this after tsc -b.
//
// Three things differ from running dist/main.js (the third: @daytonaio/sdk stays outside, below):
// - denvd loads dockerode and ws with createRequire(import.meta.url)(...) so that the idle daemon
//   holds neither until it needs them (packages/denvd/README.md, Memory). esbuild only bundles a
//   call of the free `require`, so those calls are rewritten to `require(...)` here; esbuild keeps
//   them lazy (each becomes a function that runs the module the first time it is called). The
//   rewrite fails the build when a file has no such call any more, so a changed source is noticed.
// - the version: dist/main.js reads package.json and dist/build.json beside it; the bundle has
//   neither, so both are written into it (DENVD_BUNDLED_VERSION).
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const pkg = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const dist = path.join(pkg, "dist");
const LAZY = /createRequire\(import\.meta\.url\)\(/g;
const LAZY_FILES = ["agent/connection.js", "docker/engine-http.js"].map((f) => path.join(dist, f));

const version = JSON.parse(readFileSync(path.join(pkg, "package.json"), "utf8")).version;
let commit;
try {
  commit = JSON.parse(readFileSync(path.join(dist, "build.json"), "utf8")).commit;
} catch {}

const lazyRequire = {
  name: "denvd-lazy-require",
  setup(b) {
    b.onLoad({ filter: /[\\/]packages[\\/]denvd[\\/]dist[\\/].*\.js$/ }, (args) => {
      const text = readFileSync(args.path, "utf8");
      const listed = LAZY_FILES.includes(args.path);
      const found = LAZY.test(text);
      LAZY.lastIndex = 0;
      if (listed !== found) {
        throw new Error(
          `${args.path}: expected ${listed ? "a" : "no"} createRequire(import.meta.url)(...) call`,
        );
      }
      return { contents: found ? text.replace(LAZY, "require(") : text, loader: "js" };
    });
  },
};

await build({
  entryPoints: [path.join(dist, "main.js")],
  outfile: path.join(dist, "bundle", "denvd.mjs"),
  bundle: true,
  platform: "node",
  target: "node20",
  format: "esm",
  // Native add-ons that ssh2 (docker-modem's ssh:// transport, unused by denvd) tries in a try/catch.
  // @daytonaio/sdk loads parts of itself by path at run time (its ObjectStorage), which a bundle
  // cannot hold: only a Daytona bridge imports it, and a bridge runs where the control plane is
  // installed, beside its node_modules (a host that runs the bundle alone never bridges).
  external: ["cpu-features", "*.node", "@daytonaio/sdk"],
  plugins: [lazyRequire],
  define: { DENVD_BUNDLED_VERSION: JSON.stringify({ version, commit }) },
  // Bundled CommonJS modules require Node's built-ins and read __dirname (ssh2's crypto, loaded
  // with dockerode on the first command); an ES module has neither of its own.
  banner: {
    js: [
      "import { createRequire as __denvdCreateRequire } from 'node:module';",
      "import { dirname as __denvdDirname } from 'node:path';",
      "import { fileURLToPath as __denvdFileURLToPath } from 'node:url';",
      "const require = __denvdCreateRequire(import.meta.url);",
      "const __filename = __denvdFileURLToPath(import.meta.url);",
      "const __dirname = __denvdDirname(__filename);",
    ].join("\n"),
  },
  legalComments: "none",
  logLevel: "warning",
});
