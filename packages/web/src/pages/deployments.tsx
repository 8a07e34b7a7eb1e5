import { useSession } from "../client-context.js";
import { duration, when } from "../format.js";
import { Link } from "../router.js";
import { Empty, Load, Page, Status } from "../ui.js";
import { useData } from "../use-data.js";
import { ProjectNav } from "./project-nav.js";

export function DeploymentsPage({ project }: { project: string }) {
  const { client } = useSession();
  const list = useData(() => client.listDeployments(project), `deployments:${project}`, 3000);
  return (
    <Page title={`${project}: deployments`} sub="Every change to an environment, newest first.">
      <ProjectNav project={project} />
      <Load of={list} what="deployments">
        {(deployments) =>
          deployments.length === 0 ? (
            <Empty>No deployment yet.</Empty>
          ) : (
            <div className="scroll">
              <table>
                <thead>
                  <tr>
                    <th scope="col">deployment</th>
                    <th scope="col">kind</th>
                    <th scope="col">environment</th>
                    <th scope="col">status</th>
                    <th scope="col">phases</th>
                    <th scope="col">took</th>
                    <th scope="col">created</th>
                  </tr>
                </thead>
                <tbody>
                  {deployments.map((d) => (
                    <tr key={d.id}>
                      <td>
                        <Link to={`/deployments/${encodeURIComponent(d.id)}`}>{d.id}</Link>
                      </td>
                      <td>{d.kind}</td>
                      <td>{d.environment}</td>
                      <td>
                        <Status value={d.status} />
                      </td>
                      <td>
                        {d.phases.filter((p) => p.status === "succeeded").length}/{d.phases.length}
                      </td>
                      <td>
                        {d.finished_at === undefined
                          ? "–"
                          : duration(Date.parse(d.finished_at) - Date.parse(d.created_at))}
                      </td>
                      <td>{when(d.created_at)}</td>
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
