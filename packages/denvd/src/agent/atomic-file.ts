import { randomBytes } from "node:crypto";
import { open, rename, rm } from "node:fs/promises";

/**
 * Writes a file so that a reader (or denvd after a crash) sees the old content or the new one,
 * never a torn mix: write a sibling temp file, fsync it, rename it over the target. The mode is
 * set when the temp file is created, so a secret is never readable by others, not even briefly.
 */
export async function writeFileAtomic(path: string, content: string, mode = 0o600): Promise<void> {
  const tmp = `${path}.${randomBytes(4).toString("hex")}.tmp`;
  const fh = await open(tmp, "wx", mode);
  try {
    await fh.writeFile(content);
    await fh.sync();
  } catch (err) {
    await fh.close();
    await rm(tmp, { force: true });
    throw err;
  }
  await fh.close();
  await rename(tmp, path);
}
