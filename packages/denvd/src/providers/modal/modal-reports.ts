import type { HostEnvironment, Version } from "@denv/spec";
import { sandboxEnvironment, sandboxVersion } from "../sandbox-reports.js";
import { PROVIDER } from "./modal-host.js";
import type { ModalEnvironmentRecord, ModalVersionRecord } from "./modal-records.js";
import { METHOD } from "./modal-versions.js";

/** An environment as the protocol reports it: one sandbox, isolated by Modal's `blockNetwork`. */
export function hostEnvironment(hostId: string, rec: ModalEnvironmentRecord): HostEnvironment {
  return sandboxEnvironment(hostId, rec, {
    provider: PROVIDER,
    policy: `modal blockNetwork: ${!rec.networkAccess}`,
    internal: !rec.networkAccess,
    image: rec.imageId,
    imageId: rec.imageId,
    timings: rec.timings,
  });
}

/** A version as the protocol reports it: Modal's filesystem snapshot of one sandbox (an image). */
export function hostVersion(hostId: string, v: ModalVersionRecord): Version {
  return sandboxVersion(hostId, v, v.imageId, METHOD);
}
