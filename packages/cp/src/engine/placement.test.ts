import {
  ControlPlaneMessages,
  DenvError,
  HostMessages,
  PLACEMENT_CANDIDATES_LISTED,
  PlacementMessages,
  type Reservation,
} from "@denv/spec";
import { describe, expect, it } from "vitest";
import type { HostRecord } from "../store/records.js";
import { type CandidateHost, type Choice, choose, describeNeed, reservationOf } from "./placement.js";

/** The placement decision on its own: filters, score terms, evidence and every "no host" error. */

const GiB = 1024 ** 3;
const none: Reservation = { memory_bytes: 0, cpus: 0, pids: 0 };
const need: Reservation = { memory_bytes: 4 * GiB, cpus: 2, pids: 1024 };
const ratio1 = { memory: 1, cpus: 1, pids: 1 };

function host(
  id: string,
  o: Partial<CandidateHost> & {
    labels?: Record<string, string>;
    memory?: number;
    cpus?: number;
    pids?: number;
    draining?: boolean;
  } = {},
): CandidateHost {
  const record: HostRecord = {
    id,
    target: "local",
    credentialHash: "x",
    status: "online",
    labels: o.labels ?? {},
    capacity: {
      cpus: o.cpus ?? 8,
      memory_bytes: o.memory ?? 16 * GiB,
      disk_free_bytes: 100 * GiB,
      ...(o.pids !== undefined ? { pids: o.pids } : {}),
    },
    ...(o.draining ? { drainingAt: "2026-01-01T00:00:00.000Z" } : {}),
    createdAt: "2026-01-01T00:00:00.000Z",
  };
  return {
    host: record,
    online: o.online ?? true,
    environments: o.environments ?? 0,
    reserved: o.reserved ?? none,
    local: o.local ?? false,
  };
}

const MB = 1e6;

const deploy = (hosts: CandidateHost[], extra: Partial<Choice> = {}): Choice => ({
  target: "local",
  hosts,
  need,
  labels: {},
  overcommit: ratio1,
  transferBytesPerSecond: 200 * MB,
  ...extra,
});

function refusal(c: Choice): string {
  try {
    choose(c);
  } catch (err) {
    expect(err).toBeInstanceOf(DenvError);
    expect((err as DenvError).code).toBe("conflict");
    return (err as Error).message;
  }
  throw new Error("expected no host");
}

const row = (p: ReturnType<typeof choose>, id: string) => p.evidence.candidates.find((c) => c.host === id);

