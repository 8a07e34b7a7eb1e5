import type { TargetRecord } from "../store/records.js";
import { HetznerApi, type HetznerServer } from "./hetzner-api.js";
import {
  credential,
  type MachineProvider,
  type ProviderMachine,
  type ProvisionDeps,
  ProvisionedDriver,
} from "./provisioned-driver.js";

interface HetznerSettings {
  location: string;
  server_type: string;
  image: string;
  base_url: string;
}

/**
 * Hetzner Cloud: servers in the user's project, through its REST API (POST /servers with labels
 * and user data, GET /servers by label selector, DELETE /servers/{id}). A machine's id is its
 * server's name.
 */
export class HetznerDriver extends ProvisionedDriver {
  constructor(deps: ProvisionDeps) {
    super("hetzner", deps);
  }

  protected provider(target: TargetRecord, credentials: Record<string, string>): MachineProvider {
    const s = settingsOf(target);
    const api = new HetznerApi(s.base_url, credential(target, credentials, "api_token"));
    const machine = (server: HetznerServer): ProviderMachine => ({
      providerId: String(server.id),
      machine: server.name,
      costClass: costClassOf(server, s),
    });
    return {
      list: async (labels) => (await api.listServers(labels)).map(machine),
      create: async (req) =>
        machine(
          await api.createServer({
            name: req.machine,
            server_type: s.server_type,
            image: s.image,
            location: s.location,
            labels: req.labels,
            user_data: req.userData,
          }),
        ),
      delete: (providerId) => api.deleteServer(Number(providerId)),
    };
  }

  protected costClass(target: TargetRecord): string {
    const s = settingsOf(target);
    return `hetzner/${s.server_type}/${s.location}`;
  }
}

function settingsOf(t: TargetRecord): HetznerSettings {
  return t.settings as unknown as HetznerSettings;
}

/** provider/type/location, and the hourly price when the API gives one for that location. */
function costClassOf(server: HetznerServer, s: HetznerSettings): string {
  const type = server.server_type?.name ?? s.server_type;
  const price = server.server_type?.prices.find((p) => p.location === s.location)?.price_hourly.gross;
  return `hetzner/${type}/${s.location}${price ? ` (${Number(price).toFixed(4)}/h gross)` : ""}`;
}
