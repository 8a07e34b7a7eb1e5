import {
  ControlPlaneMessages,
  DenvError,
  HostMessages,
  PLACEMENT_CANDIDATES_LISTED,
  type PlacementEvidence,
  PlacementMessages,
  type Reservation,
} from "@denv/spec";
import { SETTINGS } from "../config.js";
import type { HostRecord } from "../store/records.js";

/**
 * Placement: which host a new environment goes to, and why (docs/reference/targets.md#placement
 * describes exactly this). A fork needs an online host holding its version (to restore it, or to
 * send it from). Then filters (online, not draining, the labels, room for the environment's caps
 * within capacity x overcommit), then a score: the room left after this placement, plus a weighted
 * locality term, minus for a fork on a host without the version a weighted transfer cost (its
 * estimated seconds at the assumed throughput over a minute, at most 1). `choose` is the
 * decision, pure; `Placer` (placement.ts) gathers what it decides on from the store and the hub.
 */

type Resource = "memory" | "cpus" | "pids";

/** capacity x ratio is what placement may commit of a host, per resource. */
export type Overcommit = Record<Resource, number>;

export interface Placement {
  hostId: string;
  reason: string;
  evidence: PlacementEvidence;
  /** The chosen host does not hold the version: it is sent there from `from` (an online holder) first. */
  transfer?: { from: string; bytes: number };
}

/** One host as `choose` sees it. */
export interface CandidateHost {
  host: HostRecord;
  online: boolean;
  environments: number;
  /** What the cp has already placed there (environments and placements in flight). */
  reserved: Reservation;
  /** Holds a replica of the version (a fork), or of the project's newest version (a deploy: its layers are local). */
  local: boolean;
}

export interface Choice {
  target: string;
  hosts: CandidateHost[];
  need: Reservation;
  labels: Record<string, string>;
  overcommit: Overcommit;
  /**
   * A fork: the `local` hosts hold it, `origin` is the holder to send it from first, `bytes`
   * what a host without it receives.
   */
  version?: { id: string; origin: string; bytes: number };
  /** A deploy: the project's newest version, whose holders have its layers. */
  newest?: string;
  /** The throughput a transfer is assumed to get (bytes per second). */
  transferBytesPerSecond: number;
}

/**
 * Weights of the score's terms: room left after placing (0..1), locality (0 or 1), and a fork's
 * transfer cost (0..1). With these a holder of the version wins whenever one can take the fork.
 */
const SCORE_WEIGHTS = { room: 1, locality: 1, transfer: 1 } as const;

/** A transfer estimated to take this long, or longer, costs the whole transfer weight. */
const TRANSFER_SECONDS_FULL_COST = 60;

const RESOURCES: ReadonlyArray<{ r: Resource; need: keyof Reservation; show: (n: number) => string }> = [
  { r: "memory", need: "memory_bytes", show: (n) => bytes(n) },
  { r: "cpus", need: "cpus", show: (n) => `${round(n, 2)}` },
  { r: "pids", need: "pids", show: (n) => `${Math.floor(n)}` },
];

/** What placement may commit of `r` on a host (undefined: the host does not say, so it is not checked). */
function limitOf(host: HostRecord, r: Resource, overcommit: Overcommit): number | undefined {
  const c = host.capacity;
  const raw = r === "memory" ? (c?.memory_bytes ?? 0) : r === "cpus" ? (c?.cpus ?? 0) : c?.pids;
  return raw === undefined ? undefined : raw * overcommit[r];
}

/**
 * Where a fork's version is sent from: an online holder, the origin first, else the first by
 * host id. A draining holder still sends (a drain keeps new environments away, nothing else).
 */
function sourceOf(c: Choice): string | undefined {
  const online = c.hosts
    .filter((h) => h.local && h.online)
    .map((h) => h.host.id)
    .sort();
  return online.find((id) => id === c.version?.origin) ?? online[0];
}

/** A fork's transfer cost in the score: its estimated seconds over a minute, at most 1, weighted. */
function transferCost(bytes: number, bytesPerSecond: number): number {
  return round(SCORE_WEIGHTS.transfer * Math.min(1, bytes / bytesPerSecond / TRANSFER_SECONDS_FULL_COST), 3);
}

type OmittedKind = keyof NonNullable<PlacementEvidence["omitted"]>;
type Candidate = PlacementEvidence["candidates"][number];

/** One candidate as `choose` judged it; its evidence row is written only if it is listed. */
interface Judged {
  h: CandidateHost;
  kind: OmittedKind;
  /** Why it was left out (kind other than eligible). */
  excluded?: string;
  /** Room before this placement (hosts that got as far as the room check). */
  free?: NonNullable<Candidate["free"]>;
  room: number;
  score: number;
}

/** A fork's move to a host without the version: the bytes it receives and what that costs. */
interface Move {
  bytes: number;
  cost: number;
}

/**
 * Decides; throws the one-line DenvError naming what was missing when no host is left. One pass
 * over the candidates, which may be 10,000 hosts (the Placer runs one placement at a time), with
 * evidence rows written only for the candidates the evidence lists.
 */
