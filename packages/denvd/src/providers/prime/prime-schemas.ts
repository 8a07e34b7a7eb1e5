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

/** POST /images/build: the build's id, where its context goes, and the image's reference. */
export const PrimeBuildInitiated = z
  .object({
    build_id: z.string(),
    upload_url: z.string().nullish(),
    fullImagePath: z.string(),
  })
  .transform((b) => ({ id: b.build_id, uploadUrl: b.upload_url ?? undefined, reference: b.fullImagePath }));

const BuildArtifact = z.object({
  fullImagePath: z.string().nullish(),
  errorMessage: z.string().nullish(),
});

/**
 * GET /images/build/{id}: a build group whose artifacts carry the reference and the failure text
 * (earlier versions of the API answered them at the top level; both are read).
 */
export const PrimeBuildStatus = z
  .object({
    id: z.string(),
    status: z.string(),
    fullImagePath: z.string().nullish(),
    errorMessage: z.string().nullish(),
    artifacts: z.array(BuildArtifact).default([]),
  })
  .transform((b) => ({
    id: b.id,
    /** PENDING, UPLOADING, BUILDING, COMPLETED, FAILED or CANCELLED. */
    status: b.status,
    reference: b.fullImagePath ?? b.artifacts.find((a) => a.fullImagePath)?.fullImagePath ?? undefined,
    error: b.errorMessage ?? b.artifacts.find((a) => a.errorMessage)?.errorMessage ?? undefined,
  }));

export const PrimeImage = z
  .object({
    id: z.string(),
    imageName: z.string(),
    imageTag: z.string(),
    status: z.string(),
    fullImagePath: z.string().nullish(),
    displayRef: z.string().nullish(),
    errorMessage: z.string().nullish(),
    visibility: z.string().default("PRIVATE"),
    teamId: z.string().nullish(),
    createdAt: z.string(),
  })
  .transform((i) => ({
    id: i.id,
    name: i.imageName,
    tag: i.imageTag,
    status: i.status,
    /** What a sandbox's `docker_image` names (once COMPLETED). */
    reference: i.fullImagePath ?? i.displayRef ?? undefined,
    error: i.errorMessage ?? undefined,
    visibility: i.visibility,
    teamId: i.teamId ?? undefined,
    createdAt: i.createdAt,
  }));
export type PrimeImage = z.output<typeof PrimeImage>;

export const PrimeImageList = z.object({ data: z.array(PrimeImage), totalCount: z.number().nullish() });

/** GET /sandbox/{id}/egress-policy: the policy asked, and whether Prime applied it yet. */
export const EgressPolicyStatus = z.object({
  policy: z.object({ allowlist: z.array(z.string()).nullish(), denylist: z.array(z.string()).nullish() }),
  applied: z.boolean(),
});

/** A rule of a private network: members tagged `from` may open TCP connections to `to`'s ports. */
const NetworkRule = z.object({ from: z.string(), to: z.string(), ports: z.array(z.number()) });
export type NetworkRule = z.output<typeof NetworkRule>;

/**
 * A private network's answer. Only `id` and `name` are documented for sure: its rules and members
 * (camelCase, as the sandbox answers) are read when present in the shape the double sends, and
 * otherwise read as none rather than failing the call over fields the client only reports.
 */
export const PrimeNetwork = z
  .object({
    id: z.string(),
    name: z.string(),
    rules: z.array(NetworkRule).nullish().catch(null),
    members: z
      .array(z.object({ sandboxId: z.string(), tags: z.array(z.string()).nullish() }))
      .nullish()
      .catch(null),
  })
  .transform((n) => ({
    id: n.id,
    name: n.name,
    members: (n.members ?? []).map((m) => ({ sandboxId: m.sandboxId, tags: m.tags ?? [] })),
    /** Selectors are `*` (every member) or `tag:<name>`. */
    rules: n.rules ?? [],
  }));
export type PrimeNetwork = z.output<typeof PrimeNetwork>;
