import { mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { type EnvironmentRecord, RecordStore } from "./records.js";

describe("RecordStore", () => {
  let dir = "";
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it("lists what exists when a record goes between the listing and its read", async () => {
    dir = await mkdtemp(join(tmpdir(), "denv-records-"));
    const records = new RecordStore(dir);
    await records.init();
    const kept = { id: "shop/alpha", project: "shop" } as unknown as EnvironmentRecord;
    await records.putEnvironment(kept);
    // A name the listing sees whose file is gone when read: what a destroy running alongside
    // leaves for an instant (the link points nowhere, so its read fails with ENOENT).
    await symlink(join(dir, "gone.json"), join(dir, "environments", "shop_verify-1.json"));
    expect(await records.environments()).toEqual([kept]);
  });
});