export function choose(c: Choice): Placement {
  const judged: Judged[] = [];
  const roomMisses: Array<{ host: string; why: string; fit: number; resource: Resource }> = [];
  const wanted = Object.entries(c.labels);
  const source = c.version ? sourceOf(c) : undefined;
  if (c.version && source === undefined) throw unheld(c, c.version.id);
  // The same for every host without the version.
  const move: Move | undefined = c.version
    ? { bytes: c.version.bytes, cost: transferCost(c.version.bytes, c.transferBytesPerSecond) }
    : undefined;
  let best: Judged | undefined;
  let eligible = 0;
  for (const h of c.hosts) {
    let kind: OmittedKind = "eligible";
    let excluded: string | undefined;
    if (!h.online) [kind, excluded] = ["offline", "offline"];
    else if (h.host.drainingAt !== undefined) [kind, excluded] = ["draining", "draining"];
    else {
      for (const [k, v] of wanted) {
        if (h.host.labels[k] === v) continue;
        [kind, excluded] = ["labels", PlacementMessages.missingLabel(`${k}=${v}`)];
        break;
      }
    }
    if (excluded !== undefined) {
      judged.push({ h, kind, excluded, room: 0, score: 0 });
      continue;
    }
    const free: Judged["free"] = {
      memory_bytes: (limitOf(h.host, "memory", c.overcommit) ?? 0) - h.reserved.memory_bytes,
      cpus: round((limitOf(h.host, "cpus", c.overcommit) ?? 0) - h.reserved.cpus, 3),
    };
    if (h.host.capacity?.pids !== undefined)
      free.pids = (limitOf(h.host, "pids", c.overcommit) ?? 0) - h.reserved.pids;
    // The room left after this placement, as the smallest share of any resource's limit.
    let room = 1;
    let short: { why: string; fit: number; resource: Resource } | undefined;
    for (const { r, need, show } of RESOURCES) {
      const limit = limitOf(h.host, r, c.overcommit);
      if (limit === undefined) continue;
      const left = limit - h.reserved[need];
      if (left < c.need[need]) {
        short ??= {
          why: PlacementMessages.notEnough(r, show(c.need[need]), show(Math.max(0, left)), show(limit)),
          fit: c.need[need] > 0 ? Math.max(0, left) / c.need[need] : 0,
          resource: r,
        };
      } else room = Math.min(room, limit > 0 ? (left - c.need[need]) / limit : 0);
    }
    if (short) {
      judged.push({ h, kind: "room", excluded: short.why, free, room: 0, score: 0 });
      roomMisses.push({ host: h.host.id, ...short });
      continue;
    }
    const score = round(
      SCORE_WEIGHTS.room * room +
        SCORE_WEIGHTS.locality * (h.local ? 1 : 0) -
        (move && !h.local ? move.cost : 0),
      3,
    );
    const j: Judged = { h, kind: "eligible", free, room, score };
    judged.push(j);
    eligible++;
    // The highest score; ties to fewer environments, then to the first host id (by code unit, as
    // GET /v1/hosts orders them: ids are ASCII, and a locale's collation is slow over 10,000).
    const d = best ? j.score - best.score || best.h.environments - h.environments : 1;
    if (!best || d > 0 || (d === 0 && h.host.id < best.h.host.id)) best = j;
  }
  if (!best) throw noHost(c, judged, roomMisses);
  const chosen = best;
  const evidence = (reason: string, transfer?: Placement["transfer"]): Placement => ({
    hostId: chosen.h.host.id,
    reason,
    evidence: {
      host: chosen.h.host.id,
      reason,
      need: c.need,
      labels: c.labels,
      ...listed(judged, chosen, move),
      ...(transfer ? { transfer } : {}),
    },
    ...(transfer ? { transfer } : {}),
  });

  const roomLeft = `${Math.round(chosen.room * 100)}% of its room left after this one`;
  if (c.version) {
    if (chosen.h.local) return evidence(`holds ${c.version.id} (snapshot locality)`);
    const from = source as string;
    return evidence(
      `highest score ${chosen.score}: transfer of ${c.version.id} (${bytes(c.version.bytes)}) from ${from}; ${roomLeft}`,
      { from, bytes: c.version.bytes },
    );
  }
  const online = c.hosts.filter((h) => h.online).length;
  if (eligible === 1)
    return evidence(
      online === 1
        ? "the only online host of the target"
        : "the only candidate left (see the others' reasons)",
    );
  return evidence(
    `highest score ${chosen.score}: ${chosen.h.local ? `holds ${c.newest} (its layers are local), ` : ""}${roomLeft}`,
  );
}

/** A judged candidate's evidence row. */
function rowOf(j: Judged, move: Move | undefined): Candidate {
  const h = j.h;
  const row: Candidate = { host: h.host.id, environments: h.environments };
  if (h.host.capacity) row.memory_bytes = h.host.capacity.memory_bytes;
  const moved = move !== undefined && !h.local;
  if (moved) row.transfer_bytes = move.bytes;
  if (j.free) row.free = j.free;
  if (j.kind === "eligible") {
    row.local = h.local;
    if (moved) row.transfer_cost = move.cost;
    row.score = j.score;
  } else row.excluded = j.excluded;
  return row;
}

