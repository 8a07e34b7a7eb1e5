import type { EpisodeLog, EpisodeStep, ReplaySummary } from "@denv/spec";
import { EPISODE_LOG } from "@denv/spec";
import { useSession } from "../client-context.js";
import { bytes, duration, short, when } from "../format.js";
import { Link } from "../router.js";
import { Empty, Load, Page } from "../ui.js";
import { useData } from "../use-data.js";

/**
 * An episode's command log (GET .../episode, every page): each exec and files put of a fork or
 * sandbox, with the digests a replay compares (docs/how-to/replay.md). Env values are never in
 * the log, only their names. Below it, the replays the cp kept (GET .../replays): each fork, the
 * version, where it diverged, each linked to the fork's own page.
 */
export function EpisodePage({ env }: { env: string }) {
  const { client } = useSession();
  const log = useData(
    async () => {
      const steps: EpisodeStep[] = [];
      let page: EpisodeLog | undefined;
      let after: number | undefined;
      do {
        page = await client.episodeLog(env, {
          limit: EPISODE_LOG.page.max,
          ...(after === undefined ? {} : { after }),
        });
        steps.push(...page.steps);
        after = page.next;
      } while (after !== undefined && steps.length < EPISODE_LOG.maxSteps);
      return { ...page, steps };
    },
    `episode:${env}`,
    5000,
  );
  const replays = useData(() => client.replays(env), `replays:${env}`, 5000);
  const project = env.split("/")[0] ?? "";
  return (
    <Page
      title={`Episode ${env}`}
      sub="What the agent ran here through exec and files, step by step; replay runs it again on a fresh fork (denv replay)."
    >
      <nav className="tabs" aria-label="episode">
        <Link to={`/projects/${encodeURIComponent(project)}/environments`}>{project}: environments</Link>
        <Link to="/sandboxes">Sandboxes</Link>
      </nav>
      <Load of={log} what="the episode's log">
        {(l) => (
          <>
            <p className="sub">
              started from {l.started_from ?? "–"} · {l.total} step{l.total === 1 ? "" : "s"}
              {l.dropped > 0 ? ` · ${l.dropped} not kept (the log was full; it cannot be replayed)` : ""}
            </p>
            {l.steps.length === 0 ? (
              <Empty>No step yet: nothing was run here through exec or files.</Empty>
            ) : (
              <div className="scroll">
                <table aria-label="steps">
                  <thead>
                    <tr>
                      <th scope="col">#</th>
                      <th scope="col">step</th>
                      <th scope="col">as</th>
                      <th scope="col">exit</th>
                      <th scope="col">output (sha256)</th>
                      <th scope="col">took</th>
                      <th scope="col">when</th>
                    </tr>
                  </thead>
                  <tbody>
                    {l.steps.map((s) => (
                      <StepRow key={s.seq} s={s} />
                    ))}
                  </tbody>
                </table>
              </div>
            )}
          </>
        )}
      </Load>
      <h2>Replays</h2>
      <Load of={replays} what="the episode's replays">
        {(rs) =>
          rs.length === 0 ? (
            <Empty>Not replayed yet: denv replay {env} runs its log again on a fresh fork.</Empty>
          ) : (
            <div className="scroll">
              <table aria-label="replays">
                <thead>
                  <tr>
                    <th scope="col">fork</th>
                    <th scope="col">from</th>
                    <th scope="col">diverged</th>
                    <th scope="col">steps</th>
                    <th scope="col">when</th>
                  </tr>
                </thead>
                <tbody>
                  {rs.map((r) => (
                    <ReplayRow key={r.id} r={r} />
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

function ReplayRow({ r }: { r: ReplaySummary }) {
  const [project = "", name = ""] = r.fork.split("/");
  return (
    <tr data-replay={r.id}>
      <td>
        <Link to={`/episodes/${encodeURIComponent(project)}/${encodeURIComponent(name)}`}>{r.fork}</Link>
        <div className="sub">
          <Link to={`/projects/${encodeURIComponent(project)}/environments`}>in the fork tree</Link>
        </div>
      </td>
      <td>{r.version}</td>
      <td>
        {r.diverged === 0 ? (
          <span className="badge ok">none</span>
        ) : (
          <span className="badge bad">
            {r.diverged}, first at step {r.diverged_at}
          </span>
        )}
      </td>
      <td>
        {r.steps.map((s) => (
          <span
            key={s.seq}
            className={`badge ${s.status === "same" ? "ok" : "bad"}`}
            title={s.differs.length > 0 ? `differs: ${s.differs.join(", ")}` : "same"}
          >
            {s.seq} {s.status}
            {s.differs.length > 0 ? ` (${s.differs.join(", ")})` : ""}
          </span>
        ))}
      </td>
      <td>{when(r.created_at)}</td>
    </tr>
  );
}

function StepRow({ s }: { s: EpisodeStep }) {
  const r = s.result;
  const what =
    s.exec !== undefined
      ? (s.exec.shell ?? (s.exec.cmd ?? []).join(" "))
      : s.files !== undefined
        ? `put ${bytes(s.files.bytes)} into ${s.files.path}`
        : s.kind;
  const who = s.exec ?? s.files;
  return (
    <tr data-seq={s.seq}>
      <td>{s.seq}</td>
      <td>
        <code>{what}</code>
        {s.exec !== undefined && s.exec.env_keys.length > 0 && (
          <div className="sub">env: {s.exec.env_keys.join(", ")} (values not kept)</div>
        )}
        {s.exec?.stdin_sha256 !== undefined && (
          <div className="sub">
            stdin {bytes(s.exec.stdin_bytes)}{" "}
            <code title={s.exec.stdin_sha256}>{short(s.exec.stdin_sha256)}</code>
          </div>
        )}
        {s.error !== undefined && <div className="error">{s.error.message}</div>}
      </td>
      <td>
        {who?.user ?? "agent"}
        {who?.service === undefined ? "" : ` in ${who.service}`}
        {s.exec?.cwd === undefined ? "" : ` at ${s.exec.cwd}`}
      </td>
      <td>{r?.exit_code ?? (r?.entries !== undefined ? `${r.entries} entries` : "–")}</td>
      <td>
        {r?.stdout_sha256 !== undefined && (
          <div>
            out <code title={r.stdout_sha256}>{short(r.stdout_sha256)}</code> {bytes(r.stdout_bytes)}
          </div>
        )}
        {r?.stderr_sha256 !== undefined && (
          <div>
            err <code title={r.stderr_sha256}>{short(r.stderr_sha256)}</code> {bytes(r.stderr_bytes)}
          </div>
        )}
        {r?.timed_out === true && <span className="badge bad">timed out</span>}
      </td>
      <td>{duration(s.duration_ms)}</td>
      <td>{when(s.started_at)}</td>
    </tr>
  );
}
