import type { Deployment, Environment, Pool } from "@denv/spec";
import { useSession } from "../client-context.js";
import { Probe } from "../evidence.js";
import { when } from "../format.js";
import { Link } from "../router.js";
import { Empty, Load, Page, Status } from "../ui.js";
import { useData } from "../use-data.js";

interface Episode {
  sandbox: Environment;
  deployments: Deployment[];
  reward: number | undefined;
}

export function SandboxesPage() {
  const { client } = useSession();
  const data = useData(
    async () => {
      const [sandboxes, pools] = await Promise.all([client.listSandboxes(), client.listPools()]);
      const projects = [...new Set(sandboxes.map((s) => s.project))];
      const lists = await Promise.all(projects.map((p) => client.listDeployments(p)));
      const all = lists.flat();
      const episodes: Episode[] = sandboxes.map((sandbox) => {
        const deployments = all.filter((d) => d.environment === sandbox.id);
        // The newest graded verify of the sandbox (deployments come newest first).
        const verify = deployments.find(
          (d) =>
            d.kind === "verify" && typeof (d.result as { reward?: unknown } | undefined)?.reward === "number",
        );
        return { sandbox, deployments, reward: (verify?.result as { reward?: number } | undefined)?.reward };
      });
      return { episodes, pools };
    },
    "sandboxes",
    3000,
  );
  return (
    <Page title="Sandboxes" sub="Environments made for one episode: a fork of a version with a time to live.">
      <Load of={data} what="sandboxes">
        {({ episodes, pools }) => (
          <>
            <Pools pools={pools} />
            <h2>Episodes</h2>
            {episodes.length === 0 ? (
              <Empty>
                No sandbox now. <code>denv sandbox create PROJECT</code> or a framework adapter makes one.
              </Empty>
            ) : (
              <ul className="cards wide">
                {episodes.map((e) => (
                  <SandboxCard key={e.sandbox.id} e={e} />
                ))}
              </ul>
            )}
          </>
        )}
      </Load>
    </Page>
  );
}

function Pools({ pools }: { pools: Pool[] }) {
  if (pools.length === 0) return null;
  return (
    <>
      <h2>Warm pools</h2>
      <div className="scroll">
        <table>
          <thead>
            <tr>
              <th scope="col">project</th>
              <th scope="col">version</th>
              <th scope="col">size</th>
              <th scope="col">ready</th>
              <th scope="col">filling</th>
            </tr>
          </thead>
          <tbody>
            {pools.map((p) => (
              <tr key={p.project}>
                <td>{p.project}</td>
                <td>{p.version ?? "–"}</td>
                <td>
                  {p.size} ({p.source})
                </td>
                <td>{p.ready}</td>
                <td>{p.filling}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

function SandboxCard({ e }: { e: Episode }) {
  const s = e.sandbox;
  const probe = (s.evidence as { probe?: unknown } | undefined)?.probe;
  return (
    <li className="card" aria-label={`sandbox ${s.id}`}>
      <h2>
        {s.id} <Status value={s.status} />
        {s.pool !== undefined && (
          <span className={`badge ${s.pool === "hit" ? "ok" : "wait"}`}>pool {s.pool}</span>
        )}
      </h2>
      <p className="sub">
        fork of {s.parent_version ?? s.version ?? "?"} · on {s.host_id ?? "no host"} · created{" "}
        {when(s.created_at)} · expires {when(s.expires_at)}
      </p>
      <dl className="evidence">
        <div className="row">
          <dt>reward</dt>
          <dd>
            {e.reward === undefined ? "not graded yet" : <strong className="reward">{e.reward}</strong>}
          </dd>
        </div>
        <div className="row">
          <dt>episode</dt>
          <dd>
            {e.deployments.length === 0
              ? "–"
              : e.deployments.map((d) => (
                  <span key={d.id} className="chip">
                    <Link to={`/deployments/${encodeURIComponent(d.id)}`}>{d.kind}</Link>{" "}
                    <Status value={d.status} />
                  </span>
                ))}
          </dd>
        </div>
        <div className="row">
          <dt>command log</dt>
          <dd>
            <Link to={`/episodes/${s.id.split("/").map(encodeURIComponent).join("/")}`}>
              the episode's steps
            </Link>
          </dd>
        </div>
        {probe !== undefined && (
          <div className="row">
            <dt>egress probe</dt>
            <dd>
              <Probe value={probe} />
            </dd>
          </div>
        )}
      </dl>
    </li>
  );
}
