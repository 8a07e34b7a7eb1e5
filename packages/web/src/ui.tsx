import type { ReactNode } from "react";
import type { Loaded } from "./use-data.js";

/** Shared pieces of the pages: status badges, load states, headings. */

const GOOD = new Set(["running", "succeeded", "online", "ok", "hit", "graded"]);
const BAD = new Set(["failed", "offline", "destroyed", "refused"]);

export function Status({ value }: { value: string }) {
  const tone = GOOD.has(value) ? "ok" : BAD.has(value) ? "bad" : "wait";
  return <span className={`badge ${tone}`}>{value}</span>;
}

/** Renders a load's error, its first load, or its data. */
export function Load<T>(props: { of: Loaded<T>; children: (data: T) => ReactNode; what: string }) {
  const { data, error, loading } = props.of;
  if (error !== undefined && data === undefined)
    return (
      <p className="error" role="alert">
        Could not load {props.what}: {error.message}
      </p>
    );
  if (data === undefined) return <p aria-busy={loading}>Loading {props.what}…</p>;
  return (
    <>
      {error !== undefined && (
        <p className="error" role="alert">
          Could not refresh {props.what}: {error.message}
        </p>
      )}
      {props.children(data)}
    </>
  );
}

export function Page(props: { title: string; children: ReactNode; sub?: ReactNode }) {
  return (
    <section aria-labelledby="page-title">
      <h1 id="page-title" tabIndex={-1}>
        {props.title}
      </h1>
      {props.sub !== undefined && <p className="sub">{props.sub}</p>}
      {props.children}
    </section>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return <p className="empty">{children}</p>;
}
