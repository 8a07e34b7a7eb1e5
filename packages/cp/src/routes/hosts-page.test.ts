import { HOSTS_PAGE, HostMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FakeHost } from "../testing/fake-host.js";
import { deployed, startTestCp, type TestCp } from "../testing/harness.js";

/** GET /v1/hosts a page at a time: limits, the `after` cursor, its refusals, and fresh counts. */

interface Page {
  hosts: Array<{ id: string; environments: number }>;
  next?: string;
}

describe("GET /v1/hosts pages", () => {
  let t: TestCp;
  /** Every host id, as the pages must order them. */
  let all: string[];
  beforeAll(async () => {
    t = await startTestCp();
    const token = (await t.admin.post("/v1/targets/local/join-tokens", { uses: 200 })).body.token;
    // One more than a default page; joined (offline) hosts are listed like the others.
    const names = Array.from({ length: HOSTS_PAGE.default + 1 }, (_, i) => `p-${(i * 37) % 101}`);
    for (const name of names) await FakeHost.join(t.url, token, { name });
    all = [...names].sort();
  });
  afterAll(() => t.close());

  const page = async (query: string): Promise<Page> => {
    const r = await t.admin.get(`/v1/hosts${query}`);
    expect(r.status, r.body.error?.message).toBe(200);
    return r.body;
  };
  const idsOf = (p: Page) => p.hosts.map((h) => h.id);

  it(`answers ${HOSTS_PAGE.default} hosts by id by default, and next when more follow`, async () => {
    const first = await page("");
    expect(idsOf(first)).toEqual(all.slice(0, HOSTS_PAGE.default));
    expect(first.next).toBe(all[HOSTS_PAGE.default - 1]);
    const rest = await page(`?after=${first.next}`);
    expect(idsOf(rest)).toEqual(all.slice(HOSTS_PAGE.default));
    expect(rest.next).toBeUndefined();
    const whole = await page(`?limit=${HOSTS_PAGE.max}`);
    expect(idsOf(whole)).toEqual(all);
    expect(whole.next).toBeUndefined();
  });

  it("walks every host exactly once with a small limit, up to a last page without next", async () => {
    const walked: string[] = [];
    let after: string | undefined;
    let pages = 0;
    do {
      const p = await page(`?limit=7${after === undefined ? "" : `&after=${after}`}`);
      expect(p.hosts.length).toBeLessThanOrEqual(7);
      walked.push(...idsOf(p));
      after = p.next;
      pages++;
    } while (after !== undefined);
    expect(walked).toEqual(all);
    expect(pages).toBe(Math.ceil(all.length / 7));
    // Exactly a page's worth left: the page that takes the last hosts has no next.
    expect((await page(`?limit=1&after=${all.at(-2)}`)).next).toBeUndefined();
  });

  it("a cursor need not be a host that exists: one removed meanwhile, or past the end", async () => {
    const gone = all[10] as string;
    expect((await t.admin.del(`/v1/hosts/${gone}`)).status).toBe(200);
    all = all.filter((id) => id !== gone);
    expect(idsOf(await page(`?limit=2&after=${gone}`))).toEqual(all.slice(10, 12));
    expect(await page("?after=zzz")).toEqual({ hosts: [] });
    expect(idsOf(await page("?limit=1&after=a"))).toEqual([all[0]]);
  });

  it("refuses a bad limit or cursor with one line", async () => {
    for (const limit of ["0", "-1", `${HOSTS_PAGE.max + 1}`, "1.5", "ten", "", "99999999999"]) {
      const r = await t.admin.get(`/v1/hosts?limit=${encodeURIComponent(limit)}`);
      expect([limit, r.status, r.body.error]).toEqual([
        limit,
        400,
        { code: "invalid_request", message: HostMessages.pageLimit(HOSTS_PAGE.max) },
      ]);
    }
    expect(HostMessages.pageLimit(HOSTS_PAGE.max)).toBe("limit must be a whole number from 1 to 1000");
    for (const after of ["Upper", "a_b", "../p-1", "-p", "x".repeat(41), ""]) {
      const r = await t.admin.get(`/v1/hosts?after=${encodeURIComponent(after)}`);
      expect([after, r.status, r.body.error]).toEqual([
        after,
        400,
        { code: "invalid_request", message: HostMessages.pageAfter },
      ]);
    }
    expect(HostMessages.pageAfter).not.toContain("\n");
  });
});

describe("GET /v1/hosts counts", () => {
  let t: TestCp;
  beforeAll(async () => {
    t = await startTestCp();
    await t.host({ name: "c1" });
  });
  afterAll(() => t.close());

  const count = async (id: string) =>
    ((await t.admin.get("/v1/hosts")).body as Page).hosts.find((h) => h.id === id)?.environments;

  it("follow every deployment that places or removes an environment as soon as it answers", async () => {
    expect(await count("c1")).toBe(0);
    await deployed(t, "shop");
    expect(await count("c1")).toBe(1);
    const fork = await t.admin.post("/v1/environments/shop/alpha/fork?wait=true", { name: "beta" });
    expect(fork.body.status).toBe("succeeded");
    expect(await count("c1")).toBe(2);
    expect((await t.admin.del("/v1/environments/shop/beta?wait=true")).body.status).toBe("succeeded");
    expect(await count("c1")).toBe(1);
    const scoped = t.admin.as((await t.admin.post("/v1/tokens", { name: "ci", project: "shop" })).body.token);
    expect((await scoped.get("/v1/hosts?limit=1")).body).toEqual({
      hosts: [expect.objectContaining({ id: "c1", environments: 1 })],
    });
  });
});
