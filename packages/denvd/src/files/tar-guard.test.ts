import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { link, mkdir, readdir, readFile, readlink, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { promisify } from "node:util";
import { extract, pack } from "tar-stream";
import { describe, expect, it } from "vitest";
import { guardTar } from "./tar-guard.js";
import { readTar, tarGuardFixture } from "./tar-guard-fixture.js";
import { type PackEntry, packEntries } from "./tar-pack.js";

const run = promisify(execFile);
const { freshDir } = tarGuardFixture();

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
