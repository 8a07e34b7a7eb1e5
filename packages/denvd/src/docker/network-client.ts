import { DenvError } from "@denv/spec/errors";
import type Docker from "dockerode";
import { engineError, labelFilter, statusOf } from "./engine-error.js";
import type { EngineHttp, LazyDocker } from "./engine-http.js";
import type { ManagedObject, NetworkInfo } from "./engine-types.js";

/** Networks: bridge networks with a fixed subnet, inspect, list, remove. */
export class NetworkClient {
  constructor(
    private readonly api: LazyDocker,
    private readonly http: EngineHttp,
  ) {}

  async create(opts: {
    name: string;
    internal: boolean;
    subnet: string;
    gateway: string;
    labels: Record<string, string>;
    /** The driver's options (`com.docker.network.bridge.*`). */
    options?: Record<string, string>;
  }): Promise<NetworkInfo> {
    try {
      const net = await this.api().createNetwork({
        Name: opts.name,
        Driver: "bridge",
        Internal: opts.internal,
        CheckDuplicate: true,
        Labels: opts.labels,
        ...(opts.options ? { Options: opts.options } : {}),
        IPAM: { Driver: "default", Config: [{ Subnet: opts.subnet, Gateway: opts.gateway }] },
      });
      const info = await this.info(net.id);
      if (!info) throw new DenvError("docker", `network ${opts.name} vanished after create`);
      return info;
    } catch (err) {
      throw engineError(err, `create network ${opts.name}`);
    }
  }

  async info(idOrName: string): Promise<NetworkInfo | undefined> {
    try {
      const n = await this.api().getNetwork(idOrName).inspect();
      const cfg = n.IPAM?.Config?.[0] ?? {};
      return {
        id: n.Id,
        name: n.Name,
        internal: Boolean(n.Internal),
        subnet: cfg.Subnet ?? "",
        gateway: cfg.Gateway ?? "",
        labels: n.Labels ?? {},
        containers: Object.keys(n.Containers ?? {}),
      };
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw engineError(err, `inspect network ${idOrName}`);
    }
  }

  async list(labels: Record<string, string>): Promise<ManagedObject[]> {
    const list = await this.http.get<Docker.NetworkInspectInfo[]>("/networks", {
      filters: { label: labelFilter(labels) },
    });
    return list.map((n) => ({ id: n.Id, name: n.Name, labels: n.Labels ?? {} }));
  }

  /** Ids of every network on the engine, whoever made it. */
  async allIds(): Promise<string[]> {
    return (await this.http.get<Docker.NetworkInspectInfo[]>("/networks")).map((n) => n.Id);
  }

  /** Subnets of every network on the engine (to allocate non-overlapping ones). */
  async usedSubnets(): Promise<string[]> {
    const list = await this.http.get<Docker.NetworkInspectInfo[]>("/networks");
    return list.flatMap((n) => (n.IPAM?.Config ?? []).map((c) => c.Subnet ?? "")).filter(Boolean);
  }

  async remove(id: string): Promise<void> {
    try {
      await this.api().getNetwork(id).remove();
    } catch (err) {
      if (statusOf(err) === 404) return;
      throw engineError(err, `remove network ${id}`);
    }
  }

  /** Connects a container; `aliases` are names the network's DNS resolves to it. */
  async connect(network: string, container: string, aliases?: string[]): Promise<void> {
    try {
      await this.api()
        .getNetwork(network)
        .connect({ Container: container, ...(aliases ? { EndpointConfig: { Aliases: aliases } } : {}) });
    } catch (err) {
      throw engineError(err, `connect ${container} to ${network}`);
    }
  }

  async disconnect(network: string, container: string): Promise<void> {
    try {
      await this.api().getNetwork(network).disconnect({ Container: container, Force: true });
    } catch (err) {
      if (statusOf(err) === 404) return;
      throw engineError(err, `disconnect ${container} from ${network}`);
    }
  }
}