describe("placement filters", () => {
  it("leaves out offline and draining hosts and hosts missing a label, each with its reason", () => {
    const p = choose(
      deploy(
        [
          host("a", { online: false, labels: { gpu: "a100" } }),
          host("b", { draining: true, labels: { gpu: "a100" } }),
          host("c", { labels: { gpu: "t4" } }),
          host("d", { labels: { zone: "eu" } }),
          host("e", { labels: { gpu: "a100", zone: "eu" } }),
        ],
        { labels: { gpu: "a100" } },
      ),
    );
    expect(p.hostId).toBe("e");
    expect(p.evidence.candidates.map((c) => [c.host, c.excluded])).toEqual([
      ["a", "offline"],
      ["b", "draining"],
      ["c", "missing label gpu=a100"],
      ["d", "missing label gpu=a100"],
      ["e", undefined],
    ]);
    expect(PlacementMessages.missingLabel("gpu=a100")).toBe("missing label gpu=a100");
    expect(p.evidence).toMatchObject({ host: "e", need, labels: { gpu: "a100" } });
    expect(p.reason).toBe("the only candidate left (see the others' reasons)");
  });

  it("leaves out a host whose memory, cpus or pids cannot take the caps, with the numbers", () => {
    const p = choose(
      deploy([
        host("mem", { reserved: { memory_bytes: 14 * GiB, cpus: 0, pids: 0 } }),
        host("cpu", { cpus: 3, reserved: { memory_bytes: 0, cpus: 2, pids: 0 } }),
        host("pid", { pids: 2000, reserved: { memory_bytes: 0, cpus: 0, pids: 1500 } }),
        // A host that does not say how many processes it runs is not checked for pids.
        host("ok", { reserved: { memory_bytes: 0, cpus: 0, pids: 1e9 } }),
      ]),
    );
    expect(p.hostId).toBe("ok");
    expect(row(p, "mem")?.excluded).toBe("not enough memory: needs 4 GiB, 2 GiB free of 16 GiB");
    expect(row(p, "mem")?.excluded).toBe(PlacementMessages.notEnough("memory", "4 GiB", "2 GiB", "16 GiB"));
    expect(row(p, "mem")?.free).toEqual({ memory_bytes: 2 * GiB, cpus: 8 });
    expect(row(p, "cpu")?.excluded).toBe("not enough cpus: needs 2, 1 free of 3");
    expect(row(p, "pid")?.excluded).toBe("not enough pids: needs 1024, 500 free of 2000");
    expect(row(p, "ok")?.excluded).toBeUndefined();
  });

  it("commits capacity x overcommit: the same host fits once memory may be overcommitted 1.5 times", () => {
    const full = host("h1", { reserved: { memory_bytes: 14 * GiB, cpus: 0, pids: 0 } });
    expect(refusal(deploy([full]))).toBe(
      PlacementMessages.noHostWithRoom(
        "local",
        "4 GiB memory, 2 cpus, 1024 pids",
        "h1: not enough memory: needs 4 GiB, 2 GiB free of 16 GiB",
        "--placement-overcommit-memory",
      ),
    );
    const p = choose(deploy([full], { overcommit: { memory: 1.5, cpus: 1, pids: 1 } }));
    expect(p.hostId).toBe("h1");
    expect(row(p, "h1")?.free).toEqual({ memory_bytes: 10 * GiB, cpus: 8 });
    // 24 GiB allowed, 18 GiB used after this one: a quarter of the memory left is the smallest share.
    expect(row(p, "h1")?.score).toBe(0.25);
    // Below 1 keeps headroom: 16 GiB x 0.25 = 4 GiB, exactly the caps of one environment.
    expect(choose(deploy([host("h2")], { overcommit: { memory: 0.25, cpus: 1, pids: 1 } })).hostId).toBe(
      "h2",
    );
    expect(() => choose(deploy([host("h2")], { overcommit: { memory: 0.2, cpus: 1, pids: 1 } }))).toThrow(
      "not enough memory: needs 4 GiB, 3.2 GiB free of 3.2 GiB",
    );
  });

  it("a fork goes to a host holding the version while one can take it, whatever room others have", () => {
    const version = { id: "shop@v1", origin: "h1", bytes: 3 * 1024 ** 2 };
    const p = choose(
      deploy(
        [
          host("h1", { local: true, reserved: { memory_bytes: 10 * GiB, cpus: 0, pids: 0 } }),
          host("h2"),
          host("h3", { local: true, online: false }),
        ],
        { version },
      ),
    );
    expect(p.hostId).toBe("h1");
    expect(p.reason).toBe("holds shop@v1 (snapshot locality)");
    expect(p.transfer).toBeUndefined();
    expect(p.evidence.transfer).toBeUndefined();
    expect(row(p, "h1")).toMatchObject({ local: true, score: 1.125 });
    expect(row(p, "h1")?.transfer_bytes).toBeUndefined();
    // 3 MiB at 200 MB/s: a fraction of a second of the minute that costs the whole weight.
    expect(row(p, "h2")).toMatchObject({
      local: false,
      transfer_bytes: 3 * 1024 ** 2,
      transfer_cost: 0,
      score: 0.75,
    });
    // A holder: offline, and nothing to move there.
    expect(row(p, "h3")).toEqual({
      host: "h3",
      environments: 0,
      memory_bytes: 16 * GiB,
      excluded: "offline",
    });
  });

  it("a fork goes to a host without the version when no holder can take it, sent from an online holder", () => {
    const version = { id: "shop@v3", origin: "h1", bytes: 1.2 * GiB };
    const full = { memory_bytes: 14 * GiB, cpus: 0, pids: 0 };
    const hosts = [
      host("h1", { local: true, reserved: full }),
      host("h2", { local: true, draining: true }),
      host("h3", { reserved: { memory_bytes: 8 * GiB, cpus: 0, pids: 0 } }),
      host("h4", { reserved: { memory_bytes: 2 * GiB, cpus: 0, pids: 0 } }),
    ];
    const p = choose(deploy(hosts, { version }));
    expect(p.hostId).toBe("h4");
    // 1.2 GiB = 1288 MB: 6.4 s at 200 MB/s, 0.107 of a minute; 62.5% of the room left after it.
    expect(row(p, "h4")).toMatchObject({ transfer_bytes: 1.2 * GiB, transfer_cost: 0.107, score: 0.518 });
    expect(row(p, "h3")).toMatchObject({ transfer_cost: 0.107, score: 0.143 });
    expect(p.transfer).toEqual({ from: "h1", bytes: 1.2 * GiB });
    expect(p.evidence.transfer).toEqual({ from: "h1", bytes: 1.2 * GiB });
    expect(p.reason).toBe(
      "highest score 0.518: transfer of shop@v3 (1.2 GiB) from h1; 63% of its room left after this one",
    );
    expect(row(p, "h1")?.excluded).toBe(PlacementMessages.notEnough("memory", "4 GiB", "2 GiB", "16 GiB"));
    expect(row(p, "h2")?.excluded).toBe("draining");

    // The origin offline: the first online holder by id sends it (a draining one still sends).
    const fromH2 = choose(
      deploy(
        hosts.map((h) => (h.host.id === "h1" ? { ...h, online: false } : h)),
        { version },
      ),
    );
    expect(fromH2.transfer).toEqual({ from: "h2", bytes: 1.2 * GiB });
  });

  it("the transfer cost grows with the version's size up to a minute at the assumed throughput", () => {
    const hosts = [host("h1", { local: true, online: true, draining: true }), host("h2")];
    const cost = (bytes: number, mbps = 200) =>
      row(
        choose(
          deploy(hosts, {
            version: { id: "shop@v1", origin: "h1", bytes },
            transferBytesPerSecond: mbps * MB,
          }),
        ),
        "h2",
      )?.transfer_cost;
    expect(cost(6000 * MB)).toBe(0.5);
    expect(cost(12_000 * MB)).toBe(1);
    expect(cost(100_000 * MB)).toBe(1);
    // The same bytes at half the throughput take twice as long.
    expect(cost(3000 * MB, 100)).toBe(0.5);
    // A big version on an empty host still goes (cost 1 leaves the room's share as the score).
    const p = choose(deploy(hosts, { version: { id: "shop@v1", origin: "h1", bytes: 100_000 * MB } }));
    expect([p.hostId, row(p, "h2")?.score]).toEqual(["h2", -0.25]);
  });

  it("a holder that is full still sends the version to a host with room", () => {
    const version = { id: "shop@v1", origin: "h1", bytes: GiB };
    const p = choose(
      deploy(
        [
          host("h1", { local: true, online: false }),
          host("h2"),
          host("h4", { local: true, reserved: { memory_bytes: 16 * GiB, cpus: 0, pids: 0 } }),
        ],
        { version },
      ),
    );
    expect(p.hostId).toBe("h2");
    expect(p.transfer).toEqual({ from: "h4", bytes: GiB });
  });
});

