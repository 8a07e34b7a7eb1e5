import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openStore } from "../store/open-store.js";
import type { Store } from "../store/store.js";
import type { Principal } from "./access.js";
import { AuthService } from "./auth-service.js";

/** Tokens are looked up once, and a deleted token never authenticates again. */

const ADMIN: Principal = { tokenId: "t", name: "admin", role: "admin" };

describe("API token lookups", () => {
  let raw: Store;
  let lookups: number;
  /** While set, token lookups wait for it after reading (a slow answer). */
  let gate: Promise<void> | undefined;
  let auth: AuthService;

  beforeEach(async () => {
    raw = await openStore(":memory:");
    lookups = 0;
    gate = undefined;
    const store = new Proxy(raw, {
      get(target, key) {
        const value = Reflect.get(target, key, target) as (...a: unknown[]) => unknown;
        if (key !== "tokenByHash") return typeof value === "function" ? value.bind(target) : value;
        return async (hash: string) => {
          lookups++;
          const found = await target.tokenByHash(hash);
          await gate;
          return found;
        };
      },
    });
    auth = new AuthService(store);
  });
  afterEach(() => raw.close());

  it("reads a token from the store once; deleting it refuses it at once", async () => {
    const t = await auth.create(ADMIN, { name: "ci", role: "member" });
    const header = `Bearer ${t.token}`;
    expect(await auth.authenticate(header)).toMatchObject({ tokenId: t.id, role: "member" });
    expect(await auth.authenticate(header)).toMatchObject({ tokenId: t.id });
    expect(lookups).toBe(1);
    await auth.delete(ADMIN, t.id);
    await expect(auth.authenticate(header)).rejects.toThrow("API token is not valid");
    // An unknown token is looked up every time (nothing is kept for it).
    await expect(auth.authenticate(header)).rejects.toThrow("API token is not valid");
    expect(lookups).toBe(3);
  });

  it("a lookup that a deletion overtook is answered, and not kept", async () => {
    const t = await auth.create(ADMIN, { name: "ci", role: "member" });
    const header = `Bearer ${t.token}`;
    let open!: () => void;
    gate = new Promise((r) => {
      open = r;
    });
    const racing = auth.authenticate(header);
    await auth.delete(ADMIN, t.id);
    gate = undefined;
    open();
    // It read the token before the deletion, and answers with it (the two were concurrent)...
    expect(await racing).toMatchObject({ tokenId: t.id });
    // ...but nothing after the deletion sees it.
    await expect(auth.authenticate(header)).rejects.toThrow("API token is not valid");
  });
});
