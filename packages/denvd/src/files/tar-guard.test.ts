import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  chmod,
  link,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  rm,
  symlink,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { promisify } from "node:util";
import { DenvError, Protection, type SpecialFileReason, SpecialFileReasons } from "@denv/spec";
import { extract, pack } from "tar-stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type GuardOptions, guardTar } from "./tar-guard.js";
import { type PackEntry, packEntries } from "./tar-pack.js";

const run = promisify(execFile);

interface ReadEntry {
  name: string;
  type: string;
  mode: number;
  uid: number;
  gid: number;
  uname: string;
  gname: string;
  linkname: string | null;
  content: Buffer;
}

async function readTar(path: string): Promise<ReadEntry[]> {
  const parser = extract();
  parser.end(await readFile(path));
  const entries: ReadEntry[] = [];
  for await (const entry of parser) {
    const { name, type, mode, uid, gid, uname, gname, linkname } = entry.header;
    entries.push({ name, type, mode, uid, gid, uname, gname, linkname, content: await buffer(entry) });
  }
  return entries;
}

let scratch: string;
beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "denv-tar-guard-test-"));
});
afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

async function freshDir(prefix: string): Promise<string> {
  return mkdtemp(join(scratch, `${prefix}-`));
}

/** Runs guardTar expecting a refusal; checks that nothing was left in the temp dir. */
async function refusal(input: Buffer, options: GuardOptions = {}): Promise<DenvError> {
  const tmpDir = await freshDir("tmp");
  const err = await guardTar(input, { ...options, tmpDir }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(DenvError);
  expect(await readdir(tmpDir)).toEqual([]);
  return err as DenvError;
}

async function expectRefused(
  entries: PackEntry[],
  path: string,
  reason: SpecialFileReason,
  options: GuardOptions = {},
): Promise<void> {
  const err = await refusal(await packEntries(entries), options);
  expect(err.code).toBe("special_file");
  expect(err.status).toBe(422);
  expect(err.message).toBe(Protection.specialFile(path, reason));
}

/** The same entry with another typeflag, for types tar-stream will not write. */
function withTypeflag(archive: Buffer, flag: string): Buffer {
  const out = Buffer.from(archive);
  out[156] = flag.charCodeAt(0);
  out.fill(" ", 148, 156);
  let sum = 0;
  for (const byte of out.subarray(0, 512)) sum += byte;
  out.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "latin1");
  return out;
}

