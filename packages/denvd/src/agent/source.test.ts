import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { receiveSource } from "./source.js";

/**
 * A project source read from a child's stdout (as `git archive` gives it to a deploy): a child
 * that exits before the source is read must not lose what it wrote. Node resumes, and so drops,
 * the data of a child's stdout that has no reader when the child exits; read after an await, a
 * small archive arrived as 0 entries about one time in three (so 40 tries all but always see it).
 */
describe("receiveSource", () => {
  const root = mkdtempSync(join(tmpdir(), "denv-source-"));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("keeps every byte of a child that exits before the source is read", async () => {
    const project = join(root, "project");
    spawnSync("mkdir", ["-p", project]);
    writeFileSync(join(project, "compose.yaml"), "services:\n  app:\n    image: debian\n");
    writeFileSync(join(project, "README"), "hello\n");
    const tar = join(root, "project.tar");
    expect(spawnSync("tar", ["-c", "-f", tar, "-C", project, "."]).status).toBe(0);
    const counts: number[] = [];
    for (let i = 0; i < 40; i++) {
      // Handed over at once, as fetchGitSource does; cat is gone before the first chunk is read.
      const child = spawn("cat", [tar], { stdio: ["ignore", "pipe", "ignore"] });
      await using source = await receiveSource(child.stdout, join(root, "tmp"));
      counts.push(source.entries);
      expect(readFileSync(join(source.dir, "compose.yaml"), "utf8")).toContain("services:");
    }
    expect(new Set(counts)).toEqual(new Set([2])); // compose.yaml and README, every time
  });
});
