import { z } from "zod";

/** What each deployment kind keeps of its request in the row (so a resumed run has it). */

export const SourceEvidence = z.object({
  upload_bytes: z.number(),
  tar_bytes: z.number(),
  sha256: z.string(),
  gzip: z.boolean(),
  /** The client's own hash of the folder (X-Denv-Source-Sha256), when it sent one. */
  source_sha256: z.string().optional(),
});
export type SourceEvidence = z.infer<typeof SourceEvidence>;

export const DeployState = z.object({
  target: z.string(),
  compose_file: z.string(),
  /** The spooled upload; deleted when the deployment ends. */
  spool: z.string().optional(),
  source: SourceEvidence.optional(),
  /** Or: the repository and ref the host fetches (a deploy --ref, a GitHub push). */
  git: z.object({ url: z.string(), ref: z.string(), max_bytes: z.number().int().positive() }).optional(),
  /** Placement labels the deploy asked for (?placement=k=v,...); absent in rows from before them. */
  placement: z.record(z.string(), z.string()).optional(),
});

export const ForkState = z.object({
  /** PROJECT@vN */
  version: z.string(),
  source_environment: z.string().optional(),
  sandbox: z.object({ expires_at: z.string() }).optional(),
  /** A warm fork of the project's pool (PoolService), waiting for a sandbox claim. */
  pool: z.boolean().optional(),
});

export const RollbackState = z.object({ version: z.string() });

export const PlacementValue = z.object({
  hostId: z.string(),
  reason: z.string(),
  /** A fork placed where its version is not: streamed there from `from` first. */
  transfer: z.object({ from: z.string(), bytes: z.number() }).optional(),
});

/** What a fork's `transfer` phase did (its evidence too). */
export const TransferValue = z.object({
  version: z.string(),
  from: z.string(),
  to: z.string(),
  attempts: z.number().int(),
  bytes: z.number(),
  resumed_bytes: z.number(),
  layers_sent: z.number().int(),
  layers_skipped: z.number().int(),
  skipped_special: z.number().int(),
  duration_ms: z.number(),
  mib_per_s: z.number(),
  /** Which way the bytes went (the last attempt's), and why that way. */
  path: z.enum(["relay", "direct"]).optional(),
  path_reason: z.string().optional(),
});
