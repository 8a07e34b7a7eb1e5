import { ContainerClient } from "./container-client.js";
import { engineError, labelFilter } from "./engine-error.js";
import { EngineHttp, lazyDocker } from "./engine-http.js";
import type { EngineEvent } from "./engine-types.js";
import { ImageClient } from "./image-client.js";
import { NetworkClient } from "./network-client.js";
import { VolumeClient } from "./volume-client.js";

export type * from "./engine-types.js";

/**
 * The one place denvd talks to the Docker Engine: a client per kind of object, and the engine's
 * own calls (ping, version, events). Nothing outside this folder holds dockerode, and this
 * folder loads it only at the first call that needs it (engine-http.ts says why and which do not).
 */
export class DockerClient {
  readonly containers: ContainerClient;
  readonly images: ImageClient;
  readonly networks: NetworkClient;
  readonly volumes: VolumeClient;
  private readonly http: EngineHttp;
  private versionOnce: Promise<{ version: string; apiVersion: string }> | undefined;
  private layerCapsOnce: Promise<{ supported: boolean; storage: string }> | undefined;

  constructor(socketPath = "/var/run/docker.sock") {
    const api = lazyDocker(socketPath);
    this.http = new EngineHttp(socketPath);
    this.containers = new ContainerClient(api, this.http);
    this.images = new ImageClient(api, this.http);
    this.networks = new NetworkClient(api, this.http);
    this.volumes = new VolumeClient(api, this.http);
  }

  async ping(): Promise<void> {
    try {
      await this.http.get("/_ping");
    } catch (err) {
      throw engineError(err, "the Docker engine does not answer (is dockerd running?)");
    }
  }

  /** The engine's version (asked once: an engine does not change under a running client). */
  async version(): Promise<{ version: string; apiVersion: string }> {
    try {
      this.versionOnce ??= this.http
        .get<{ Version?: string; ApiVersion?: string }>("/version")
        .then((v) => ({ version: v.Version ?? "", apiVersion: v.ApiVersion ?? "" }));
      return await this.versionOnce;
    } catch (err) {
      this.versionOnce = undefined;
      throw engineError(err, "the Docker engine does not answer (is dockerd running?)");
    }
  }

  /** The OCI runtimes the engine has (asked each time: `dockerd` reloads them on SIGHUP). */
  async runtimes(): Promise<string[]> {
    try {
      const info = await this.http.get<{ Runtimes?: Record<string, unknown> }>("/info");
      return Object.keys(info.Runtimes ?? {});
    } catch (err) {
      throw engineError(err, "the Docker engine does not answer (is dockerd running?)");
    }
  }

  /**
   * Whether the engine can cap a container's writable layer (`--storage-opt size`): overlay2 on
   * xfs (with project quotas), btrfs and zfs can; overlay2 on ext4 cannot.
   */
  async layerCaps(): Promise<{ supported: boolean; storage: string }> {
    // Asked once: the storage driver does not change under a running engine.
    this.layerCapsOnce ??= this.readLayerCaps();
    return this.layerCapsOnce.catch((err: unknown) => {
      this.layerCapsOnce = undefined;
      throw err;
    });
  }

  private async readLayerCaps(): Promise<{ supported: boolean; storage: string }> {
    try {
      const info = await this.http.get<{ Driver?: string; DriverStatus?: Array<[string, string]> }>("/info");
      const driver = info.Driver ?? "";
      const backing = (info.DriverStatus ?? []).find(([k]) => k === "Backing Filesystem")?.[1] ?? "";
      const storage = backing ? `${driver} on ${backing}` : driver;
      const supported =
        driver === "btrfs" || driver === "zfs" || (driver === "overlay2" && backing === "xfs");
      return { supported, storage };
    } catch (err) {
      throw engineError(err, "the Docker engine does not answer (is dockerd running?)");
    }
  }

  /**
   * Container start events of containers carrying `labels`, as they happen. The returned
   * function stops the stream.
   */
  async onContainerStart(
    labels: Record<string, string>,
    listener: (event: EngineEvent) => void,
  ): Promise<() => void> {
    const stream = await this.http.stream("/events", {
      filters: { type: ["container"], event: ["start"], label: labelFilter(labels) },
    });
    let buf = "";
    stream.on("data", (chunk: Buffer) => {
      buf += chunk.toString("utf8");
      for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        const ev = JSON.parse(line) as { id?: string; Actor?: { Attributes?: Record<string, string> } };
        if (ev.id) listener({ id: ev.id, labels: ev.Actor?.Attributes ?? {} });
      }
    });
    stream.on("error", () => undefined);
    return () => stream.destroy();
  }
}
