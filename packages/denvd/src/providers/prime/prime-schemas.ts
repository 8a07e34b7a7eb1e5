import { z } from "zod";

/**
 * The parts of Prime's answers the client reads, validated where they arrive. Sandboxes come in
 * camelCase, checkpoints and gateway grants in snake_case (as the API sends them); both are
 * mapped to this module's camelCase types here and nowhere else.
 */
export const PrimeSandbox = z
  .object({
    id: z.string(),
    name: z.string(),
    dockerImage: z.string(),
    status: z.string(),
    labels: z.array(z.string()).default([]),
    networkAllowlist: z.array(z.string()).nullish(),
    networkDenylist: z.array(z.string()).nullish(),
    errorType: z.string().nullish(),
    errorMessage: z.string().nullish(),
    createdAt: z.string(),
  })
  .transform((s) => ({
    id: s.id,
    name: s.name,
    dockerImage: s.dockerImage,
    status: s.status,
    labels: s.labels,
    /** False when the sandbox may reach nothing outside (an empty allowlist). */
    networkAccess: !(s.networkAllowlist && s.networkAllowlist.length === 0),
    error: s.errorType ? `${s.errorType}: ${s.errorMessage ?? ""}` : undefined,
    createdAt: s.createdAt,
  }));
export type PrimeSandbox = z.output<typeof PrimeSandbox>;

export const PrimeSandboxList = z.object({
  sandboxes: z.array(PrimeSandbox),
  total: z.number(),
  hasNext: z.boolean(),
});
export type PrimeSandboxList = z.output<typeof PrimeSandboxList>;

export const PrimeCheckpoint = z
  .object({
    id: z.string(),
    sandbox_id: z.string(),
    parent_id: z.string().nullish(),
    state: z.string(),
    depth: z.number(),
    docker_image: z.string(),
    error: z.string().nullish(),
    created_at: z.string(),
  })
  .transform((c) => ({
    id: c.id,
    sandboxId: c.sandbox_id,
    parentId: c.parent_id ?? undefined,
    /** PENDING, DURABLE (restorable), FAILED or DELETING. */
    state: c.state,
    depth: c.depth,
    dockerImage: c.docker_image,
    error: c.error ?? undefined,
    createdAt: c.created_at,
  }));
export type PrimeCheckpoint = z.output<typeof PrimeCheckpoint>;

export const PrimeCheckpointList = z.object({ checkpoints: z.array(PrimeCheckpoint) });

/** POST /sandbox/{id}/auth: where and with what the sandbox's gateway is called. */
export const GatewayGrant = z
  .object({
    token: z.string(),
    gateway_url: z.string(),
    user_ns: z.string(),
    job_id: z.string(),
    expires_at: z.string(),
  })
  .transform((g) => ({
    token: g.token,
    /** `{gateway_url}/{user_ns}/{job_id}`: the sandbox's routes are under it. */
    base: `${g.gateway_url.replace(/\/+$/, "")}/${g.user_ns}/${g.job_id}`,
    expiresAt: Date.parse(g.expires_at),
  }));
export type GatewayGrant = z.output<typeof GatewayGrant>;

export const UploadReceipt = z.object({ success: z.boolean(), path: z.string(), size: z.number() });
