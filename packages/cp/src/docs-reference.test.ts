import { readFile } from "node:fs/promises";
import {
  ControlPlaneMessages,
  type DeploymentKind,
  HostMessages,
  Phases,
  PlacementMessages,
  SandboxMessages,
} from "@denv/spec";
import { describe, expect, it } from "vitest";
import { SETTINGS } from "./config.js";

const read = (page: string) => readFile(new URL(`../../../docs/reference/${page}`, import.meta.url), "utf8");

describe("docs/reference pages of the control plane", () => {
  it("config.md documents every flag and environment variable", async () => {
    const doc = await read("config.md");
    for (const s of SETTINGS) {
      expect(doc, s.flag).toContain(`\`${s.flag}\``);
      expect(doc, s.env).toContain(`\`${s.env}\``);
    }
  });

  it("deployments.md lists every kind's phases in order", async () => {
    const doc = await read("deployments.md");
    const flat = doc.replace(/\s+/g, " ");
    // The deploy table, row by row.
    const rows = [...doc.matchAll(/^\| `([a-z ]+)` +\| (cp|host) /gm)].map((m) => m[1]);
    expect(rows.slice(0, Phases.deploy.length)).toEqual(Phases.deploy);
    expect(rows.slice(Phases.deploy.length)).toEqual(Phases.fork);
    for (const kind of ["rollback", "snapshot", "verify", "start"] as DeploymentKind[]) {
      expect(flat.includes(Phases[kind].map((p) => `\`${p}\``).join(", ")), kind).toBe(true);
    }
    expect(flat.includes(ControlPlaneMessages.noOnlineHost("local"))).toBe(true);
    expect(
      flat.includes(
        ControlPlaneMessages.smokeMismatch("<version>", "<what it got>", "<expect>" as unknown as number),
      ),
    ).toBe(true);
    expect(
      flat.includes(ControlPlaneMessages.resumeTimedOut("<host>", "<seconds>" as unknown as number)),
    ).toBe(true);
  });

  it("targets.md quotes every placement exclusion and error; api.md the sandbox batch's", async () => {
    const flat = (await read("targets.md")).replace(/\s+/g, " ");
    const quoted = [
      PlacementMessages.missingLabel("k=v"),
      PlacementMessages.notEnough("memory", "N", "F", "L"),
      ControlPlaneMessages.noOnlineHost("T"),
      HostMessages.allDraining("T"),
      PlacementMessages.noHostWithLabels("T", "k=v, k2=v2"),
      PlacementMessages.noHostWithRoom("T", "NEED", "HOST: not enough R: ...", "--placement-overcommit-R"),
      PlacementMessages.versionHoldersOffline("P@vN", "H1, H2"),
      PlacementMessages.versionNotHeld("P@vN"),
      ControlPlaneMessages.hostOffline("H"),
    ];
    for (const m of quoted) expect(flat.includes(m), m).toBe(true);
    const api = (await read("api.md")).replace(/\s+/g, " ");
    const n = (s: string) => s as unknown as number;
    const batch = SandboxMessages.batchFailed(n("I"), n("N"), "PROJECT/NAME", "WHY", n("K"));
    expect(api.includes(batch), batch).toBe(true);
    expect(api.includes(SandboxMessages.cleanupFailed("PROJECT/NAME", "..."))).toBe(true);
  });
});