describe("placement score", () => {
  it("prefers the host with the most room left, each candidate with its score", () => {
    const p = choose(
      deploy([
        host("a", { reserved: { memory_bytes: 8 * GiB, cpus: 0, pids: 0 } }),
        host("b", { reserved: { memory_bytes: 2 * GiB, cpus: 0, pids: 0 } }),
      ]),
    );
    expect(p.hostId).toBe("b");
    expect(p.evidence.candidates.map((c) => [c.host, c.score])).toEqual([
      ["a", 0.25],
      ["b", 0.625],
    ]);
    expect(p.reason).toBe("highest score 0.625: 63% of its room left after this one");
  });

  it("locality is a weighted term: the host holding the newest version wins over more room, until it has none", () => {
    const hosts = [
      host("a"),
      host("b", { local: true, reserved: { memory_bytes: 10 * GiB, cpus: 0, pids: 0 } }),
    ];
    const p = choose(deploy(hosts, { newest: "shop@v3" }));
    expect(p.hostId).toBe("b");
    expect(row(p, "a")).toMatchObject({ local: false, score: 0.75 });
    expect(row(p, "b")).toMatchObject({ local: true, score: 1.125 });
    expect(p.reason).toBe(
      "highest score 1.125: holds shop@v3 (its layers are local), 13% of its room left after this one",
    );
    const full = hosts.map((h) =>
      h.local ? { ...h, reserved: { memory_bytes: 13 * GiB, cpus: 0, pids: 0 } } : h,
    );
    expect(choose(deploy(full, { newest: "shop@v3" })).hostId).toBe("a");
  });

  it("breaks ties by fewer environments, then by host id", () => {
    expect(choose(deploy([host("b"), host("a")])).hostId).toBe("a");
    expect(choose(deploy([host("a", { environments: 2 }), host("b", { environments: 1 })])).hostId).toBe("b");
  });

  it("one online host is the only online host of the target", () => {
    expect(choose(deploy([host("a"), host("b", { online: false })])).reason).toBe(
      "the only online host of the target",
    );
  });
});

