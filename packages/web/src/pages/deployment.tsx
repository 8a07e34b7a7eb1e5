import type { Deployment, Phase } from "@denv/spec";
import { useEffect, useRef, useState } from "react";
import { useSession } from "../client-context.js";
import { Evidence } from "../evidence.js";
import { duration, when } from "../format.js";
import { Link } from "../router.js";
import { Page, Status } from "../ui.js";

/** Log lines kept on the page; the API keeps them all (denv deployments log ID). */
const MAX_LOG = 2000;

/**
 * One deployment: its phases as a timeline that moves while it runs (the log route's server-sent
 * events, followed through the SDK, reconnecting when the stream drops), each phase's evidence,
 * and the log. The deep link the CLI prints: /deployments/ID.
 */
export function DeploymentPage({ id }: { id: string }) {
  const { client } = useSession();
  const [deployment, setDeployment] = useState<Deployment>();
  const [phases, setPhases] = useState<Phase[]>([]);
  const [log, setLog] = useState<string[]>([]);
  const [live, setLive] = useState(false);
  const [error, setError] = useState<string>();
  const logBox = useRef<HTMLPreElement>(null);

  useEffect(() => {
    const abort = new AbortController();
    setDeployment(undefined);
    setPhases([]);
    setLog([]);
    setError(undefined);
    const run = async () => {
      const first = await client.getDeployment(id);
      if (abort.signal.aborted) return;
      setDeployment(first);
      setPhases(first.phases);
      setLive(first.status === "queued" || first.status === "running");
      const done = await client.waitForDeployment(id, {
        signal: abort.signal,
        onPhase: (p) => setPhases((old) => mergePhase(old, p)),
        onLog: (line) => setLog((old) => (old.length >= MAX_LOG ? [...old.slice(1), line] : [...old, line])),
      });
      if (abort.signal.aborted) return;
      setDeployment(done);
      setPhases(done.phases);
      setLive(false);
    };
    run().catch((err: unknown) => {
      if (abort.signal.aborted) return;
      setLive(false);
      setError(err instanceof Error ? err.message : String(err));
    });
    return () => abort.abort();
  }, [client, id]);

  // Follow the log's end while it grows, unless the reader scrolled up.
  // biome-ignore lint/correctness/useExhaustiveDependencies: runs when a line arrives
  useEffect(() => {
    const box = logBox.current;
    if (box !== null && box.scrollHeight - box.scrollTop - box.clientHeight < 80)
      box.scrollTop = box.scrollHeight;
  }, [log.length]);

  const d = deployment;
  return (
    <Page title={`Deployment ${id}`}>
      {error !== undefined && (
        <p className="error" role="alert">
          {error}
        </p>
      )}
      {d === undefined ? (
        error === undefined && <p aria-busy="true">Loading deployment…</p>
      ) : (
        <>
          <p className="sub">
            {d.kind} of{" "}
            <Link to={`/projects/${encodeURIComponent(d.project)}/environments`}>{d.environment}</Link>{" "}
            <Status value={d.status} /> · created {when(d.created_at)}
            {d.finished_at !== undefined && (
              <> · took {duration(Date.parse(d.finished_at) - Date.parse(d.created_at))}</>
            )}
            {d.host_id !== undefined && <> · host {d.host_id}</>}{" "}
            {live && (
              <span className="badge live" role="status">
                live
              </span>
            )}
          </p>
          {d.error !== undefined && (
            <p className="error" role="alert">
              {d.error.code}: {d.error.message}
            </p>
          )}
          <Result deployment={d} />
          <h2>Phases</h2>
          <ol className="timeline" aria-label="phases" aria-live="polite">
            {phases.map((p) => (
              <li key={p.name} className={`phase ${p.status}`} data-phase={p.name} data-status={p.status}>
                <div className="phase-head">
                  <span className="dot" aria-hidden="true" />
                  <strong>{p.name}</strong> <Status value={p.status} />
                  <span className="sub">
                    {p.duration_ms !== undefined
                      ? duration(p.duration_ms)
                      : p.started_at !== undefined && p.status === "running"
                        ? `since ${when(p.started_at)}`
                        : ""}
                  </span>
                </div>
                <Evidence evidence={p.evidence} phase={p.name} />
              </li>
            ))}
          </ol>
          <h2>Log</h2>
          {log.length === 0 ? (
            <p className="empty">{live ? "No log line yet." : "No log lines."}</p>
          ) : (
            // biome-ignore lint/a11y/noNoninteractiveTabindex: the log scrolls; the keyboard must reach it
            <pre className="log" ref={logBox} tabIndex={0}>
              {log.join("\n")}
            </pre>
          )}
        </>
      )}
    </Page>
  );
}

function mergePhase(old: Phase[], p: Phase): Phase[] {
  const i = old.findIndex((x) => x.name === p.name);
  if (i === -1) return [...old, p];
  const next = [...old];
  next[i] = p;
  return next;
}

/** What the deployment produced, when it says something people look for (a version, a reward). */
function Result({ deployment }: { deployment: Deployment }) {
  const r = deployment.result as Record<string, unknown> | undefined;
  if (r === undefined || typeof r !== "object" || r === null) return null;
  const rows: Array<[string, string]> = [];
  if (typeof r.reward === "number") rows.push(["reward", String(r.reward)]);
  if (typeof r.status === "string" && typeof r.reward === "number") rows.push(["grade", r.status]);
  if (typeof r.message === "string") rows.push(["message", r.message]);
  if (typeof r.version === "string") rows.push(["version", r.version]);
  if (typeof r.fork === "string") rows.push(["graded on fork", r.fork]);
  if (rows.length === 0) return null;
  return (
    <dl className="evidence result">
      {rows.map(([k, v]) => (
        <div key={k} className="row">
          <dt>{k}</dt>
          <dd>{k === "reward" ? <strong className="reward">{v}</strong> : v}</dd>
        </div>
      ))}
    </dl>
  );
}
