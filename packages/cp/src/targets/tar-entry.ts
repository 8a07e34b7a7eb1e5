import { open } from "node:fs/promises";
import { posix } from "node:path";

/**
 * One regular file's text from a plain (ustar or pax) tar on disk, at most `maxBytes`: the cp reads
 * a deploy's compose file from the spooled upload to know, at placement, what the file asks of the
 * target. Undefined when the archive has no such file (the host's validation then says so).
 */
export async function readTarEntry(
  path: string,
  name: string,
  maxBytes = 1024 * 1024,
): Promise<string | undefined> {
  const want = posix.normalize(name).replace(/^(\.\/)+/, "");
  const fh = await open(path, "r");
  try {
    const header = Buffer.alloc(512);
    let offset = 0;
    let paxPath: string | undefined;
    for (;;) {
      const { bytesRead } = await fh.read(header, 0, 512, offset);
      if (bytesRead < 512 || header.every((b) => b === 0)) return undefined;
      const size = Number.parseInt(
        header.toString("latin1", 124, 136).replace(/\0.*$/s, "").trim() || "0",
        8,
      );
      const type = String.fromCharCode(header[156] ?? 0);
      const prefix = header.toString("utf8", 345, 500).replace(/\0.*$/s, "");
      const short = header.toString("utf8", 0, 100).replace(/\0.*$/s, "");
      const entryName = paxPath ?? (prefix ? `${prefix}/${short}` : short);
      const body = offset + 512;
      if (type === "x") {
        const pax = Buffer.alloc(Math.min(size, 64 * 1024));
        await fh.read(pax, 0, pax.length, body);
        paxPath = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(pax.toString("utf8"))?.[1];
      } else {
        paxPath = undefined;
        if ((type === "0" || type === "\0") && posix.normalize(entryName).replace(/^(\.\/)+/, "") === want) {
          if (size > maxBytes) return undefined;
          const buf = Buffer.alloc(size);
          await fh.read(buf, 0, size, body);
          return buf.toString("utf8");
        }
      }
      if (!Number.isFinite(size)) return undefined;
      offset = body + Math.ceil(size / 512) * 512;
    }
  } finally {
    await fh.close();
  }
}
