import { useSession } from "../client-context.js";
import { bytes, when } from "../format.js";
import { Empty, Load, Page, Status } from "../ui.js";
import { useData } from "../use-data.js";

export function HostsPage() {
  const { client } = useSession();
  const hosts = useData(() => client.listHosts(), "hosts", 5000);
  return (
    <Page
      title="Hosts"
      sub="Machines running denvd, joined to a target. A host missing three heartbeats is offline."
    >
      <Load of={hosts} what="hosts">
        {(list) =>
          list.length === 0 ? (
            <Empty>
              No host has joined. <code>denvd join --url URL --token JOIN_TOKEN</code> joins one.
            </Empty>
          ) : (
            <div className="scroll">
              <table>
                <thead>
                  <tr>
                    <th scope="col">host</th>
                    <th scope="col">health</th>
                    <th scope="col">target</th>
                    <th scope="col">cpus</th>
                    <th scope="col">memory</th>
                    <th scope="col">disk free</th>
                    <th scope="col">pids</th>
                    <th scope="col">environments</th>
                    <th scope="col">denvd</th>
                    <th scope="col">last seen</th>
                    <th scope="col">labels</th>
                  </tr>
                </thead>
                <tbody>
                  {list.map((h) => (
                    <tr key={h.id}>
                      <td>{h.id}</td>
                      <td>
                        <Status value={h.status} />
                        {h.draining && <span className="badge wait">draining</span>}
                      </td>
                      <td>{h.target}</td>
                      <td>{h.capacity?.cpus ?? "–"}</td>
                      <td>{bytes(h.capacity?.memory_bytes)}</td>
                      <td>{bytes(h.capacity?.disk_free_bytes)}</td>
                      <td>{h.capacity?.pids ?? "–"}</td>
                      <td>{h.environments}</td>
                      <td>{h.version ?? "–"}</td>
                      <td>{when(h.last_seen_at)}</td>
                      <td>
                        {Object.entries(h.labels)
                          .map(([k, v]) => `${k}=${v}`)
                          .join(", ") || "–"}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )
        }
      </Load>
    </Page>
  );
}
