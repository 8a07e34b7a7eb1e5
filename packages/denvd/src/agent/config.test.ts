import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig, redact } from "../config.js";

describe("denvd configuration", () => {
  it("has defaults for a systemd host", () => {
    const c = loadConfig({}, {});
    expect(c).toMatchObject({
      stateDir: "/var/lib/denvd",
      dockerSocket: "/var/run/docker.sock",
      store: "auto",
      labels: {},
      json: false,
    });
    expect(c.url).toBeUndefined();
  });

  it("takes DENVD_* variables, and flags over them", () => {
    const env = {
      DENVD_STATE_DIR: "/srv/denvd",
      DENVD_DOCKER_SOCKET: "/run/docker.sock",
      DENVD_STORE: "copy",
      DENVD_LABELS: "zone=eu,gpu=none",
      DENVD_URL: "https://cp.example/",
      DENVD_TOKEN: "secret-token",
      UNRELATED: "x",
    };
    const c = loadConfig({ store: "btrfs", label: ["gpu=a100", "disk=nvme"] }, env);
    expect(c).toMatchObject({
      stateDir: "/srv/denvd",
      dockerSocket: "/run/docker.sock",
      store: "btrfs",
      labels: { zone: "eu", gpu: "a100", disk: "nvme" },
      url: "https://cp.example",
      joinToken: "secret-token",
    });
  });

  it("refuses bad values naming the flag and the variable", () => {
    expect(() => loadConfig({}, { DENVD_STORE: "zfs" })).toThrow(ConfigError);
    expect(() => loadConfig({}, { DENVD_STORE: "zfs" })).toThrow(/--store \/ DENVD_STORE/);
    expect(() => loadConfig({ url: "ftp://cp" }, {})).toThrow(/--url \/ DENVD_URL: must be an http/);
    expect(() => loadConfig({ label: ["novalue"] }, {})).toThrow(/--label: label 'novalue' is not key=value/);
  });

  it("never shows the join token when the config is logged", () => {
    const c = loadConfig({ token: "s3cret" }, {});
    expect(JSON.stringify(redact(c))).not.toContain("s3cret");
  });
});
