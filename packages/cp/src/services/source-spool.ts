import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, open, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { type Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import { DenvError } from "@denv/spec";
import type { SourceEvidence } from "../engine/requests.js";

/**
 * A deploy's uploaded source, spooled to one file under the data directory for the life of the
 * deployment (so a run resumed after a restart can stream it again) and deleted when the
 * deployment ends. gzip uploads are unpacked here so hosts always receive a plain tar.
 */
export async function spoolSource(
  body: Readable,
  dir: string,
  deploymentId: string,
  maxBytes: number,
): Promise<{ path: string; evidence: SourceEvidence }> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const raw = join(dir, `${deploymentId}.upload`);
  const path = join(dir, `${deploymentId}.tar`);
  const hash = createHash("sha256");
  let uploadBytes = 0;
  const meter = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      uploadBytes += chunk.length;
      if (uploadBytes > maxBytes) {
        cb(new DenvError("invalid_request", `the upload is larger than the limit of ${maxBytes} bytes`));
        return;
      }
      hash.update(chunk);
      cb(null, chunk);
    },
  });
  try {
    await pipeline(body, meter, createWriteStream(raw, { mode: 0o600 }));
    if (uploadBytes === 0)
      throw new DenvError("invalid_request", "the upload is empty: send the project folder as a tar");
    const gzip = await isGzip(raw);
    if (gzip) {
      await pipeline(createReadStream(raw), createGunzip(), createWriteStream(path, { mode: 0o600 })).catch(
        (err: unknown) => {
          throw new DenvError("invalid_request", `the upload is not a valid gzip stream: ${String(err)}`);
        },
      );
      await rm(raw, { force: true });
    } else {
      await rename(raw, path);
    }
    const tarBytes = (await stat(path)).size;
    return {
      path,
      evidence: { upload_bytes: uploadBytes, tar_bytes: tarBytes, sha256: hash.digest("hex"), gzip },
    };
  } catch (err) {
    await rm(raw, { force: true });
    await rm(path, { force: true });
    throw err;
  }
}

async function isGzip(path: string): Promise<boolean> {
  const fh = await open(path, "r");
  try {
    const head = Buffer.alloc(2);
    await fh.read(head, 0, 2, 0);
    return head[0] === 0x1f && head[1] === 0x8b;
  } finally {
    await fh.close();
  }
}
