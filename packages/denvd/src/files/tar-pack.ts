import { buffer } from "node:stream/consumers";
import { pack } from "tar-stream";

export interface PackEntry {
  name: string;
  type?: "file" | "directory" | "symlink" | "link" | "fifo" | "character-device" | "block-device";
  /** Regular files only; other types carry no content. */
  content?: Buffer | string;
  mode?: number;
  linkname?: string;
  uid?: number;
  gid?: number;
}

/**
 * A tar of the given entries, in memory: for small archives built by callers and tests. Entry
 * headers are written as given, nothing is checked (that is guardTar's job), and mtimes are
 * fixed so the same entries make the same bytes.
 */
export async function packEntries(entries: readonly PackEntry[]): Promise<Buffer> {
  const archive = pack();
  const collected = buffer(archive);
  for (const entry of entries) {
    const type = entry.type ?? "file";
    const header = {
      name: entry.name,
      type,
      mode: entry.mode ?? (type === "directory" ? 0o755 : 0o644),
      linkname: entry.linkname ?? "",
      uid: entry.uid ?? 0,
      gid: entry.gid ?? 0,
      mtime: new Date(0),
    };
    await new Promise<void>((resolve, reject) => {
      const done = (err?: Error | null) => (err ? reject(err) : resolve());
      if (type === "file") archive.entry(header, entry.content ?? "", done);
      else archive.entry(header, done);
    });
  }
  archive.finalize();
  return await collected;
}
