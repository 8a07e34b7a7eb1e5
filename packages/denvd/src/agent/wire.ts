import { isUtf8 } from "node:buffer";
import type { Environment, ExecResponse, Version } from "@denv/spec";
import type { RawExecResult } from "../exec-runner.js";
import type { ProbeResult } from "../probe.js";
import type { EnvironmentInfo, VersionInfo } from "../runtime/environment-info.js";

/**
 * Runtime values -> the JSON of result frames: snake_case, shaped like the spec's api.ts
 * resources where one exists, so the control plane stores and serves them without remapping.
 * Evidence objects are passed through as the runtime records them.
 */

export interface EnvironmentResult
  extends Pick<Environment, "id" | "project" | "name" | "parent_version" | "services" | "evidence"> {
  status: EnvironmentInfo["status"];
  agent: EnvironmentInfo["agent"];
  network: EnvironmentInfo["network"];
}

export function environmentResult(info: EnvironmentInfo): EnvironmentResult {
  return {
    id: info.id,
    project: info.project,
    name: info.name,
    status: info.status,
    ...(info.parentVersion ? { parent_version: info.parentVersion } : {}),
    agent: info.agent,
    services: info.services.map((s) => ({
      name: s.name,
      container_id: s.containerId,
      image: s.image,
      image_id: s.imageId,
    })),
    network: info.network,
    evidence: info.evidence,
  };
}

const snake = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

export function versionResult(info: VersionInfo, hostId: string): Version {
  return {
    id: info.id,
    project: info.project,
    number: info.number,
    host_id: hostId,
    source_environment: info.sourceEnvironment,
    ...(info.parentVersion ? { parent_version: info.parentVersion } : {}),
    digests: Object.fromEntries(Object.entries(info.images).map(([svc, img]) => [svc, img.imageId])),
    volumes: info.volumes,
    method: info.method,
    sizes: { layer_bytes: info.sizes.layerBytes, volume_bytes: info.sizes.volumeBytes },
    timings: Object.fromEntries(Object.entries(info.timings).map(([k, v]) => [snake(k), v])),
    created_at: info.createdAt,
  };
}

/** Output is UTF-8 text when both streams are valid UTF-8, else both are base64. */
export function execResult(raw: RawExecResult): ExecResponse {
  const text = isUtf8(raw.stdout) && isUtf8(raw.stderr);
  const encoding = text ? "utf8" : "base64";
  return {
    exit_code: raw.exitCode,
    stdout: raw.stdout.toString(encoding),
    stderr: raw.stderr.toString(encoding),
    encoding,
    timed_out: raw.timedOut,
    truncated: raw.truncated,
    duration_ms: raw.durationMs,
  };
}

export function probeResult(p: ProbeResult): Record<string, unknown> {
  return {
    ok: p.ok,
    findings: p.findings,
    network: { name: p.network.name, internal: p.network.internal, reject_rule: p.network.rejectRule },
    services: p.services.map((s) => ({
      service: s.service,
      routes: s.routes,
      default_route: s.defaultRoute,
      route_out: s.routeOut,
      canary_reached: s.canaryReached,
      nameservers: s.nameservers,
      ipv6: s.ipv6,
      networks: s.networks,
    })),
    resolver: {
      engine: p.resolver.engine,
      embedded_dns_leaks: p.resolver.embeddedDnsLeaks,
      loopback_upstream: p.resolver.loopbackUpstream,
    },
    duration_ms: p.durationMs,
  };
}