describe("guardTar accepts archives that stay inside", () => {
  it("round-trips files, nested directories, in-bounds links and long names", async () => {
    const longDir = `deep/${"d".repeat(90)}/${"e".repeat(90)}`;
    const longFile = `${longDir}/${"f".repeat(120)}.txt`;
    const big = randomBytes(3 * 1024 * 1024 + 17);
    const entries: PackEntry[] = [
      { name: "a/", type: "directory" },
      { name: "a/b/", type: "directory", mode: 0o700 },
      { name: "a/b/hello.txt", content: "hello\n", mode: 0o640 },
      { name: "a/b/big.bin", content: big },
      { name: "a/up", type: "symlink", linkname: "../top.txt" },
      { name: "a/b/dot", type: "symlink", linkname: "." },
      { name: "top.txt", content: "top" },
      { name: "same.txt", type: "link", linkname: "a/b/hello.txt" },
      { name: `${longDir}/`, type: "directory" },
      { name: longFile, content: "long" },
      { name: `${longDir}/to-top`, type: "symlink", linkname: `../../../${"t".repeat(110)}` },
    ];
    const tmpDir = await freshDir("tmp");
    await using guarded = await guardTar(await packEntries(entries), { tmpDir });

    expect(guarded.entries).toBe(entries.length);
    expect(guarded.bytes).toBe(6 + big.length + 3 + 4);
    const out = await readTar(guarded.path);
    expect(out.map((e) => [e.name, e.type, e.linkname ?? ""])).toEqual(
      entries.map((e) => [e.name, e.type ?? "file", e.linkname ?? ""]),
    );
    expect(out.find((e) => e.name === "a/b/big.bin")?.content.equals(big)).toBe(true);
    expect(out.find((e) => e.name === longFile)?.content.toString()).toBe("long");
    expect(out.find((e) => e.name === "a/b/hello.txt")?.mode).toBe(0o640);
    expect(out.find((e) => e.name === "a/b/")?.mode).toBe(0o700);

    await guarded.cleanup();
    expect(await readdir(tmpDir)).toEqual([]);
  });

  it("keeps going over archives of many entries", async () => {
    const entries = Array.from(
      { length: 2500 },
      (_, i): PackEntry => ({ name: `d${i % 10}/f${i}`, content: `${i}` }),
    );
    await using guarded = await guardTar(await packEntries(entries));
    expect(guarded.entries).toBe(2500);
    expect((await readTar(guarded.path)).at(-1)?.content.toString()).toBe("2499");
  });

  it("takes a stream as well as a buffer", async () => {
    const archive = await packEntries([{ name: "x.txt", content: "x" }]);
    const chunks = Array.from({ length: archive.length / 512 }, (_, i) =>
      archive.subarray(i * 512, (i + 1) * 512),
    );
    await using guarded = await guardTar(Readable.from(chunks), { tmpDir: await freshDir("tmp") });
    expect((await readTar(guarded.path)).map((e) => e.content.toString())).toEqual(["x"]);
  });

  it("rewrites the owner of every entry when asked, and keeps the headers otherwise", async () => {
    const archive = await packEntries([
      { name: "d/", type: "directory", uid: 0, gid: 0 },
      { name: "d/f", content: "f", uid: 12, gid: 34 },
      { name: "d/l", type: "symlink", linkname: "f", uid: 0, gid: 0 },
    ]);
    await using rewritten = await guardTar(archive, { owner: { uid: 1000, gid: 1001 } });
    for (const entry of await readTar(rewritten.path)) {
      expect([entry.uid, entry.gid, entry.uname, entry.gname]).toEqual([1000, 1001, "", ""]);
    }
    await using kept = await guardTar(archive);
    expect((await readTar(kept.path)).map((e) => [e.uid, e.gid])).toEqual([
      [0, 0],
      [12, 34],
      [0, 0],
    ]);
  });

  it("drops pax extended headers, file capabilities among them", async () => {
    const archive = pack();
    archive.entry(
      { name: "ping", mode: 0o755, pax: { "SCHILY.xattr.security.capability": "\u0001\u0000\u0000\u0002" } },
      "elf",
    );
    archive.finalize();
    await using guarded = await guardTar(await buffer(archive));
    const parser = extract();
    parser.end(await readFile(guarded.path));
    for await (const entry of parser) {
      expect([entry.header.name, entry.header.pax ?? null]).toEqual(["ping", null]);
      expect((await buffer(entry)).toString()).toBe("elf");
    }
  });

  it("normalises a leading ./ and drops the entry naming the root itself", async () => {
    await using guarded = await guardTar(
      await packEntries([
        { name: "./", type: "directory", mode: 0o777 },
        { name: "./x/", type: "directory" },
        { name: "./x/./y.txt", content: "y" },
      ]),
    );
    expect((await readTar(guarded.path)).map((e) => e.name)).toEqual(["x/", "x/y.txt"]);
    expect(guarded.entries).toBe(2);
  });

  it("strips leading components like tar --strip-components, hard-link targets included", async () => {
    // What Docker's getArchive returns for a directory: its basename first.
    await using guarded = await guardTar(
      await packEntries([
        { name: "out/", type: "directory" },
        { name: "out/result.json", content: "{}" },
        { name: "out/copy.json", type: "link", linkname: "out/result.json" },
        { name: "out/latest", type: "symlink", linkname: "result.json" },
      ]),
      { strip: 1 },
    );
    expect((await readTar(guarded.path)).map((e) => [e.name, e.linkname ?? ""])).toEqual([
      ["result.json", ""],
      ["copy.json", "result.json"],
      ["latest", "result.json"],
    ]);
  });

  it("follows symlink chains that stay inside, as pnpm's node_modules has them", async () => {
    await using guarded = await guardTar(
      await packEntries([
        { name: "node_modules/.bin/tool", type: "symlink", linkname: "../pkg/bin/cli.js" },
        { name: "node_modules/.pnpm/pkg@1/node_modules/pkg/bin/cli.js", content: "#!/usr/bin/env node" },
        { name: "node_modules/pkg", type: "symlink", linkname: ".pnpm/pkg@1/node_modules/pkg" },
        { name: "sub/up", type: "symlink", linkname: ".." },
        { name: "root-again", type: "symlink", linkname: "sub/up/sub/up" },
        { name: "loop-a", type: "symlink", linkname: "loop-b" },
        { name: "loop-b", type: "symlink", linkname: "loop-a" },
      ]),
    );
    expect(guarded.entries).toBe(7);
  });

  it("accepts what the real tar makes of a tree, in gnu and pax formats, and tar extracts it unchanged", async () => {
    const root = await freshDir("tree");
    const src = join(root, "src");
    const longName = `${"n".repeat(130)}.txt`;
    await mkdir(join(src, "nested", "deeper"), { recursive: true });
    await writeFile(join(src, "nested", "deeper", longName), "long name");
    await writeFile(join(src, "nested", "a.txt"), "a");
    await symlink("../a.txt", join(src, "nested", "deeper", "to-a"));
    await link(join(src, "nested", "a.txt"), join(src, "hard.txt"));
    for (const format of ["gnu", "pax"]) {
      const { stdout } = await run(
        "tar",
        [`--format=${format}`, "--sort=name", "-cf", "-", "-C", root, "src"],
        {
          encoding: "buffer",
        },
      );
      await using guarded = await guardTar(stdout);
      const dest = await freshDir(`extract-${format}`);
      await run("tar", ["-xf", guarded.path, "-C", dest]);
      const copy = join(dest, "src");
      expect(await readFile(join(copy, "nested", "deeper", longName), "utf8")).toBe("long name");
      expect(await readFile(join(copy, "hard.txt"), "utf8")).toBe("a");
      expect(await readlink(join(copy, "nested", "deeper", "to-a"))).toBe("../a.txt");
      expect(await readFile(join(copy, "nested", "deeper", "to-a"), "utf8")).toBe("a");
    }
  });
});

