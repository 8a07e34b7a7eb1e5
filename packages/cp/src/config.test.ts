import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseConfig, redactConfig, resolvePaths } from "./config.js";

describe("denv-cp configuration", () => {
  it("has defaults, reads environment variables, and lets flags win", () => {
    const d = parseConfig([], {});
    expect(d).toMatchObject({
      listen: "127.0.0.1:8420",
      corsOrigins: [],
      retainVersions: 20,
      logLevel: "info",
    });
    expect(resolvePaths(d)).toEqual({
      databaseUrl: join(d.dataDir, "denv.db"),
      adminTokenFile: join(d.dataDir, "admin-token"),
    });
    const c = parseConfig(["--listen", "0.0.0.0:9000", "--retain-versions=3"], {
      DENV_CP_LISTEN: "127.0.0.1:1",
      DENV_CP_DATA_DIR: "/var/lib/denv",
      DENV_CP_CORS_ORIGINS: "https://a.example, https://b.example",
      DENV_CP_SANDBOX_SWEEP_MS: "5000",
    });
    expect(c).toMatchObject({
      listen: "0.0.0.0:9000",
      dataDir: "/var/lib/denv",
      corsOrigins: ["https://a.example", "https://b.example"],
      sandboxSweepMs: 5000,
      retainVersions: 3,
    });
  });

  it("placement assumes 200 MB/s for a transfer between hosts unless told otherwise", () => {
    expect(parseConfig([], {}).placementTransferMbps).toBe(200);
    expect(parseConfig([], { DENV_CP_PLACEMENT_TRANSFER_MBPS: "50" }).placementTransferMbps).toBe(50);
    expect(
      parseConfig(["--placement-transfer-mbps=1250"], { DENV_CP_PLACEMENT_TRANSFER_MBPS: "50" })
        .placementTransferMbps,
    ).toBe(1250);
    expect(() => parseConfig(["--placement-transfer-mbps", "0"], {})).toThrow();
    expect(() => parseConfig([], { DENV_CP_PLACEMENT_TRANSFER_MBPS: "fast" })).toThrow();
  });

  it("refuses unknown flags and bad values with a line naming them", () => {
    expect(() => parseConfig(["--nope", "1"], {})).toThrow("unknown flag --nope");
    expect(() => parseConfig(["--listen"], {})).toThrow("flag --listen needs a value");
    expect(() => parseConfig([], { DENV_CP_LISTEN: "nowhere" })).toThrow(/HOST:PORT/);
    expect(() => parseConfig([], { DENV_CP_RETAIN_VERSIONS: "-1" })).toThrow();
  });

  it("never logs a database password", () => {
    const c = parseConfig(["--database-url", "postgres://denv:s3cret@db:5432/denv"], {});
    expect(JSON.stringify(redactConfig(c))).not.toContain("s3cret");
    expect(redactConfig(c).databaseUrl).toBe("postgres://denv:***@db:5432/denv");
  });
});
