import { SpecialFileReasons } from "@denv/spec";
import { describe, expect, it } from "vitest";
import { tarGuardFixture } from "./tar-guard-fixture.js";
import { type PackEntry, packEntries } from "./tar-pack.js";

const { refusal, expectRefused } = tarGuardFixture();

/** Expects the archive of `entries` refused at `path`, a symlink that escapes (or is written through). */
const expectEscape = (entries: PackEntry[], path: string) =>
  expectRefused(entries, path, SpecialFileReasons.symlinkEscapes);

describe("guardTar refuses links that escape (protection 3)", () => {
  it("refuses symlinks whose target leaves the archive root", async () => {
    await expectEscape([{ name: "etc", type: "symlink", linkname: "/etc" }], "etc");
    await expectEscape([{ name: "a/b/up", type: "symlink", linkname: "../../../x" }], "a/b/up");
    await expectEscape([{ name: "root", type: "symlink", linkname: ".." }], "root");
    const err = await refusal(
      await packEntries([{ name: "out/key", type: "symlink", linkname: "/root/.ssh/id_ed25519" }]),
    );
    expect(err.message).toBe(
      "refused: 'out/key' is a symlink that escapes the destination; special files are refused in uploads and submissions (protection 3)",
    );
  });

  it("resolves symlink targets through the archive's own symlinks, not just lexically", async () => {
    // sub/up -> .. stays inside, but link -> sub/up/.. is the parent of the root.
    await expectEscape(
      [
        { name: "sub/up", type: "symlink", linkname: ".." },
        { name: "link", type: "symlink", linkname: "sub/up/.." },
      ],
      "link",
    );
    // A link used as a directory in a loop cannot be shown to stay inside.
    await expectEscape(
      [
        { name: "a", type: "symlink", linkname: "b/x" },
        { name: "b", type: "symlink", linkname: "a/x" },
      ],
      "a",
    );
  });

  it("refuses a symlink that a later entry turns into an escape", async () => {
    // link resolves lexically to sub when it is read; sub/up arrives afterwards.
    await expectEscape(
      [
        { name: "link", type: "symlink", linkname: "sub/up/.." },
        { name: "sub/", type: "directory" },
        { name: "sub/up", type: "symlink", linkname: ".." },
      ],
      "link",
    );
  });

  it("refuses entries written through or onto a symlink the archive planted", async () => {
    // The classic: a -> /etc, then a/passwd. The link itself is refused first.
    await expectEscape(
      [
        { name: "a", type: "symlink", linkname: "/etc" },
        { name: "a/passwd", content: "root::0:0::/:/bin/sh" },
      ],
      "a",
    );
    // Through a link that stays inside: the write lands where the link points, so it is refused too.
    await expectEscape(
      [
        { name: "sub/", type: "directory" },
        { name: "a", type: "symlink", linkname: "sub" },
        { name: "a/passwd", content: "x" },
      ],
      "a/passwd",
    );
    await expectEscape(
      [
        { name: "a", type: "symlink", linkname: "sub" },
        { name: "a", content: "x" },
      ],
      "a",
    );
    // A symlink over a directory that already holds entries: extractors disagree on what follows.
    await expectEscape(
      [
        { name: "d/", type: "directory" },
        { name: "d/f", content: "x" },
        { name: "d", type: "symlink", linkname: "e" },
      ],
      "d",
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
});
