import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  ComposeReasons,
  ControlPlaneMessages,
  EgressFindings,
  HarborTaskMessages,
  HostRefusals,
  Protection,
  ProviderMessages,
  SpecialFileReasons,
  TrlMessages,
  VerifiersMessages,
} from "./messages.js";
import { SandboxCapability } from "./plan.js";

const doc = readFileSync(new URL("../../../docs/reference/protections.md", import.meta.url), "utf8");

describe("docs/reference/protections.md lists every exact string", () => {
  it("has each protection's message, with placeholders for the variable parts", () => {
    expect(doc).toContain(Protection.agentRoot("<service>"));
    expect(doc).toContain(ComposeReasons.agentCapability("<capability>", SandboxCapability.options));
    expect(doc).toContain(ComposeReasons.agentCapabilitiesUnsandboxed);
    expect(doc).toContain(Protection.agentSurvived("<count>" as unknown as number));
    expect(doc).toContain(Protection.specialFile("<path>", "<reason>" as never));
    expect(doc).toContain(Protection.egressLeak("<environment>", "<findings>"));
  });

  it("has every special-file reason and a worked example", () => {
    for (const reason of Object.values(SpecialFileReasons)) expect(doc).toContain(`\`${reason}\``);
    expect(doc).toContain(Protection.specialFile("/workspace/app/pipe", SpecialFileReasons.fifo));
  });

  it("has every egress finding", () => {
    expect(doc).toContain(EgressFindings.defaultRoute("<service>"));
    expect(doc).toContain(EgressFindings.routeOut("<service>"));
    expect(doc).toContain(EgressFindings.hostReachable("<service>"));
    expect(doc).toContain(EgressFindings.notInternal("<network>"));
    expect(doc).toContain(EgressFindings.extraNetwork("<service>", "<network>"));
    expect(doc).toContain(EgressFindings.ipv6Address("<service>", "<address>"));
    expect(doc).toContain(EgressFindings.resolverOutside("<service>", "<nameserver>"));
    expect(doc).toContain(EgressFindings.dnsLeak("<engine>"));
  });

  it("has what a host refuses whatever the file says", () => {
    expect(doc).toContain(HostRefusals.kindMismatch("<project>", "<kind>", "<asked>"));
    expect(doc).toContain(HostRefusals.foreignImage("<image>", "<owner>"));
    expect(doc).toContain(HostRefusals.diskUnenforceable("<what>", "<why>"));
    expect(doc).toContain(HostRefusals.sandboxUnavailable("<sandbox>", "<runtime>"));
    expect(doc).toContain(HostRefusals.needsEngine("<what>", "<host>"));
    expect(doc).toContain(HostRefusals.environmentExists("<environment>"));
    expect(doc).toContain(HostRefusals.forkExists("<environment>"));
    for (const line of [
      ProviderMessages.lacks("<provider>", "<capability>", "<why>"),
      ProviderMessages.unsupportedKey("<provider>", "<service>", "<key>", "<why>"),
      ProviderMessages.unsupportedVerb("<provider>", "<verb>", "<why>"),
      ProviderMessages.unsupportedOption("<provider>", "<option>", "<why>"),
      ProviderMessages.userWithoutName("<provider>", "<user>"),
      ProviderMessages.noCanary("<provider>"),
      ProviderMessages.internetAllowed("<sandbox>"),
      ProviderMessages.probeFailed("<service>", "<detail>"),
      ProviderMessages.agentBecomesRoot("<service>", "<user>", "<how>"),
      ProviderMessages.agentWritesSystem("<service>", "<user>", "<path>"),
      ProviderMessages.paused("<provider>", "<environment>", "<how>"),
      ProviderMessages.agentAsVerifier("<service>", "<user>", 1001),
      ProviderMessages.agentServiceOnly("<provider>", "<service>", "<agent service>"),
    ]) {
      expect(doc).toContain(line);
    }
    expect(doc).toContain(ControlPlaneMessages.wrongAnswer("<host>", "<kind>", "<why>"));
  });

  it("lists the attacks the suite runs", () => {
    expect(doc).toContain("## What we test");
    for (const surface of ["exec", "files", "compose file", "image", "build", "verify", "probe"]) {
      expect(doc).toMatch(new RegExp(`\\| ${surface}[ ,|]`));
    }
  });

  it("has the smoke verify's failure of a deploy", () => {
    expect(doc).toContain(
      ControlPlaneMessages.smokeMismatch("<version>", "<what it got>", "<expect>" as unknown as number),
    );
  });

  it("has denv.verifiers' refusal of a harness that would run commands on the host", () => {
    expect(doc).toContain(VerifiersMessages.hostShell("<harness>"));
  });

  it("has denv.trl's refusal of a Harbor backend name", () => {
    expect(doc).toContain(TrlMessages.environmentType("<value>"));
  });

  it("has the Harbor adapter's refusal of a task that asks for internet access", () => {
    expect(doc).toContain(HarborTaskMessages.publicNetwork("<task>"));
  });
});
