import { z } from "zod";

/**
 * Version transfer between hosts (docs/reference/protocol.md#version-transfer). The holder
 * (`version.send`) streams the version as records on one data stream; the control plane relays
 * the bytes to the receiver (`version.receive`) and never stores them. Every record carries the
 * SHA-256 of its body, so a corrupt chunk fails the transfer where it happened; the receiver
 * journals what it has verified, so a transfer cut by a dropped link or a killed host resumes
 * from there instead of from the start.
 */

/**
 * A record on the wire: `type` (1 byte), body length (uint32, big-endian), body, SHA-256 of the
 * body (32 bytes). JSON bodies are UTF-8; `data` bodies are raw bytes of the current entry.
 */
export const TransferRecordType = {
  /** JSON TransferManifest: always first. */
  manifest: 0x4d,
  /** JSON {name}: a part starts (its entries follow). */
  part: 0x50,
  /** JSON TransferEntry: a directory, a symlink, or a file whose bytes follow as data records. */
  entry: 0x45,
  /** Raw bytes of the current file entry, at most MAX_TRANSFER_CHUNK of them. */
  data: 0x44,
  /** JSON {name, entries}: the part is complete. */
  partEnd: 0x5a,
  /** JSON {}: every part was sent. */
  end: 0x46,
} as const;

/** The largest data record (bytes): one chunk, one checksum. */
export const MAX_TRANSFER_CHUNK = 1024 * 1024;
/** The largest JSON record a receiver accepts (a manifest with a big plan fits). */
export const MAX_TRANSFER_JSON = 4 * 1024 * 1024;

/** What a version is made of on the wire: committed images, volume snapshots, the tests archive. */
export const TransferPart = z.object({
  /** `image:SERVICE`, `image:verifier`, `volume:NAME` or `file:tests`. */
  name: z.string(),
  kind: z.enum(["image", "volume", "file"]),
});
export type TransferPart = z.infer<typeof TransferPart>;

export const TransferImage = z.object({
  /** The image id the receiver must end up with (sha256 of the config: checked after the load). */
  image_id: z.string(),
  /** Layer chain ids, bottom first: a receiver that has one skips it. */
  chain_ids: z.array(z.string()),
  layers: z.number().int(),
  squashed: z.boolean().optional(),
});

export const TransferManifest = z.object({
  version: z.string(),
  /** The sender's version record, minus what only makes sense on its disk (store ids, paths). */
  record: z.object({
    project: z.string(),
    number: z.number().int().positive(),
    source_environment: z.string(),
    parent_version: z.string().optional(),
    plan: z.unknown(),
    images: z.record(z.string(), TransferImage),
    verifier_image: TransferImage.optional(),
    volumes: z.record(z.string(), z.object({ bytes: z.number().int().nonnegative() })),
    tests: z.boolean(),
    sizes: z.object({ layer_bytes: z.number(), volume_bytes: z.number() }),
    created_at: z.string(),
  }),
  parts: z.array(TransferPart),
});
export type TransferManifest = z.infer<typeof TransferManifest>;

/** One entry of a part, in the sender's walk order (sorted names, parents first). */
export const TransferEntry = z.object({
  /** Relative, `/`-separated, no `.`/`..` components. */
  path: z.string().min(1).max(4096),
  type: z.enum(["dir", "file", "symlink"]),
  mode: z.number().int().nonnegative(),
  uid: z.number().int().nonnegative(),
  gid: z.number().int().nonnegative(),
  mtime_ms: z.number(),
  /** A file's length. */
  size: z.number().int().nonnegative().default(0),
  /** A resumed file's data starts here (the receiver has the bytes before it). */
  offset: z.number().int().nonnegative().default(0),
  /** A symlink's target (never followed by the receiver). */
  target: z.string().max(4096).optional(),
});
export type TransferEntry = z.infer<typeof TransferEntry>;

/** The receiver's answer to "what do you have already", sent before any byte of the version. */
export const TransferResume = z.object({
  /** The receiver holds the version already: nothing is sent. */
  complete: z.boolean().default(false),
  /** Layer chain ids the receiver's engine has: their layers are not sent. */
  chain_ids: z.array(z.string()).default([]),
  /** Parts the receiver verified and kept from an earlier attempt. */
  done: z.array(z.string()).default([]),
  /** Where the part the earlier attempt was in stopped: entries up to `after` are there. */
  current: z
    .object({
      part: z.string(),
      after: z.string().optional(),
      /** The next entry was a file cut at `offset` bytes. */
      file: z.object({ path: z.string(), offset: z.number().int().nonnegative() }).optional(),
    })
    .optional(),
});
export type TransferResume = z.infer<typeof TransferResume>;

/** What a receiver reports with the version it registered. */
export const TransferEvidence = z.object({
  from: z.string(),
  bytes: z.number().int(),
  records: z.number().int(),
  parts: z.array(z.string()),
  /** Parts kept from an earlier, interrupted attempt. */
  resumed_parts: z.array(z.string()),
  resumed_bytes: z.number().int(),
  layers_sent: z.number().int(),
  layers_skipped: z.number().int(),
  /** Special files (devices, fifos, sockets) of volumes, not transferred. */
  skipped_special: z.number().int(),
  duration_ms: z.number().int(),
});
export type TransferEvidence = z.infer<typeof TransferEvidence>;

/**
 * A direct transfer's ticket (docs/reference/protocol.md#direct-transfers): minted by the control
 * plane for one (version, sender, receiver), given to both, presented once by the sender on its
 * connection to the receiver's transfer listener. 32 random bytes, base64url.
 */
export const TransferTicket = z.string().regex(/^[A-Za-z0-9_-]{43}$/, "a ticket is 43 base64url characters");

/** version.receive's `direct`: take the version from a connection presenting `ticket`. */
export const DirectReceive = z.object({
  ticket: TransferTicket,
  /** Epoch ms: a connection presenting the ticket later is refused, and the receive fails. */
  expires_at: z.number().int(),
});

/** version.send's `direct`: connect to the receiver's transfer listener and present `ticket`. */
export const DirectSend = z.object({
  /** HOST:PORT, as the control plane checked it. */
  address: z.string().max(64),
  ticket: TransferTicket,
  /** The receiving host's id (the sender names it in its hello line). */
  to: z.string(),
});
export type DirectSend = z.infer<typeof DirectSend>;

/** The first line on a direct connection, sender -> receiver. */
export const DirectHello = z.object({
  ticket: z.string().max(128).optional(),
  version: z.string().max(512),
  from: z.string().max(256),
});
export type DirectHello = z.infer<typeof DirectHello>;

/** The receiver's answer line: `{ok: true}`, or the refusal and the connection closes. */
export const DirectAnswer = z.object({ ok: z.literal(true) }).or(z.object({ error: z.string() }));
export type DirectAnswer = z.infer<typeof DirectAnswer>;
