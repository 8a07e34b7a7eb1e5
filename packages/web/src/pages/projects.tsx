import { useSession } from "../client-context.js";
import { when } from "../format.js";
import { Link } from "../router.js";
import { Empty, Load, Page } from "../ui.js";
import { useData } from "../use-data.js";

export function ProjectsPage() {
  const { client } = useSession();
  const projects = useData(() => client.listProjects(), "projects");
  return (
    <Page title="Projects">
      <Load of={projects} what="projects">
        {(list) =>
          list.length === 0 ? (
            <Empty>
              No project this token may see. <code>denv projects create NAME</code> makes one.
            </Empty>
          ) : (
            <ul className="cards">
              {list.map((p) => {
                const base = `/projects/${encodeURIComponent(p.name)}`;
                return (
                  <li key={p.name} className="card">
                    <h2>
                      <Link to={`${base}/environments`}>{p.name}</Link>
                    </h2>
                    <p className="sub">
                      {p.kind} · {p.compose_path}
                      {p.repo === undefined ? "" : ` · ${p.repo}`} · created {when(p.created_at)}
                    </p>
                    <p className="links">
                      <Link to={`${base}/environments`}>Environments</Link>
                      <Link to={`${base}/versions`}>Versions</Link>
                      <Link to={`${base}/deployments`}>Deployments</Link>
                    </p>
                  </li>
                );
              })}
            </ul>
          )
        }
      </Load>
    </Page>
  );
}
