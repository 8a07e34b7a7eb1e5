import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmod, mkdir, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import { promisify } from "node:util";
import { Protection, SpecialFileReasons } from "@denv/spec";
import { describe, expect, it } from "vitest";
import { guardTar } from "./tar-guard.js";
import { tarGuardFixture, withTypeflag } from "./tar-guard-fixture.js";
import { packEntries } from "./tar-pack.js";

const run = promisify(execFile);
const { scratch, freshDir, refusal, expectRefused } = tarGuardFixture();

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
    const missing = join(scratch(), "no-such-dir");
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
