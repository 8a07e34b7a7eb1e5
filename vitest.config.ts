import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["packages/*/src/**/*.test.ts", "bench/**/*.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 300_000,
    // Runtime tests share one Docker engine on a 2-core machine: files run one at a time.
    fileParallelism: false,
    // Removes the project folders denvd's test harness wrote, after each file.
    setupFiles: ["packages/denvd/src/testing/vitest-setup.ts"],
    reporters: ["default"],
  },
});
