import { Link, usePath } from "../router.js";

/** The tabs of a project's pages. */
export function ProjectNav({ project }: { project: string }) {
  const path = usePath();
  const base = `/projects/${encodeURIComponent(project)}`;
  const tabs: Array<[string, string]> = [
    ["environments", "Environments"],
    ["versions", "Versions"],
    ["deployments", "Deployments"],
  ];
  return (
    <nav aria-label={`project ${project}`} className="tabs">
      <Link to="/projects">All projects</Link>
      {tabs.map(([slug, label]) => (
        <Link key={slug} to={`${base}/${slug}`} current={path === `${base}/${slug}`}>
          {label}
        </Link>
      ))}
    </nav>
  );
}
