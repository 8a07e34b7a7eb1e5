import { randomBytes } from "node:crypto";
import type { DoubleDocker } from "../../testing/double-docker.js";
import { ApiError } from "./prime-api-error.js";
import type { Sandboxes } from "./prime-sandboxes.js";

/** Members tagged `from` may open TCP connections to members tagged `to`, on `ports`. */
export interface NetworkRule {
  from: string;
  to: string;
  ports: number[];
}

export interface Network {
  id: string;
  name: string;
  teamId: string | null;
  rules: NetworkRule[];
  /** Sandbox id → its tags, in the order they joined. */
  members: Map<string, string[]>;
  createdAt: string;
  /** The Docker network its members' containers share. */
  dockerNetwork: string;
}

/** What private networks are made of: the engine, and the sandboxes that join them. */
export interface NetworkEnv {
  docker: DoubleDocker;
  serverId: string;
  sandboxes: Sandboxes;
}

/** Docker's network of a container with no network; it stands beside no other network. */
const NONE = "none";
/** A selector: every member, or the members with a tag. */
const SELECTOR = /^(\*|tag:\S+)$/;
/**
 * The bridge of a private network: `internal` gives it no route out, and without an IPv4 address
 * of the host's on it a member reaches no host address either (the engine filters forwarding
 * only, so on a plain internal network a member reaches the host's address on that bridge).
 */
const PRIVATE_BRIDGE = { "com.docker.network.bridge.inhibit_ipv4": "true" };

/** The DNS name members reach a member at. */
function memberHost(sandboxId: string): string {
  return `${sandboxId}.sandbox.internal`;
}

function stringList(v: unknown, field: string): string[] {
  if (!Array.isArray(v) || v.some((x) => typeof x !== "string"))
    throw new ApiError(422, `${field} must be a list of strings`);
  return v as string[];
}

function port(v: unknown): v is number {
  return Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 65535;
}

/** A list of rules as Prime's body states them, or a 422 naming the first one that is not. */
function rules(v: unknown): NetworkRule[] {
  if (!Array.isArray(v)) throw new ApiError(422, "rules must be a list");
  return v.map((r: unknown, i) => {
    const { from, to, ports } = (r ?? {}) as Record<string, unknown>;
    for (const [field, s] of [
      ["from", from],
      ["to", to],
    ] as const)
      if (typeof s !== "string" || !SELECTOR.test(s))
        throw new ApiError(422, `rules[${i}].${field} must be "*" or "tag:<name>"`);
    if (!Array.isArray(ports) || !ports.every(port))
      throw new ApiError(422, `rules[${i}].ports must be a list of ports (integers 1 to 65535)`);
    return { from: from as string, to: to as string, ports: ports as number[] };
  });
}

/**
 * The double's private networks (POST /sandbox/networks and below). Each is one Docker bridge
 * network of its own, internal and with no address of the host's on it: its members reach each
 * other at `<sandbox-id>.sandbox.internal` (an alias the engine's DNS resolves for the other
 * members), and nothing else through it. The double enforces membership only: a member reaches
 * every port of every other member whatever its tags and the rules, which are stored and
 * answered but not applied. A sandbox whose egress is shut runs on Docker's `none`, which stands
 * beside no other network: it leaves `none` to join its first private network and is put back
 * on it when it leaves its last. Calls run one at a time, so those moves never interleave.
 */
