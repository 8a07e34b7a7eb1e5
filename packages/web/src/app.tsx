import { DenvApiError } from "@denv/sdk/browser";
import { type ReactNode, useEffect, useRef, useState } from "react";
import { type Session, SessionContext } from "./client-context.js";
import { DeploymentPage } from "./pages/deployment.js";
import { DeploymentsPage } from "./pages/deployments.js";
import { EnvironmentsPage } from "./pages/environments.js";
import { EpisodePage } from "./pages/episode.js";
import { HostsPage } from "./pages/hosts.js";
import { Login } from "./pages/login.js";
import { ProjectsPage } from "./pages/projects.js";
import { SandboxesPage } from "./pages/sandboxes.js";
import { VersionsPage } from "./pages/versions.js";
import { Link, match, navigate, usePath } from "./router.js";
import { clientFor, forgetToken, savedToken, saveToken } from "./session.js";
import { Page } from "./ui.js";

export function App() {
  const [session, setSession] = useState<Session>();
  const [checking, setChecking] = useState(savedToken() !== undefined);
  const [notice, setNotice] = useState<string>();

  const signIn = async (token: string): Promise<string | undefined> => {
    const client = clientFor(token);
    try {
      const who = await client.whoami();
      saveToken(token);
      setSession({ client, who });
      return undefined;
    } catch (err) {
      if (err instanceof DenvApiError && err.status === 401) return "That token is not valid (401).";
      return err instanceof Error ? err.message : String(err);
    }
  };

  // biome-ignore lint/correctness/useExhaustiveDependencies: once, with the tab's saved token
  useEffect(() => {
    const token = savedToken();
    if (token === undefined) return;
    void signIn(token).then((problem) => {
      if (problem !== undefined) {
        forgetToken();
        setNotice(problem);
      }
      setChecking(false);
    });
  }, []);

  if (checking) return <p className="boot">Signing in…</p>;
  if (session === undefined) return <Login onSignIn={signIn} notice={notice} />;
  const signOut = () => {
    forgetToken();
    setSession(undefined);
    setNotice("Signed out.");
  };
  return (
    <SessionContext.Provider value={session}>
      <Shell onSignOut={signOut}>
        <Routes />
      </Shell>
    </SessionContext.Provider>
  );
}

function Shell(props: { children: ReactNode; onSignOut: () => void }) {
  const path = usePath();
  const main = useRef<HTMLElement>(null);
  const first = useRef(true);
  // A new page moves focus to its heading, as a full page load would (keyboard and screen readers).
  // biome-ignore lint/correctness/useExhaustiveDependencies: runs when the page changes
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    main.current?.querySelector<HTMLElement>("h1")?.focus();
  }, [path]);
  const section = (p: string) => path === p || path.startsWith(`${p}/`);
  return (
    <>
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="top">
        <Link to="/projects" className="brand">
          denv
        </Link>
        <nav aria-label="main">
          <Link to="/projects" current={section("/projects") || section("/deployments")}>
            Projects
          </Link>
          <Link to="/sandboxes" current={section("/sandboxes")}>
            Sandboxes
          </Link>
          <Link to="/hosts" current={section("/hosts")}>
            Hosts
          </Link>
        </nav>
        <Who onSignOut={props.onSignOut} />
      </header>
      <main id="main" ref={main}>
        {props.children}
      </main>
    </>
  );
}

function Who({ onSignOut }: { onSignOut: () => void }) {
  return (
    <SessionContext.Consumer>
      {(s) => (
        <div className="who">
          <span title={s?.who.id}>
            {s?.who.name} ({s?.who.role}
            {s?.who.project === undefined ? "" : `, project ${s.who.project}`})
          </span>
          <button type="button" onClick={onSignOut}>
            Sign out
          </button>
        </div>
      )}
    </SessionContext.Consumer>
  );
}

const ROUTES: ReadonlyArray<[string, (p: Record<string, string>) => ReactNode]> = [
  ["/projects", () => <ProjectsPage />],
  ["/projects/:project/environments", (p) => <EnvironmentsPage project={p.project ?? ""} />],
  ["/projects/:project/versions", (p) => <VersionsPage project={p.project ?? ""} />],
  ["/projects/:project/deployments", (p) => <DeploymentsPage project={p.project ?? ""} />],
  ["/deployments/:id", (p) => <DeploymentPage id={p.id ?? ""} />],
  ["/episodes/:project/:env", (p) => <EpisodePage env={`${p.project}/${p.env}`} />],
  ["/sandboxes", () => <SandboxesPage />],
  ["/hosts", () => <HostsPage />],
];

function Routes() {
  const path = usePath();
  useEffect(() => {
    if (path === "/") navigate("/projects", { replace: true });
    const p = match("/projects/:project", path);
    if (p !== undefined)
      navigate(`/projects/${encodeURIComponent(p.project ?? "")}/environments`, { replace: true });
  }, [path]);
  if (path === "/" || match("/projects/:project", path) !== undefined) return null;
  for (const [pattern, render] of ROUTES) {
    const params = match(pattern, path);
    if (params !== undefined) return render(params);
  }
  return (
    <Page title="Not found">
      <p>
        No page at <code>{path}</code>. <Link to="/projects">Projects</Link>
      </p>
    </Page>
  );
}
