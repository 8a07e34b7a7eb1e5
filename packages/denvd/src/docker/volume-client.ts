import type Docker from "dockerode";
import { engineError, labelFilter, statusOf } from "./engine-error.js";
import type { EngineHttp, LazyDocker } from "./engine-http.js";
import type { ManagedObject } from "./engine-types.js";

/** Named volumes, each bound to a directory of denvd's volume store. */
export class VolumeClient {
  constructor(
    private readonly api: LazyDocker,
    private readonly http: EngineHttp,
  ) {}

  /** A named volume whose data lives at `device` on the host (a subvolume of denvd's store). */
  async createBound(name: string, device: string, labels: Record<string, string>): Promise<void> {
    try {
      await this.api().createVolume({
        Name: name,
        Driver: "local",
        DriverOpts: { type: "none", o: "bind", device },
        Labels: labels,
      });
    } catch (err) {
      throw engineError(err, `create volume ${name}`);
    }
  }

  async list(labels: Record<string, string>): Promise<ManagedObject[]> {
    const res = await this.http.get<{ Volumes?: Docker.VolumeInspectInfo[] }>("/volumes", {
      filters: { label: labelFilter(labels) },
    });
    return (res.Volumes ?? []).map((v) => ({ id: v.Name, name: v.Name, labels: v.Labels ?? {} }));
  }

  async remove(name: string): Promise<void> {
    try {
      await this.api().getVolume(name).remove({ force: true });
    } catch (err) {
      if (statusOf(err) === 404) return;
      throw engineError(err, `remove volume ${name}`);
    }
  }
}
