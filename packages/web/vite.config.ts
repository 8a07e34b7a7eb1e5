import { defineConfig } from "vite";

/**
 * The dashboard's build: static files in dist/, served by the control plane at `/` (packages/cp
 * src/http/web-assets.ts). JSX is compiled by Vite's own transform (React's automatic runtime).
 */
export default defineConfig({
  root: import.meta.dirname,
  base: "/",
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false, target: "es2022" },
  oxc: { jsx: { runtime: "automatic", importSource: "react" } },
});
