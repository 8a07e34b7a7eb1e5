import type { ReactNode } from "react";
import { bytes, duration, short } from "./format.js";

/**
 * Evidence as people read it: each key a phase reports (docs/reference/deployments.md lists them)
 * gets a label and a rendering; a key this page does not know is still shown, as JSON, so nothing
 * a host or the control plane recorded is hidden.
 */

type Rec = Record<string, unknown>;
const isRec = (v: unknown): v is Rec => typeof v === "object" && v !== null && !Array.isArray(v);
const str = (v: unknown): string => (typeof v === "string" ? v : JSON.stringify(v));

function Json({ value }: { value: unknown }) {
  return <code className="json">{JSON.stringify(value)}</code>;
}

function ByService({ value, id }: { value: Rec; id?: boolean }) {
  return (
    <ul className="plain">
      {Object.entries(value).map(([service, v]) => (
        <li key={service}>
          <strong>{service}</strong>{" "}
          {id === true && typeof v === "string" ? <code title={v}>{short(v)}</code> : <span>{str(v)}</span>}
        </li>
      ))}
    </ul>
  );
}

export function Probe({ value }: { value: unknown }) {
  if (!isRec(value)) return <Json value={value} />;
  if (typeof value.skipped === "string") return <span>not run: {value.skipped}</span>;
  const findings = Array.isArray(value.findings) ? value.findings.map(str) : [];
  const network = isRec(value.network) ? value.network : undefined;
  const services = Array.isArray(value.services) ? value.services.filter(isRec) : [];
  return (
    <div className="probe">
      <p>
        {value.ok === true ? (
          <span className="badge ok">no way out</span>
        ) : (
          <span className="badge bad">found a way out</span>
        )}
        {network !== undefined && (
          <span>
            {" "}
            network <code>{str(network.name)}</code>
            {network.internal === true ? ", internal" : ", NOT internal"}
            {network.reject_rule === true ? ", traffic to the host rejected" : ""}
          </span>
        )}
        {typeof value.duration_ms === "number" && <span> · {duration(value.duration_ms)}</span>}
      </p>
      {findings.length > 0 && (
        <ul className="findings">
          {findings.map((f) => (
            <li key={f}>{f}</li>
          ))}
        </ul>
      )}
      {services.length > 0 && (
        <div className="scroll">
          <table>
            <thead>
              <tr>
                <th scope="col">service</th>
                <th scope="col">default route</th>
                <th scope="col">route out</th>
                <th scope="col">canary reached</th>
                <th scope="col">nameservers</th>
              </tr>
            </thead>
            <tbody>
              {services.map((s) => (
                <tr key={str(s.service)}>
                  <td>{str(s.service)}</td>
                  <td>{s.default_route === true ? "yes" : "removed"}</td>
                  <td>{s.route_out === true ? "yes" : "no"}</td>
                  <td>
                    {s.canary_reached === true ? "yes" : "no"}
                    {typeof s.canary_from === "string" && s.canary_from !== s.service
                      ? ` (as ${s.canary_from})`
                      : ""}
                  </td>
                  <td>{Array.isArray(s.nameservers) ? s.nameservers.map(str).join(", ") || "none" : "–"}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

function Candidates({ value }: { value: unknown[] }) {
  return (
    <div className="scroll">
      <table>
        <thead>
          <tr>
            <th scope="col">host</th>
            <th scope="col">score or why not</th>
          </tr>
        </thead>
        <tbody>
          {value.map((c, i) => {
            const r = isRec(c) ? c : {};
            const why = r.excluded ?? r.reason ?? r.why;
            return (
              // biome-ignore lint/suspicious/noArrayIndexKey: candidates are listed once, in order
              <tr key={i}>
                <td>{str(r.host ?? r.id ?? "?")}</td>
                <td>
                  {typeof r.score === "number" ? (
                    r.score.toFixed(3)
                  ) : why === undefined ? (
                    <Json value={c} />
                  ) : (
                    str(why)
                  )}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

export function Caps({ value }: { value: unknown }) {
  if (!isRec(value)) return <Json value={value} />;
  return (
    <span>
      memory {bytes(Number(value.memory_bytes))} · cpus {str(value.cpus)} · pids {str(value.pids)}
    </span>
  );
}

function Sizes({ value }: { value: unknown }) {
  if (!isRec(value)) return <Json value={value} />;
  return (
    <span>
      layers {bytes(Number(value.layer_bytes))} · volumes {bytes(Number(value.volume_bytes))}
    </span>
  );
}

function Timings({ value }: { value: unknown }) {
  if (!isRec(value)) return <Json value={value} />;
  const parts = Object.entries(value)
    .filter(([, v]) => typeof v === "number")
    .map(([k, v]) => `${k.replace(/_ms$/, "")} ${duration(v as number)}`);
  return <span>{parts.join(" · ")}</span>;
}

/** Where an image build ran and what it fetched through the mirror proxy. */
function Builds({ value }: { value: Rec }) {
  const mirrors = Array.isArray(value.mirrors) ? value.mirrors.map(str) : [];
  const requests = Array.isArray(value.requests) ? value.requests.filter(isRec) : [];
  return (
    <span>
      on network <code>{str(value.network)}</code>
      {mirrors.length > 0 && <> · mirrors only: {mirrors.join(", ")}</>} · {requests.length} request
      {requests.length === 1 ? "" : "s"}
      {requests.length > 0 && (
        <ul className="plain">
          {requests.slice(0, 50).map((r, i) => (
            // biome-ignore lint/suspicious/noArrayIndexKey: requests are listed once, in order
            <li key={i}>
              {str(r.status)} {str(r.method)} {str(r.host)}
              {str(r.path)} ({bytes(Number(r.bytes))})
            </li>
          ))}
        </ul>
      )}
    </span>
  );
}

function Verifier({ value }: { value: Rec }) {
  return (
    <span>
      container <code title={str(value.container_id)}>{short(str(value.container_id))}</code> of image{" "}
      <code>{str(value.image)}</code> as user <strong>{str(value.user)}</strong>, exit{" "}
      {value.exit_code === null ? "none" : str(value.exit_code)}
      {value.timed_out === true ? " (timed out)" : ""}
      {typeof value.duration_ms === "number" ? ` in ${duration(value.duration_ms)}` : ""}
    </span>
  );
}

function Agent({ value }: { value: unknown }) {
  if (typeof value === "string") return <span>{value}</span>;
  if (!isRec(value)) return <Json value={value} />;
  if (typeof value.killed === "number")
    return (
      <span>
        {value.killed} agent processes killed, {str(value.survivors)} survived
      </span>
    );
  return (
    <span>
      service <strong>{str(value.service)}</strong> as user <strong>{str(value.user)}</strong>
      {typeof value.uid === "number" ? ` (uid ${value.uid})` : ""}
      {value.root === true ? ", root" : ", not root"}
      {typeof value.confinement === "string" ? `, confined by ${value.confinement}` : ""}
    </span>
  );
}

const LABELS: Record<string, string> = {
  host: "host",
  reason: "placement reason",
  need: "needs",
  labels: "labels",
  candidates: "candidates",
  caps: "caps",
  probe: "egress probe",
  method: "snapshot method",
  sizes: "sizes",
  timings: "timings",
  version: "version",
  digests: "image digests",
  containers: "containers",
  reward: "reward",
  user: "user",
  error: "error",
  environment: "environment",
  placement: "placement",
  agent: "agent",
  frozen_ms: "frozen",
  duration_ms: "took",
  total_ms: "total",
};

function value(key: string, v: unknown): ReactNode {
  if (key === "probe") return <Probe value={v} />;
  if (key === "caps" || key === "need") return <Caps value={v} />;
  if (key === "builds" && isRec(v)) return <Builds value={v} />;
  if (key === "labels" && isRec(v) && Object.keys(v).length === 0) return "none";
  if (key === "sizes") return <Sizes value={v} />;
  if (key === "timings") return <Timings value={v} />;
  if (key === "candidates" && Array.isArray(v)) return <Candidates value={v} />;
  if ((key === "digests" || key === "containers" || key === "images") && isRec(v))
    return <ByService value={v} id />;
  if (key === "verifier" && isRec(v)) return <Verifier value={v} />;
  if (key === "agent") return <Agent value={v} />;
  if (key === "placement" && isRec(v))
    return (
      <span>
        on <strong>{str(v.host)}</strong>: {str(v.reason)}
      </span>
    );
  if (key === "reward") return <strong className="reward">{v === null ? "none written" : str(v)}</strong>;
  if (key.endsWith("_ms") && typeof v === "number") return duration(v);
  if (key.endsWith("bytes") && typeof v === "number") return bytes(v);
  if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") return String(v);
  if (Array.isArray(v) && v.every((x) => typeof x === "string")) return v.join(", ") || "none";
  if (isRec(v) && Object.values(v).every((x) => typeof x === "string")) return <ByService value={v} />;
  return <Json value={v} />;
}

/** A phase's (or an environment's) evidence as a definition list. */
export function Evidence({ evidence, phase }: { evidence: Rec | undefined; phase?: string }) {
  if (evidence === undefined || Object.keys(evidence).length === 0) return null;
  // These phases report one object as their whole evidence.
  if (phase === "probe" && evidence.error === undefined)
    return (
      <div className="evidence">
        <Probe value={evidence} />
      </div>
    );
  if (phase === "run verifier" && typeof evidence.container_id === "string")
    return (
      <dl className="evidence">
        <div className="row">
          <dt>verifier</dt>
          <dd>
            <Verifier value={evidence} />
          </dd>
        </div>
      </dl>
    );
  // The agent's egress (mirror requests) and the probe's nested findings read best last.
  const entries = Object.entries(evidence).sort(([a], [b]) => order(a) - order(b));
  return (
    <dl className="evidence">
      {entries.map(([k, v]) => (
        <div key={k} className="row">
          <dt>{LABELS[k] ?? k.replaceAll("_", " ")}</dt>
          <dd>{value(k, v)}</dd>
        </div>
      ))}
    </dl>
  );
}

const FIRST = ["error", "host", "reason", "placement", "reward", "user", "method", "sizes", "caps"];
function order(key: string): number {
  const i = FIRST.indexOf(key);
  return i === -1 ? (key === "probe" ? 90 : 50) : i;
}