describe("placement evidence of a large target", () => {
  it(`lists ${PLACEMENT_CANDIDATES_LISTED} candidates (chosen, holders, best scores) and counts the others by why`, () => {
    const id = (i: number) => `h${String(i).padStart(4, "0")}`;
    const gpu = { gpu: "a100" };
    const hosts = Array.from({ length: 1000 }, (_, i) => {
      if (i < 10) return host(id(i), { online: false, labels: gpu });
      if (i < 20) return host(id(i), { draining: true, labels: gpu });
      if (i < 500) return host(id(i));
      const local = i === 505 || i === 700;
      // 500..509 are full; the others have less room the higher their number.
      const used = i < 510 ? 15 * GiB : (i - 500) * 0.01 * GiB;
      return host(id(i), { labels: gpu, local, reserved: { memory_bytes: used, cpus: 0, pids: 0 } });
    });
    const p = choose(
      deploy(hosts, { labels: gpu, version: { id: "shop@v3", origin: id(700), bytes: 1024 ** 3 } }),
    );
    expect(p.hostId).toBe(id(700));
    const ids = p.evidence.candidates.map((c) => c.host);
    expect(ids).toEqual([
      id(505),
      ...Array.from({ length: PLACEMENT_CANDIDATES_LISTED - 2 }, (_, k) => id(510 + k)),
      id(700),
    ]);
    expect(row(p, id(505))?.excluded).toMatch(/^not enough memory/);
    expect(p.evidence.omitted).toEqual({ eligible: 471, offline: 10, draining: 10, labels: 480, room: 9 });
    expect(JSON.stringify(p.evidence).length).toBeLessThan(10_000);
    // A target within the limit lists every host, in its order, and omits nothing.
    const small = choose(deploy(hosts.slice(500, 500 + PLACEMENT_CANDIDATES_LISTED), { labels: gpu }));
    expect(small.evidence.candidates).toHaveLength(PLACEMENT_CANDIDATES_LISTED);
    expect(small.evidence.omitted).toBeUndefined();
  });
});