describe("guardTar refuses special files (protection 3)", () => {
  it("says exactly what it refused, in the words docs quote", async () => {
    await expectRefused(
      [{ name: "dev/null", type: "character-device" }],
      "dev/null",
      SpecialFileReasons.device,
    );
    const err = await refusal(await packEntries([{ name: "dev/null", type: "character-device" }]));
    expect(err.message).toBe(
      "refused: 'dev/null' is a device node; special files are refused in uploads and submissions (protection 3)",
    );
  });

  it("refuses device nodes and FIFOs", async () => {
    await expectRefused([{ name: "sda", type: "block-device" }], "sda", SpecialFileReasons.device);
    await expectRefused(
      [
        { name: "d/", type: "directory" },
        { name: "d/pipe", type: "fifo" },
      ],
      "d/pipe",
      "a FIFO",
    );
  });

  it("refuses entries of types it does not know (sparse files, volume labels, ...)", async () => {
    const archive = await packEntries([{ name: "odd", content: "" }]);
    for (const flag of ["S", "V", "D"]) {
      const err = await refusal(withTypeflag(archive, flag));
      expect(err.message).toBe(Protection.specialFile("odd", SpecialFileReasons.unsupported));
    }
  });

  it("refuses setuid and setgid bits, on files and directories", async () => {
    await expectRefused([{ name: "su", content: "x", mode: 0o4755 }], "su", SpecialFileReasons.setid);
    await expectRefused([{ name: "sg", content: "x", mode: 0o2755 }], "sg", SpecialFileReasons.setid);
    await expectRefused(
      [{ name: "shared/", type: "directory", mode: 0o2775 }],
      "shared/",
      SpecialFileReasons.setid,
    );
    const err = await refusal(await packEntries([{ name: "bin/tool", content: "x", mode: 0o6755 }]));
    expect(err.message).toBe(
      "refused: 'bin/tool' is a file with the setuid or setgid bit; special files are refused in uploads and submissions (protection 3)",
    );
  });

  it("refuses paths that climb out or are absolute", async () => {
    await expectRefused([{ name: "../evil", content: "x" }], "../evil", SpecialFileReasons.climbs);
    await expectRefused([{ name: "a/../../evil", content: "x" }], "a/../../evil", SpecialFileReasons.climbs);
    // Even a `..` that comes back inside: no legitimate tar writer produces one.
    await expectRefused([{ name: "a/../b", content: "x" }], "a/../b", SpecialFileReasons.climbs);
    await expectRefused([{ name: "/etc/passwd", content: "x" }], "/etc/passwd", SpecialFileReasons.absolute);
    const err = await refusal(await packEntries([{ name: "/root/.ssh/authorized_keys", content: "k" }]));
    expect(err.message).toBe(
      "refused: '/root/.ssh/authorized_keys' is an absolute path; special files are refused in uploads and submissions (protection 3)",
    );
  });

  it("refuses symlinks whose target leaves the archive root", async () => {
    await expectRefused(
      [{ name: "etc", type: "symlink", linkname: "/etc" }],
      "etc",
      SpecialFileReasons.symlinkEscapes,
    );
    await expectRefused(
      [{ name: "a/b/up", type: "symlink", linkname: "../../../x" }],
      "a/b/up",
      SpecialFileReasons.symlinkEscapes,
    );
    await expectRefused(
      [{ name: "root", type: "symlink", linkname: ".." }],
      "root",
      SpecialFileReasons.symlinkEscapes,
    );
    const err = await refusal(
      await packEntries([{ name: "out/key", type: "symlink", linkname: "/root/.ssh/id_ed25519" }]),
    );
    expect(err.message).toBe(
      "refused: 'out/key' is a symlink that escapes the destination; special files are refused in uploads and submissions (protection 3)",
    );
  });

  it("resolves symlink targets through the archive's own symlinks, not just lexically", async () => {
    // sub/up -> .. stays inside, but link -> sub/up/.. is the parent of the root.
    await expectRefused(
      [
        { name: "sub/up", type: "symlink", linkname: ".." },
        { name: "link", type: "symlink", linkname: "sub/up/.." },
      ],
      "link",
      SpecialFileReasons.symlinkEscapes,
    );
    // A link used as a directory in a loop cannot be shown to stay inside.
    await expectRefused(
      [
        { name: "a", type: "symlink", linkname: "b/x" },
        { name: "b", type: "symlink", linkname: "a/x" },
      ],
      "a",
      SpecialFileReasons.symlinkEscapes,
    );
  });

  it("refuses a symlink that a later entry turns into an escape", async () => {
    // link resolves lexically to sub when it is read; sub/up arrives afterwards.
    await expectRefused(
      [
        { name: "link", type: "symlink", linkname: "sub/up/.." },
        { name: "sub/", type: "directory" },
        { name: "sub/up", type: "symlink", linkname: ".." },
      ],
      "link",
      SpecialFileReasons.symlinkEscapes,
    );
  });

  it("refuses entries written through or onto a symlink the archive planted", async () => {
    // The classic: a -> /etc, then a/passwd. The link itself is refused first.
    await expectRefused(
      [
        { name: "a", type: "symlink", linkname: "/etc" },
        { name: "a/passwd", content: "root::0:0::/:/bin/sh" },
      ],
      "a",
      SpecialFileReasons.symlinkEscapes,
    );
    // Through a link that stays inside: the write lands where the link points, so it is refused too.
    await expectRefused(
      [
        { name: "sub/", type: "directory" },
        { name: "a", type: "symlink", linkname: "sub" },
        { name: "a/passwd", content: "x" },
      ],
      "a/passwd",
      SpecialFileReasons.symlinkEscapes,
    );
    await expectRefused(
      [
        { name: "a", type: "symlink", linkname: "sub" },
        { name: "a", content: "x" },
      ],
      "a",
      SpecialFileReasons.symlinkEscapes,
    );
    // A symlink over a directory that already holds entries: extractors disagree on what follows.
    await expectRefused(
      [
        { name: "d/", type: "directory" },
        { name: "d/f", content: "x" },
        { name: "d", type: "symlink", linkname: "e" },
      ],
      "d",
      SpecialFileReasons.symlinkEscapes,
    );
  });

  it("refuses hard links that escape or name anything but an earlier regular file", async () => {
    const cases: Array<{ entries: PackEntry[]; path: string }> = [
      { entries: [{ name: "h", type: "link", linkname: "/etc/shadow" }], path: "h" },
      { entries: [{ name: "h", type: "link", linkname: "../shadow" }], path: "h" },
      {
        entries: [
          { name: "h", type: "link", linkname: "later" },
          { name: "later", content: "x" },
        ],
        path: "h",
      },
      { entries: [{ name: "h", type: "link", linkname: "missing" }], path: "h" },
      {
        entries: [
          { name: "f", content: "x" },
          { name: "s", type: "symlink", linkname: "f" },
          { name: "d/h", type: "link", linkname: "s" },
        ],
        path: "d/h",
      },
      {
        entries: [
          { name: "dir/", type: "directory" },
          { name: "h", type: "link", linkname: "dir" },
        ],
        path: "h",
      },
    ];
    for (const { entries, path } of cases)
      await expectRefused(entries, path, SpecialFileReasons.hardlinkEscapes);
    const err = await refusal(await packEntries([{ name: "shadow", type: "link", linkname: "/etc/shadow" }]));
    expect(err.message).toBe(
      "refused: 'shadow' is a hard link that escapes the archive; special files are refused in uploads and submissions (protection 3)",
    );
  });

  it("refuses a hard link into components that strip removes", async () => {
    await expectRefused(
      [
        { name: "top", content: "x" },
        { name: "out/h", type: "link", linkname: "top" },
      ],
      "out/h",
      SpecialFileReasons.hardlinkEscapes,
      { strip: 1 },
    );
  });

  it("refuses trees deeper than the limit, counting components after strip", async () => {
    const limits = { maxDepth: 3 };
    await expectRefused([{ name: "a/b/c/d", content: "x" }], "a/b/c/d", SpecialFileReasons.tooDeep, {
      limits,
    });
    await using stripped = await guardTar(await packEntries([{ name: "a/b/c/d", content: "x" }]), {
      limits,
      strip: 1,
    });
    expect(stripped.entries).toBe(1);
    const err = await refusal(await packEntries([{ name: "a/b/c/d/", type: "directory" }]), { limits });
    expect(err.message).toBe(
      "refused: 'a/b/c/d/' is in a tree deeper than the limit; special files are refused in uploads and submissions (protection 3)",
    );
    // Names Linux itself would refuse count as too deep as well.
    const longName = "n".repeat(256);
    await expectRefused([{ name: longName, content: "x" }], longName, SpecialFileReasons.tooDeep);
  });

  it("refuses trees larger than the limit, by bytes and by entries", async () => {
    await expectRefused(
      [
        { name: "a", content: "12345" },
        { name: "b", content: "123456" },
      ],
      "b",
      SpecialFileReasons.tooLarge,
      { limits: { maxBytes: 10 } },
    );
    await using fits = await guardTar(await packEntries([{ name: "a", content: "1234567890" }]), {
      limits: { maxBytes: 10 },
    });
    expect(fits.bytes).toBe(10);
    await expectRefused(
      [
        { name: "1", content: "" },
        { name: "2", content: "" },
        { name: "3", content: "" },
      ],
      "3",
      SpecialFileReasons.tooLarge,
      { limits: { maxEntries: 2 } },
    );
    // Parents an entry implies are paths of the tree too.
    const err = await refusal(await packEntries([{ name: "a/b/c", content: "" }]), {
      limits: { maxEntries: 2 },
    });
    expect(err.message).toBe(
      "refused: 'a/b/c' is in a tree larger than the limit; special files are refused in uploads and submissions (protection 3)",
    );
  });

  it("names the first offending entry", async () => {
    await expectRefused(
      [
        { name: "ok.txt", content: "fine" },
        { name: "pipe", type: "fifo" },
        { name: "/abs", content: "x" },
        { name: "su", content: "x", mode: 0o4755 },
      ],
      "pipe",
      SpecialFileReasons.fifo,
    );
  });

  it("refuses what the real tar archives from a tree with a FIFO and a setuid file", async () => {
    const root = await freshDir("special");
    const src = join(root, "src");
    await mkdir(src);
    await writeFile(join(src, "a.txt"), "a");
    await run("mkfifo", [join(src, "pipe")]);
    await writeFile(join(src, "tool"), "#!/bin/sh\n");
    await chmod(join(src, "tool"), 0o755);
    await run("chmod", ["u+s", join(src, "tool")]);

    const tarOf = async (...paths: string[]) =>
      (await run("tar", ["--sort=name", "-cf", "-", "-C", root, ...paths], { encoding: "buffer" })).stdout;

    const both = await refusal(await tarOf("src"));
    expect(both.message).toBe(
      "refused: 'src/pipe' is a FIFO; special files are refused in uploads and submissions (protection 3)",
    );
    const setuid = await refusal(await tarOf("src/a.txt", "src/tool"));
    expect(setuid.message).toBe(Protection.specialFile("src/tool", SpecialFileReasons.setid));
  });

  it("answers invalid_request for input that is not a tar, leaving nothing behind", async () => {
    const err = await refusal(Buffer.alloc(2048, 7));
    expect(err.code).toBe("invalid_request");
    const archive = await packEntries([{ name: "cut.bin", content: randomBytes(4096) }]);
    const truncated = await refusal(archive.subarray(0, 2048));
    expect(truncated.code).toBe("invalid_request");
  });

  it("passes a failure to write the temp file through as it is", async () => {
    const archive = await packEntries([{ name: "x", content: "x" }]);
    const missing = join(scratch, "no-such-dir");
    await expect(guardTar(archive, { tmpDir: missing })).rejects.toMatchObject({ code: "ENOENT" });
  });

  it("passes an error of the input stream through as it is", async () => {
    const broken = new Error("connection reset");
    const source = new Readable({
      read() {
        this.destroy(broken);
      },
    });
    const tmpDir = await freshDir("tmp");
    await expect(guardTar(source, { tmpDir })).rejects.toBe(broken);
    expect(await readdir(tmpDir)).toEqual([]);
  });
});
