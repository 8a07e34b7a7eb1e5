import { type FormEvent, useState } from "react";

/** Sign in with an API token (`denv tokens create`, or the admin token `denv up` wrote). */
export function Login(props: {
  onSignIn: (token: string) => Promise<string | undefined>;
  notice?: string | undefined;
}) {
  const [token, setToken] = useState("");
  const [problem, setProblem] = useState<string>();
  const [busy, setBusy] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const t = token.trim();
    if (t === "") {
      setProblem("Paste an API token first.");
      return;
    }
    setBusy(true);
    setProblem(await props.onSignIn(t));
    setBusy(false);
  };
  return (
    <main id="main" className="login">
      <h1>denv</h1>
      <form onSubmit={submit} aria-describedby="token-help">
        <label htmlFor="token">API token</label>
        <input
          id="token"
          name="token"
          type="password"
          autoComplete="off"
          spellCheck={false}
          value={token}
          onChange={(e) => setToken(e.target.value)}
          // biome-ignore lint/a11y/noAutofocus: the page's only field
          autoFocus
        />
        <p id="token-help" className="sub">
          Kept in this tab's session storage only, sent only to this control plane.{" "}
          <code>denv tokens create</code> makes one; a project-scoped token sees only its project.
        </p>
        <button type="submit" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
        {(problem ?? props.notice) !== undefined && (
          <p className={problem === undefined ? "sub" : "error"} role="alert">
            {problem ?? props.notice}
          </p>
        )}
      </form>
    </main>
  );
}