describe("no host: one line naming what was missing", () => {
  it("no online host", () => {
    expect(refusal(deploy([]))).toBe(ControlPlaneMessages.noOnlineHost("local"));
    expect(refusal(deploy([host("a", { online: false })]))).toBe(
      "no online host in target 'local': join one with denvd join --url URL --token TOKEN",
    );
  });

  it("every online host draining", () => {
    expect(refusal(deploy([host("a", { draining: true }), host("b", { online: false })]))).toBe(
      HostMessages.allDraining("local"),
    );
  });

  it("no host with the labels", () => {
    const m = refusal(
      deploy([host("a"), host("b", { draining: true })], { labels: { gpu: "a100", zone: "eu" } }),
    );
    expect(m).toBe(PlacementMessages.noHostWithLabels("local", "gpu=a100, zone=eu"));
    expect(m).toBe(
      "no host in target 'local' carries the placement labels gpu=a100, zone=eu: give a host those labels (denvd join --label k=v) or change x-denv.placement (denv deploy --placement k=v)",
    );
  });

  it("no host with room names the closest miss and the setting to raise", () => {
    const m = refusal(
      deploy([
        host("a", { reserved: { memory_bytes: 15 * GiB, cpus: 0, pids: 0 } }),
        host("b", { cpus: 4, reserved: { memory_bytes: 0, cpus: 3, pids: 0 } }),
        host("c", { labels: {}, online: false }),
      ]),
    );
    expect(m).toBe(
      "no host in target 'local' has room for an environment that reserves 4 GiB memory, 2 cpus, 1024 pids (b: not enough cpus: needs 2, 1 free of 4): destroy environments or sandboxes, join another host, or raise --placement-overcommit-cpus",
    );
  });

  it("a version whose holders are offline, draining or full, or that no host holds", () => {
    const version = { id: "shop@v1", origin: "h1", bytes: 0 };
    // Every holder offline: nothing can restore it nor send it, whatever room the others have.
    const offline = refusal(
      deploy(
        [host("h3", { local: true, online: false }), host("h2"), host("h1", { local: true, online: false })],
        {
          version,
        },
      ),
    );
    expect(offline).toBe(PlacementMessages.versionHoldersOffline("shop@v1", "h1, h3"));
    expect(offline).toBe(
      "no host holding shop@v1 is online (h1, h3): it can be restored there, or sent from there to another host, once one of them reconnects",
    );
    // No holder left at all.
    expect(refusal(deploy([host("h2")], { version }))).toBe(PlacementMessages.versionNotHeld("shop@v1"));
    expect(PlacementMessages.versionNotHeld("shop@v1")).toBe(
      "no host holds shop@v1 any more: deploy or snapshot again for a new version",
    );
    // A holder online: what stops every host is what stops a deploy.
    expect(
      refusal(
        deploy([host("h1", { local: true, draining: true }), host("h2", { draining: true })], { version }),
      ),
    ).toBe(HostMessages.allDraining("local"));
    const full = host("h1", { local: true, reserved: { memory_bytes: 13 * GiB, cpus: 0, pids: 0 } });
    expect(
      refusal(
        deploy(
          [
            full,
            host("h2", { draining: true }),
            host("h3", { reserved: { memory_bytes: 15 * GiB, cpus: 0, pids: 0 } }),
          ],
          {
            version,
          },
        ),
      ),
    ).toBe(
      PlacementMessages.noHostWithRoom(
        "local",
        "4 GiB memory, 2 cpus, 1024 pids",
        "h1: not enough memory: needs 4 GiB, 3 GiB free of 16 GiB",
        "--placement-overcommit-memory",
      ),
    );
  });
});

describe("reservations", () => {
  it("an environment reserves the caps its host reported, else the default caps of each service", () => {
    const env = {
      id: "shop/alpha",
      project: "shop",
      name: "alpha",
      status: "running" as const,
      sandbox: false,
      services: [
        { name: "api", container_id: "c1", image: "i", image_id: "sha256:1" },
        { name: "db", container_id: "c2", image: "i", image_id: "sha256:2" },
      ],
      createdAt: "",
      updatedAt: "",
    };
    expect(reservationOf(env)).toEqual({ memory_bytes: 4 * GiB, cpus: 4, pids: 2048 });
    expect(reservationOf({ ...env, evidence: { caps: { memory_bytes: GiB, cpus: 0.5, pids: 64 } } })).toEqual(
      {
        memory_bytes: GiB,
        cpus: 0.5,
        pids: 64,
      },
    );
    expect(reservationOf(undefined)).toEqual({ memory_bytes: 2 * GiB, cpus: 2, pids: 1024 });
    expect(describeNeed({ memory_bytes: 1.5 * GiB, cpus: 0.25, pids: 64 })).toBe(
      "1.5 GiB memory, 0.25 cpus, 64 pids",
    );
  });
});
