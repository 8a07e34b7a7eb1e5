import { DenvdMessages } from "@denv/spec";
import { describe, expect, it } from "vitest";
import {
  ConfigError,
  insecureUrlRefusal,
  isLoopback,
  loadConfig,
  modalToken,
  providerKeyRefusal,
  redact,
} from "../config.js";
import { offeredMemory } from "./hello.js";

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

  it("reads a provider bridge's settings, its API key only from the environment, never logged", () => {
    const c = loadConfig(
      { provider: "e2b", "provider-api-url": "http://127.0.0.1:9/", "provider-canary": ["127.0.0.1:7"] },
      { DENVD_PROVIDER_API_KEY: "e2b_s3cret", DENVD_PROVIDER_SANDBOX_URL: "http://127.0.0.1:8" },
    );
    expect(c).toMatchObject({
      provider: "e2b",
      providerApiUrl: "http://127.0.0.1:9",
      providerSandboxUrl: "http://127.0.0.1:8",
      providerApiKey: "e2b_s3cret",
      providerCanaries: ["127.0.0.1:7"],
    });
    expect(JSON.stringify(redact(c))).not.toContain("e2b_s3cret");
    expect(loadConfig({}, { DENVD_PROVIDER_CANARIES: "127.0.0.1:7,127.0.0.1:8" }).providerCanaries).toEqual([
      "127.0.0.1:7",
      "127.0.0.1:8",
    ]);
    expect(() => loadConfig({ "provider-canary": ["nowhere"] }, {})).toThrow(
      /--provider-canary \/ DENVD_PROVIDER_CANARIES: must be IP:PORT/,
    );
  });

  it("takes Modal's token as TOKEN_ID:TOKEN_SECRET, and refuses a key of another form in one line", () => {
    const modal = (key?: string) =>
      loadConfig({ provider: "modal" }, key === undefined ? {} : { DENVD_PROVIDER_API_KEY: key });
    const c = modal("ak-abc123:as-def456");
    expect(providerKeyRefusal(c)).toBeUndefined();
    expect(modalToken(c.providerApiKey as string)).toEqual({
      tokenId: "ak-abc123",
      tokenSecret: "as-def456",
    });
    expect(JSON.stringify(redact(c))).not.toContain("as-def456");
    for (const key of ["ak-abc123", "ak-abc123:", ":as-def456", "ak-abc123:as-def456:x"]) {
      const refusal = providerKeyRefusal(modal(key));
      expect(refusal).toBe(
        "refused: --provider modal takes DENVD_PROVIDER_API_KEY as TOKEN_ID:TOKEN_SECRET, your Modal token's id (ak-...) and its secret (as-...) joined by one colon; the key given is not of that form",
      );
      expect(refusal).toBe(DenvdMessages.modalKeyMalformed());
    }
    expect(providerKeyRefusal(modal())).toBe(DenvdMessages.providerKeyMissing("modal"));
    // Another provider's key is its own: no colon needed.
    expect(
      providerKeyRefusal(loadConfig({ provider: "prime" }, { DENVD_PROVIDER_API_KEY: "pit_k" })),
    ).toBeUndefined();
    expect(providerKeyRefusal(loadConfig({}, {}))).toBeUndefined();
  });

  it("refuses plain http:// to another machine in one line naming the URL and the flag", () => {
    for (const url of [
      "http://cp.example:8420",
      "http://10.0.0.5",
      "http://[2001:db8::1]:8420",
      "http://128.0.0.1",
    ]) {
      const refusal = insecureUrlRefusal(url, false);
      expect(refusal).toBe(DenvdMessages.insecureUrl(url));
      expect(refusal).toContain(url);
      expect(refusal).toContain("--insecure");
      expect(refusal).not.toContain("\n");
    }
    expect(DenvdMessages.insecureUrl("http://cp.example:8420")).toBe(
      "refused: http://cp.example:8420 is plain http:// to a machine other than this one, so the join token and the host credential would cross the network unencrypted; use https://, or pass --insecure (DENVD_INSECURE=1) to accept it",
    );
  });

  it("accepts https, http to loopback, and plain http with --insecure or DENVD_INSECURE", () => {
    for (const url of [
      "https://cp.example",
      "https://10.0.0.5:8420",
      "http://127.0.0.1:8420",
      "http://127.42.0.9",
      "http://localhost:8420",
      "http://LOCALHOST",
      "http://[::1]:8420",
      "http://[0:0:0:0:0:0:0:1]",
    ]) {
      expect(insecureUrlRefusal(url, false), url).toBeUndefined();
    }
    expect(insecureUrlRefusal("http://cp.example", true)).toBeUndefined();
    expect(isLoopback("localhost.example")).toBe(false);
    expect(isLoopback("::2")).toBe(false);
    expect(loadConfig({}, {}).insecure).toBe(false);
    expect(loadConfig({ insecure: true }, {}).insecure).toBe(true);
    expect(loadConfig({}, { DENVD_INSECURE: "1" }).insecure).toBe(true);
    expect(loadConfig({}, { DENVD_INSECURE: "false" }).insecure).toBe(false);
    expect(() => loadConfig({}, { DENVD_INSECURE: "maybe" })).toThrow(/--insecure \/ DENVD_INSECURE/);
  });

  it("offers denv at most --capacity-memory bytes of the machine (DENVD_CAPACITY_MEMORY)", () => {
    expect(loadConfig({}, {}).capacityMemory).toBeUndefined();
    expect(loadConfig({}, { DENVD_CAPACITY_MEMORY: "1073741824" }).capacityMemory).toBe(1024 ** 3);
    expect(
      loadConfig({ "capacity-memory": "536870912" }, { DENVD_CAPACITY_MEMORY: "1073741824" }).capacityMemory,
    ).toBe(512 * 1024 ** 2);
    for (const bad of ["0", "-5", "1.5", "lots"]) {
      expect(() => loadConfig({ "capacity-memory": bad }, {}), bad).toThrow(
        /--capacity-memory \/ DENVD_CAPACITY_MEMORY: must be a/,
      );
    }
    const machine = 16 * 1024 ** 3;
    expect(offeredMemory(machine, undefined)).toBe(machine);
    expect(offeredMemory(machine, 2 * 1024 ** 3)).toBe(2 * 1024 ** 3);
    // More than the machine has is not offered: what is not there cannot be committed.
    expect(offeredMemory(machine, 64 * 1024 ** 3)).toBe(machine);
  });
});
