import { spawnSync } from "node:child_process";
import {
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { afterAll, describe, expect, it } from "vitest";
import { extractTar } from "./tar-extract.js";
import { encodeHeader } from "./tar-header.js";
import { packTar } from "./tar-pack.js";

const made: string[] = [];
const tmp = () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "denv-sdk-tar-"));
  made.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});
const LONG = `${"deep/".repeat(30)}file-with-a-long-name-é.txt`;

function tree(): string {
  const dir = tmp();
  mkdirSync(path.join(dir, "src", path.dirname(LONG)), { recursive: true });
  writeFileSync(path.join(dir, "src", "a.txt"), "alpha\n");
  writeFileSync(path.join(dir, "src", LONG), "long\n");
  writeFileSync(path.join(dir, "src", "big.bin"), Buffer.alloc(300_000, 7));
  symlinkSync("a.txt", path.join(dir, "src", "link"));
  return path.join(dir, "src");
}

function gnuTar(args: string[], input?: Buffer): { stdout: string; status: number | null } {
  const run = spawnSync(
    "tar",
    args,
    input === undefined ? { encoding: "utf8" } : { input, encoding: "utf8" },
  );
  return { stdout: run.stdout, status: run.status };
}

describe("tar", () => {
  it("packs what GNU tar reads: long and non-ASCII names, symlinks, large files", async () => {
    const src = tree();
    const archive = await buffer(packTar(src));
    const out = tmp();
    expect(gnuTar(["-x", "-f", "-", "-C", out], archive).status).toBe(0);
    expect(readFileSync(path.join(out, "src", LONG), "utf8")).toBe("long\n");
    expect(readFileSync(path.join(out, "src", "big.bin")).length).toBe(300_000);
    expect(readlinkSync(path.join(out, "src", "link"))).toBe("a.txt");
  });

  it("extracts what GNU tar writes, in any chunking", async () => {
    const src = tree();
    const archive = Buffer.from(
      spawnSync("tar", ["-c", "-f", "-", "--format=gnu", "-C", path.dirname(src), "src"]).stdout as Buffer,
    );
    const chunks: Buffer[] = [];
    for (let i = 0; i < archive.length; i += 777) chunks.push(archive.subarray(i, i + 777));
    const out = tmp();
    const result = await extractTar(Readable.from(chunks), out);
    expect(result.bytes).toBe(6 + 5 + 300_000);
    expect(readFileSync(path.join(out, "src", LONG), "utf8")).toBe("long\n");
    expect(lstatSync(path.join(out, "src", "link")).isSymbolicLink()).toBe(true);
  });

  it("packs a folder's contents at the top level, filtered", async () => {
    const src = tree();
    const archive = await buffer(packTar(src, { name: ".", filter: (rel) => !rel.startsWith("deep") }));
    const listed = gnuTar(["-t", "-f", "-"], archive).stdout.trim().split("\n");
    expect(listed).toEqual(["a.txt", "big.bin", "link"]);
  });

  it("renames entries on extraction", async () => {
    const src = tree();
    const out = tmp();
    await extractTar(packTar(path.join(src, "a.txt")), out, {
      mapName: (n) => n.replace(/^a\.txt/, "renamed"),
    });
    expect(readFileSync(path.join(out, "renamed"), "utf8")).toBe("alpha\n");
  });

  it("writes nothing outside the destination", async () => {
    const entry = (name: string, type: "file" | "symlink" | "link", linkname = "", content = "") =>
      Buffer.concat([
        encodeHeader({ name, type, mode: 0o644, size: content.length, mtime: 0, linkname }),
        Buffer.from(content),
        Buffer.alloc(content.length === 0 ? 0 : 512 - content.length),
      ]);
    const end = Buffer.alloc(1024);
    const cases: [Buffer, string][] = [
      [entry("../evil", "file", "", "x"), "refused: tar entry '../evil' climbs out (..)"],
      [entry("/etc/evil", "file", "", "x"), "refused: tar entry '/etc/evil' is an absolute path"],
      [
        Buffer.concat([entry("a", "symlink", "/tmp"), entry("a/evil", "file", "", "x")]),
        "refused: tar entry 'a/evil' goes through a symlink",
      ],
      [entry("h", "link", "../../etc/passwd"), "refused: tar entry 'h' climbs out (..)"],
    ];
    for (const [archive, message] of cases) {
      const out = tmp();
      await expect(
        extractTar(Readable.from([Buffer.concat([archive, end])]), path.join(out, "dest")),
      ).rejects.toThrow(`${message}; nothing is written outside the destination`);
    }
  });

  it("drops setuid bits and says when the stream is cut", async () => {
    const header = encodeHeader({ name: "s", type: "file", mode: 0o4755, size: 1, mtime: 0, linkname: "" });
    const out = tmp();
    await extractTar(Readable.from([header, Buffer.from("x"), Buffer.alloc(511 + 1024)]), out);
    expect(lstatSync(path.join(out, "s")).mode & 0o7000).toBe(0);
    await expect(extractTar(Readable.from([header]), tmp())).rejects.toThrow(
      "the tar stream ended in the middle of an entry",
    );
  });
});
