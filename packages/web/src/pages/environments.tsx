import { useSession } from "../client-context.js";
import { Caps, Probe } from "../evidence.js";
import { forkTree, type TreeNode } from "../fork-tree.js";
import { bytes, when } from "../format.js";
import { Link } from "../router.js";
import { Empty, Load, Page, Status } from "../ui.js";
import { useData } from "../use-data.js";
import { ProjectNav } from "./project-nav.js";

/** Live status: how often the page asks again. */
const REFRESH_MS = 3000;

export function EnvironmentsPage({ project }: { project: string }) {
  const { client } = useSession();
  const tree = useData(
    async () => {
      const [envs, versions, deployments] = await Promise.all([
        client.listEnvironments(project),
        client.listVersions(project),
        client.listDeployments(project),
      ]);
      return { roots: forkTree(envs, versions, deployments), count: envs.length };
    },
    `envs:${project}`,
    REFRESH_MS,
  );
  return (
    <Page
      title={`${project}: environments`}
      sub="The fork tree: each version under the environment it was snapshotted from, each fork under its version."
    >
      <ProjectNav project={project} />
      <Load of={tree} what="environments">
        {({ roots, count }) =>
          count === 0 && roots.length === 0 ? (
            <Empty>
              No environment yet: <code>denv deploy DIR --project {project}</code>
            </Empty>
          ) : (
            <ul className="tree" aria-label="fork tree">
              {roots.map((n) => (
                <Node key={nodeKey(n)} node={n} project={project} />
              ))}
            </ul>
          )
        }
      </Load>
    </Page>
  );
}

const nodeKey = (n: TreeNode) =>
  n.kind === "environment"
    ? `e:${n.env.id}`
    : n.kind === "version"
      ? `v:${n.version.id}`
      : `r:${n.what}:${n.id}`;

function Node({ node, project }: { node: TreeNode; project: string }) {
  if (node.kind === "ref")
    return (
      <li className="ref">
        ↺ {node.what} <code>{node.id}</code> (shown above)
      </li>
    );
  return (
    <li>
      {node.kind === "environment" ? <EnvCard node={node} /> : <VersionLine node={node} project={project} />}
      {node.children.length > 0 && (
        <ul>
          {node.children.map((c) => (
            <Node key={nodeKey(c)} node={c} project={project} />
          ))}
        </ul>
      )}
    </li>
  );
}

function EnvCard({ node }: { node: Extract<TreeNode, { kind: "environment" }> }) {
  const e = node.env;
  const ev = e.evidence;
  return (
    <article className="node env" aria-label={`environment ${e.id}`}>
      <header>
        <strong>{e.name}</strong> <Status value={e.status} />
        {e.sandbox && <span className="badge wait">sandbox</span>}
        {!e.reachable && e.status !== "destroyed" && <span className="badge bad">host unreachable</span>}
      </header>
      <p className="sub">
        {e.version === undefined ? "no version yet" : <>runs {e.version}</>}
        {e.parent_version !== undefined && <> · forked from {e.parent_version}</>}
        {node.forkedBy !== undefined && (
          <>
            {" "}
            by <Link to={`/deployments/${encodeURIComponent(node.forkedBy.id)}`}>{node.forkedBy.id}</Link>
          </>
        )}
        {e.host_id !== undefined && <> · on {e.host_id}</>} · created {when(e.created_at)}
        {e.expires_at !== undefined && <> · expires {when(e.expires_at)}</>}
        {e.parent_version !== undefined && (
          <>
            {" "}
            · <Link to={`/episodes/${e.id.split("/").map(encodeURIComponent).join("/")}`}>command log</Link>
          </>
        )}
      </p>
      {e.services.length > 0 && (
        <p className="sub">
          services:{" "}
          {e.services.map((s) => (
            <code key={s.name} title={s.image_id}>
              {s.name}
            </code>
          ))}
          {e.agent !== undefined && (
            <>
              {" "}
              · agent {e.agent.service} as {e.agent.user} in {e.agent.workdir}
            </>
          )}
        </p>
      )}
      {ev !== undefined && (
        <details>
          <summary>Evidence</summary>
          <dl className="evidence">
            {isRec(ev.placement) && (
              <div className="row">
                <dt>placement</dt>
                <dd>
                  on <strong>{String(ev.placement.host)}</strong>: {String(ev.placement.reason)}
                </dd>
              </div>
            )}
            {ev.caps !== undefined && (
              <div className="row">
                <dt>caps</dt>
                <dd>
                  <Caps value={ev.caps} />
                </dd>
              </div>
            )}
            {isRec(ev.disk) && isRec(ev.disk.volumes) && (
              <div className="row">
                <dt>disk</dt>
                <dd>
                  volumes {bytes(Number(ev.disk.volumes.cap_bytes))}
                  {ev.disk.volumes.enforced === true
                    ? ` (enforced by ${String(ev.disk.volumes.by)})`
                    : " (not enforced)"}
                </dd>
              </div>
            )}
            {ev.probe !== undefined && (
              <div className="row">
                <dt>egress probe</dt>
                <dd>
                  <Probe value={ev.probe} />
                </dd>
              </div>
            )}
          </dl>
        </details>
      )}
    </article>
  );
}

function VersionLine({ node, project }: { node: Extract<TreeNode, { kind: "version" }>; project: string }) {
  const v = node.version;
  return (
    <div className="node version">
      <Link to={`/projects/${encodeURIComponent(project)}/versions#${encodeURIComponent(v.id)}`}>{v.id}</Link>{" "}
      <span className="sub">
        {v.method} · {bytes(v.sizes.layer_bytes + v.sizes.volume_bytes)} · {when(v.created_at)}
      </span>
    </div>
  );
}

const isRec = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);