/**
 * The candidates the evidence lists: all of them up to PLACEMENT_CANDIDATES_LISTED; past that
 * the chosen host, then the version's holders, then the best scores, then excluded hosts (in the
 * candidates' order), listed in the candidates' order, and the others counted by why in `omitted`.
 */
function listed(
  judged: readonly Judged[],
  chosen: Judged,
  move: Move | undefined,
): Pick<PlacementEvidence, "candidates" | "omitted"> {
  const max = PLACEMENT_CANDIDATES_LISTED;
  if (judged.length <= max) return { candidates: judged.map((j) => rowOf(j, move)) };
  const score = (i: number) => judged[i]?.score ?? 0;
  const kind = (i: number) => (judged[i] as Judged).kind;
  // Higher score first, then the candidates' order.
  const byScore = (a: number, b: number) => score(b) - score(a) || a - b;
  const keep = new Set<number>();
  const take = (i: number) => {
    if (keep.size < max) keep.add(i);
  };
  take(judged.indexOf(chosen));
  const holders: number[] = [];
  for (let i = 0; i < judged.length; i++) if (judged[i]?.h.local && !keep.has(i)) holders.push(i);
  for (const i of holders.sort(byScore)) take(i);
  // The best scores of the others: one pass keeping the top `max`.
  const top: number[] = [];
  for (let i = 0; i < judged.length; i++) {
    if (kind(i) !== "eligible" || keep.has(i)) continue;
    if (top.length === max && score(i) <= score(top[max - 1] as number)) continue;
    let j = top.length;
    while (j > 0 && score(top[j - 1] as number) < score(i)) j--;
    top.splice(j, 0, i);
    if (top.length > max) top.pop();
  }
  for (const i of top) take(i);
  for (let i = 0; i < judged.length && keep.size < max; i++) if (kind(i) !== "eligible") take(i);
  const omitted = { eligible: 0, offline: 0, draining: 0, labels: 0, room: 0 };
  for (let i = 0; i < judged.length; i++) if (!keep.has(i)) omitted[kind(i)]++;
  const rows = [...keep].sort((a, b) => a - b).map((i) => rowOf(judged[i] as Judged, move));
  return { candidates: rows, omitted };
}

/** Without an online holder nothing can restore the version, nor send it to another host. */
function unheld(c: Choice, version: string): DenvError {
  const holders = c.hosts
    .filter((h) => h.local)
    .map((h) => h.host.id)
    .sort();
  return new DenvError(
    "conflict",
    holders.length === 0
      ? PlacementMessages.versionNotHeld(version)
      : PlacementMessages.versionHoldersOffline(version, holders.join(", ")),
  );
}

/** No host left: what stopped every one (for a fork too, once a holder is online to send it). */
function noHost(
  c: Choice,
  judged: readonly Judged[],
  roomMisses: Array<{ host: string; why: string; fit: number; resource: Resource }>,
): DenvError {
  const online = judged.filter((x) => x.kind !== "offline");
  if (online.length === 0) return new DenvError("conflict", ControlPlaneMessages.noOnlineHost(c.target));
  if (online.every((x) => x.kind === "draining"))
    return new DenvError("conflict", HostMessages.allDraining(c.target));
  const closest = [...roomMisses].sort((a, b) => b.fit - a.fit || a.host.localeCompare(b.host))[0];
  if (!closest) {
    const labels = Object.entries(c.labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(", ");
    return new DenvError("conflict", PlacementMessages.noHostWithLabels(c.target, labels));
  }
  const setting = SETTINGS.find(
    (s) => s.key === `placementOvercommit${closest.resource[0]?.toUpperCase()}${closest.resource.slice(1)}`,
  );
  return new DenvError(
    "conflict",
    PlacementMessages.noHostWithRoom(
      c.target,
      describeNeed(c.need),
      `${closest.host}: ${closest.why}`,
      setting?.flag ?? "the overcommit ratios",
    ),
  );
}

/** "4 GiB memory, 4 cpus, 2048 pids" */
export function describeNeed(n: Reservation): string {
  return `${bytes(n.memory_bytes)} memory, ${round(n.cpus, 2)} cpus, ${Math.floor(n.pids)} pids`;
}

/** 1536 MiB -> "1.5 GiB"; below a GiB in MiB, below a MiB in KiB. */
function bytes(n: number): string {
  const units: Array<[number, string]> = [
    [1024 ** 4, "TiB"],
    [1024 ** 3, "GiB"],
    [1024 ** 2, "MiB"],
    [1024, "KiB"],
  ];
  for (const [size, unit] of units) if (Math.abs(n) >= size) return `${round(n / size, 2)} ${unit}`;
  return `${n} B`;
}

function round(n: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}