export class Networks {
  readonly all = new Map<string, Network>();
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly env: NetworkEnv) {}

  get(id: string): Network {
    const net = this.all.get(id);
    if (!net) throw new ApiError(404, `Network ${id} not found`);
    return net;
  }

  /** Whether the sandbox is a member of a private network. */
  isMember(sandboxId: string): boolean {
    return [...this.all.values()].some((n) => n.members.has(sandboxId));
  }

  /** POST /sandbox/networks: a network with no member, and the rules given (none: no traffic). */
  create(body: Record<string, unknown>): Promise<Network> {
    if (typeof body.name !== "string" || body.name === "") throw new ApiError(422, "name is required");
    if (body.team_id !== undefined && body.team_id !== null && typeof body.team_id !== "string")
      throw new ApiError(422, "team_id must be a string");
    const net = {
      id: randomBytes(12).toString("hex"),
      name: body.name,
      teamId: typeof body.team_id === "string" ? body.team_id : null,
      rules: body.rules === undefined || body.rules === null ? [] : rules(body.rules),
      members: new Map<string, string[]>(),
      createdAt: new Date().toISOString(),
    };
    return this.serial(async () => {
      const name = `denv-prime-${this.env.serverId}-net-${net.id}`;
      const dockerNetwork = await this.env.docker.createNetwork(name, true, PRIVATE_BRIDGE);
      const created = { ...net, dockerNetwork };
      this.all.set(net.id, created);
      return created;
    });
  }

  /** PUT /sandbox/networks/{id}/rules: replaces the rules (stored; the double does not apply them). */
  setRules(id: string, body: Record<string, unknown>): object {
    const net = this.get(id);
    net.rules = rules(body.rules);
    return this.json(net);
  }

  /**
   * PUT /sandbox/networks/{id}/members/{sandbox}: connects a RUNNING sandbox's container under its
   * DNS name, or only replaces the tags of a member.
   */
  putMember(id: string, sandboxId: string, body: Record<string, unknown>): Promise<object> {
    const tags = stringList(body.tags, "tags");
    return this.serial(async () => {
      const net = this.get(id);
      const sb = this.env.sandboxes.get(sandboxId);
      if (sb.status !== "RUNNING" || !sb.container)
        throw new ApiError(409, `Sandbox ${sandboxId} is not running`);
      if (!net.members.has(sandboxId)) await this.connect(net, sandboxId, sb.container);
      net.members.set(sandboxId, tags);
      return this.json(net);
    });
  }

  /** DELETE /sandbox/networks/{id}/members/{sandbox}. */
  removeMember(id: string, sandboxId: string): Promise<void> {
    return this.serial(async () => {
      const net = this.get(id);
      if (!net.members.has(sandboxId))
        throw new ApiError(404, `Sandbox ${sandboxId} is not a member of network ${id}`);
      await this.disconnect(net, sandboxId);
    });
  }

  /** DELETE /sandbox/networks/{id}: disconnects every member, then removes the Docker network. */
  delete(id: string): Promise<void> {
    return this.serial(async () => {
      const net = this.get(id);
      for (const sandboxId of [...net.members.keys()]) await this.disconnect(net, sandboxId);
      await this.env.docker.removeNetwork(net.dockerNetwork);
      this.all.delete(id);
    });
  }

  /** Drops a deleted sandbox from every member list (its container, and so its endpoints, went). */
  forget(sandboxId: string): void {
    for (const net of this.all.values()) net.members.delete(sandboxId);
  }

  /** Waits for calls under way (a network they create would escape close()'s sweep). */
  async settle(): Promise<void> {
    await this.queue.catch(() => undefined);
  }

  json(net: Network): object {
    return {
      id: net.id,
      name: net.name,
      teamId: net.teamId,
      rules: net.rules,
      members: [...net.members].map(([sandboxId, tags]) => ({ sandboxId, tags })),
      createdAt: net.createdAt,
    };
  }

  /** Joins the container to the network, off `none` first when this is its first network. */
  private async connect(net: Network, sandboxId: string, container: string): Promise<void> {
    const offNone = this.onNone(sandboxId);
    if (offNone) await this.env.docker.leaveNetwork(container, NONE);
    try {
      await this.env.docker.joinNetwork(container, net.dockerNetwork, [memberHost(sandboxId)]);
    } catch (e) {
      if (offNone) await this.env.docker.joinNetwork(container, NONE);
      throw e;
    }
  }

  /** Takes the member off the network, back onto `none` when that was its last one. */
  private async disconnect(net: Network, sandboxId: string): Promise<void> {
    const container = this.env.sandboxes.get(sandboxId).container;
    if (container) await this.env.docker.leaveNetwork(container, net.dockerNetwork);
    net.members.delete(sandboxId);
    if (container && this.onNone(sandboxId)) await this.env.docker.joinNetwork(container, NONE);
  }

  /** Whether the sandbox's egress policy puts it on `none` and no private network keeps it off. */
  private onNone(sandboxId: string): boolean {
    const sb = this.env.sandboxes.get(sandboxId);
    return this.env.sandboxes.networkOf(sb.egress) === NONE && !this.isMember(sandboxId);
  }

  /** Runs `f` after every call before it has ended. */
  private serial<T>(f: () => Promise<T>): Promise<T> {
    const run = this.queue.then(f);
    this.queue = run.catch(() => undefined);
    return run;
  }
}
