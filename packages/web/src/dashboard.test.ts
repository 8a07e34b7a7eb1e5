import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runnableLines } from "../../cli/src/e2e/doc-blocks.js";
import { cli, repo, run, type Stack, startStack } from "../../cli/src/e2e/stack.js";

/**
 * The dashboard in headless Chromium (Debian's chromium, driven by playwright-core) against a
 * real control plane and denvd with the quickstart deployed: one stack for the file. Each page is
 * opened as a person would (sign in with a token, follow links, keyboard), checked against what
 * the API holds, and photographed: a screenshot per page goes to the artifacts folder
 * (DENV_TEST_ARTIFACTS), and with DENV_UPDATE_SCREENSHOTS=1 to docs/images/dashboard-*.png, which
 * docs/how-to/dashboard.md shows (a plain run leaves the checkout as it was). The browser may talk only
 * to the control plane on loopback: any other request is refused and fails the file.
 */

const CHROMIUM = "/usr/bin/chromium";
const artifacts = process.env.DENV_TEST_ARTIFACTS ?? path.join(os.tmpdir(), "denv-test-artifacts");
const docsImages = process.env.DENV_UPDATE_SCREENSHOTS === "1" ? path.join(repo, "docs/images") : undefined;

describe("the dashboard in headless Chromium", () => {
  let stack: Stack;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let origin: string;
  let deploymentId: string;
  let sandboxId: string;
  let scopedToken: string;
  /** Every request the browser tried that was not to the control plane. */
  const offOrigin: string[] = [];

  beforeAll(async () => {
    if (!existsSync(CHROMIUM))
      throw new Error(`${CHROMIUM} is missing: scripts/setup-host installs chromium`);
    if (!existsSync(path.join(repo, "packages/web/dist/index.html")))
      throw new Error("packages/web/dist is missing: run npm run build");
    stack = await startStack();
    origin = new URL(stack.url).origin;
    expect((await stack.denv(["projects", "create", "quickstart"])).code).toBe(0);
    // A project the scoped token must never see.
    expect((await stack.denv(["projects", "create", "secret-shop"])).code).toBe(0);
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        // Names resolve to nothing but loopback: the page cannot reach anything else.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
      ],
    });
    context = await newContext();
    page = await context.newPage();
    mkdirSync(artifacts, { recursive: true });
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    await stack?.close();
  }, 180_000);

  async function newContext(viewport = { width: 1280, height: 900 }): Promise<BrowserContext> {
    const c = await browser.newContext({ viewport });
    await c.route(
      (url) => url.origin !== origin,
      (route) => {
        offOrigin.push(route.request().url());
        return route.abort("blockedbyclient");
      },
    );
    return c;
  }

  async function signIn(p: Page, token: string, at: string): Promise<void> {
    await p.goto(`${origin}${at}`);
    await p.getByLabel("API token").fill(token);
    await p.getByRole("button", { name: "Sign in" }).click();
    await p.getByRole("button", { name: "Sign out" }).waitFor();
  }

  async function shoot(p: Page, name: string): Promise<void> {
    const file = path.join(artifacts, `dashboard-${name}.png`);
    await p.screenshot({ path: file, fullPage: true });
    if (docsImages === undefined) return;
    mkdirSync(docsImages, { recursive: true });
    copyFileSync(file, path.join(docsImages, `dashboard-${name}.png`));
  }

  const heading = (p: Page) => p.getByRole("heading", { level: 1 });

  it("deployment: the phase timeline moves live during a real deploy, with evidence and the log", async () => {
    // Every change of the phases' statuses, recorded in the page as it happens.
    await page.addInitScript(() => {
      const w = window as unknown as { phaseLog: string[] };
      w.phaseLog = [];
      new MutationObserver(() => {
        const now = [...document.querySelectorAll<HTMLElement>("[data-phase]")]
          .map((e) => `${e.dataset.phase}=${e.dataset.status}`)
          .join(",");
        if (now !== "" && now !== w.phaseLog[w.phaseLog.length - 1]) w.phaseLog.push(now);
      }).observe(document, {
        subtree: true,
        childList: true,
        attributes: true,
        attributeFilter: ["data-status"],
      });
    });
    // Signed in first, so that only opening the page is left once the deploy runs (a sign-in
    // on a loaded machine could outlast a cached redeploy, and the page would open on its end).
    await signIn(page, stack.token, "/");
    // docs/how-to/dashboard.md's commands: a deploy started with --no-wait prints its page, and a
    // token scoped to the project is made with the API.
    // The stack's denvd is stopped (SIGSTOP) once the deploy is started and continued once the
    // page shows its phases, so that the page opens on a deploy still running however slowly the
    // browser starts (a loaded machine once finished the deploy first: CI). Well within the
    // 3 missed heartbeats that would make the host offline.
    const denvd = Number(readFileSync(path.join(stack.dataDir, "denvd.pid"), "utf8").trim());
    const resume = () => process.kill(denvd, "SIGCONT");
    const resumeAnyway = setTimeout(resume, 8_000);
    let transcript = "";
    try {
      for (const { line, code } of runnableLines("how-to/dashboard.md", "dashboard")) {
        const r = await run(
          "bash",
          ["-c", `denv() { node ${JSON.stringify(cli)} "$@"; }\ncd ${JSON.stringify(repo)}\n${line}`],
          stack.env,
        );
        if (line.includes("denv deploy")) process.kill(denvd, "SIGSTOP");
        expect(r.code, `${line}\n${r.stdout}\n${r.stderr}`).toBe(code);
        transcript += r.stdout;
      }
    } catch (err) {
      clearTimeout(resumeAnyway);
      resume();
      throw err;
    }
    const printed = /^or open (http:\/\/\S+\/deployments\/(dep_\w+))$/m.exec(transcript);
    expect(printed, transcript).not.toBeNull();
    const [, pageUrl, id] = printed as RegExpExecArray;
    expect(transcript.startsWith(`${stack.url}\n`)).toBe(true);
    expect(transcript).toMatch(
      new RegExp(`^deployment ${id} (queued|running): deploy quickstart/alpha$`, "m"),
    );
    deploymentId = id as string;
    const token = JSON.parse(transcript.slice(transcript.indexOf("{"))) as { token: string; project: string };
    expect(token.project).toBe("quickstart");
    scopedToken = token.token;
    let loads = 0;
    page.on("load", () => loads++);
    try {
      await page.goto(pageUrl as string);
      await expect.poll(() => heading(page).textContent()).toBe(`Deployment ${deploymentId}`);
      await page.locator(".phase[data-phase]").first().waitFor();
    } finally {
      clearTimeout(resumeAnyway);
      resume();
    }
    const loadsBefore = loads;
    await page.locator('.phase[data-phase="switch"][data-status="succeeded"]').waitFor({ timeout: 180_000 });
    await page.getByRole("status").filter({ hasText: "live" }).waitFor({ state: "detached" });
    expect(loads, "the page followed the deploy without a reload").toBe(loadsBefore);

    const seen = await page.evaluate(() => (window as unknown as { phaseLog: string[] }).phaseLog);
    const first = seen[0] ?? "";
    const last = seen[seen.length - 1] ?? "";
    expect(
      first.split(",").some((s) => !s.endsWith("=succeeded") && s !== "smoke verify=skipped"),
      `first: ${first}`,
    ).toBe(true);
    // Every phase ended; `smoke verify` is skipped (the quickstart asks for none).
    expect(
      last.split(",").every((s) => s.endsWith("=succeeded") || s === "smoke verify=skipped"),
      `last: ${last}`,
    ).toBe(true);
    expect(last).toContain("switch=succeeded");
    // At least one phase was seen running and then succeeded on the same page.
    const running = seen.flatMap((snap) => snap.split(",").filter((s) => s.endsWith("=running")));
    expect(running.length, seen.join("\n")).toBeGreaterThan(0);
    expect(seen.length).toBeGreaterThanOrEqual(3);

    const api = await (
      await fetch(`${stack.url}/v1/deployments/${deploymentId}`, {
        headers: { authorization: `Bearer ${stack.token}` },
      })
    ).json();
    const place = api.phases.find((p: { name: string }) => p.name === "place").evidence;
    const snapshot = api.phases.find((p: { name: string }) => p.name === "snapshot").evidence;
    const placePhase = page.locator('.phase[data-phase="place"]');
    await expect.poll(() => placePhase.textContent()).toContain(place.reason);
    const probePhase = page.locator('.phase[data-phase="probe"]');
    await expect.poll(() => probePhase.textContent()).toContain("no way out");
    expect(await page.locator('.phase[data-phase="snapshot"]').textContent()).toContain(snapshot.method);
    await expect.poll(() => page.locator("pre.log").textContent()).not.toBe("");
    expect(await page.locator(".result").textContent()).toContain("quickstart@v1");
    await shoot(page, "deployment");

    // A narrow screen: nothing wider than the screen, the timeline still there.
    const narrow = await newContext({ width: 375, height: 800 });
    const phone = await narrow.newPage();
    await signIn(phone, stack.token, `/deployments/${deploymentId}`);
    await phone.locator('.phase[data-phase="switch"][data-status="succeeded"]').waitFor();
    const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    await shoot(phone, "deployment-narrow");
    await narrow.close();
  }, 240_000);

  it("environments: the fork tree with parent versions, who forked what, and live status", async () => {
    expect((await stack.denv(["env", "fork", "quickstart/alpha", "--name", "solved"])).code).toBe(0);
    const sandbox = await stack.json<{ id: string }>(["sandboxes", "create", "quickstart", "--name", "ep1"]);
    sandboxId = sandbox.id;
    await page.goto(`${origin}/projects/quickstart/environments`);
    const tree = page.getByRole("list", { name: "fork tree" });
    const alpha = tree.getByRole("article", { name: "environment quickstart/alpha" });
    const solved = tree.getByRole("article", { name: "environment quickstart/solved" });
    await solved.waitFor();
    expect(await alpha.textContent()).toContain("running");
    // solved hangs under quickstart@v1, which hangs under alpha.
    const v1 = tree
      .locator("li", { has: page.locator(".node.version", { hasText: "quickstart@v1" }) })
      .first();
    expect(await v1.getByRole("article", { name: "environment quickstart/solved" }).count()).toBe(1);
    expect(await solved.textContent()).toContain("forked from quickstart@v1");
    // Who forked what: the fork deployment of quickstart/solved, as the API lists it.
    const listed = await (
      await fetch(`${stack.url}/v1/projects/quickstart/deployments`, {
        headers: { authorization: `Bearer ${stack.token}` },
      })
    ).json();
    const forkDep = listed.deployments.find(
      (d: { kind: string; environment: string }) =>
        d.kind === "fork" && d.environment === "quickstart/solved",
    );
    expect(await solved.getByRole("link", { name: forkDep.id }).count()).toBe(1);
    expect(await solved.textContent()).toContain("running");
    // The evidence alpha's host recorded: placement and caps, for people.
    const env = await (
      await fetch(`${stack.url}/v1/environments/quickstart/alpha`, {
        headers: { authorization: `Bearer ${stack.token}` },
      })
    ).json();
    await alpha.getByText("Evidence").click();
    const evidence = (await alpha.locator("dl.evidence").textContent()) ?? "";
    expect(evidence).toContain(`on ${env.evidence.placement.host}: ${env.evidence.placement.reason}`);
    expect(evidence).toContain(`cpus ${env.evidence.caps.cpus} · pids ${env.evidence.caps.pids}`);
    expect(evidence).toContain("no way out");
    await shoot(page, "environments");
  }, 180_000);

  it("versions: digests, sizes, replicas and retention", async () => {
    await page.goto(`${origin}/projects/quickstart/versions`);
    const card = page.locator("li.card", { hasText: "quickstart@v1" }).first();
    await card.waitFor();
    const v = await (
      await fetch(`${stack.url}/v1/versions/quickstart/1`, {
        headers: { authorization: `Bearer ${stack.token}` },
      })
    ).json();
    const text = (await card.textContent()) ?? "";
    for (const service of Object.keys(v.digests)) expect(text).toContain(service);
    expect(text).toContain(
      String(Object.values<string>(v.digests)[0])
        .replace(/^sha256:/, "")
        .slice(0, 19),
    );
    expect(text).toContain(v.method);
    expect(text).toContain(`1 host: ${stack.hostId()}`);
    expect(text).toMatch(/kept: .*quickstart\/alpha/);
    await shoot(page, "versions");
  }, 60_000);

  it("sandboxes: the episode, pool hit or miss, probe evidence and the reward", async () => {
    // One step of the episode's command log, then its grade.
    const step = await stack.denv(["exec", sandboxId, "--", "sh", "-c", "echo graded-by-denv; exit 3"]);
    expect(step.code).toBe(3);
    expect((await stack.denv(["verify", sandboxId])).code).toBe(0);
    await page.goto(`${origin}/sandboxes`);
    const card = page.getByRole("listitem", { name: `sandbox ${sandboxId}` });
    await expect.poll(() => card.textContent(), { timeout: 15_000 }).toContain("reward0");
    const text = (await card.textContent()) ?? "";
    expect(text).toContain("pool miss");
    expect(text).toContain("no way out");
    expect(text).toContain("fork of quickstart@v1");
    // The episode's deployments link to their pages.
    await card.getByRole("link", { name: "verify" }).click();
    await expect.poll(() => heading(page).textContent()).toMatch(/^Deployment /);
    await page.locator('.phase[data-phase="collect"]').waitFor();
    expect(await page.locator(".result").textContent()).toContain("reward0");
    await page.goto(`${origin}/sandboxes`);
    await card.waitFor();
    await shoot(page, "sandboxes");

    // The episode's command log: the step with its exit code and the digest of its output.
    await card.getByRole("link", { name: "the episode's steps" }).click();
    const row = page.locator("tr[data-seq]").first();
    await row.waitFor();
    const digest = createHash("sha256").update("graded-by-denv\n").digest("hex");
    const rowText = (await row.textContent()) ?? "";
    expect(rowText).toContain("echo graded-by-denv; exit 3");
    expect(rowText).toContain(digest.slice(0, 12));
    expect(await row.locator("td").nth(3).textContent()).toBe("3");
    expect(await page.locator("tr[data-seq]").count()).toBe(1);
    // Its replay is kept and listed below the log: no divergence, the fork linked to its own page.
    expect((await stack.denv(["replay", sandboxId, "--name", "dash-replay"])).code).toBe(0);
    const replay = page.locator("tr[data-replay]").first();
    await expect.poll(() => replay.textContent(), { timeout: 15_000 }).toContain("quickstart/dash-replay");
    const replayText = (await replay.textContent()) ?? "";
    expect(replayText).toContain("quickstart@v1");
    expect(replayText).toContain("none");
    expect(replayText).toContain("1 same");
    await shoot(page, "episode");
    await replay.getByRole("link", { name: "quickstart/dash-replay" }).click();
    await expect.poll(() => heading(page).textContent()).toBe("Episode quickstart/dash-replay");
    await page.locator("tr[data-seq]").first().waitFor();
    expect((await page.locator("tr[data-seq]").first().textContent()) ?? "").toContain(
      "echo graded-by-denv; exit 3",
    );
  }, 120_000);

  it("hosts: capacity and health", async () => {
    await page.goto(`${origin}/hosts`);
    const row = page.getByRole("row", { name: new RegExp(stack.hostId()) });
    await row.waitFor();
    const text = (await row.textContent()) ?? "";
    expect(text).toContain("online");
    expect(text).toContain(String(os.cpus().length));
    expect(text).toMatch(/GiB/);
    await shoot(page, "hosts");
  }, 60_000);

  it("projects, by keyboard alone (skip link, the menu, focus), and every page on a 375 px screen", async () => {
    await page.goto(`${origin}/projects`);
    await page.getByRole("heading", { name: "quickstart" }).waitFor();
    expect(await page.getByRole("heading", { name: "secret-shop" }).count()).toBe(1);
    await shoot(page, "projects");
    await page.keyboard.press("Tab");
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Skip to content");
    // Tab on to the Hosts menu entry and open it with Enter.
    for (let i = 0; i < 10; i++) {
      await page.keyboard.press("Tab");
      if ((await page.evaluate(() => document.activeElement?.textContent)) === "Hosts") break;
    }
    await page.keyboard.press("Enter");
    await expect.poll(() => page.evaluate(() => window.location.pathname)).toBe("/hosts");
    // The new page's heading has the focus, as after a page load.
    await expect.poll(() => page.evaluate(() => document.activeElement?.tagName)).toBe("H1");

    // Every page fits a phone-sized screen: wide tables scroll inside themselves, the page does not.
    const narrow = await newContext({ width: 375, height: 800 });
    const phone = await narrow.newPage();
    await signIn(phone, stack.token, "/projects");
    for (const [at, ready] of [
      ["/projects", "li.card"],
      ["/projects/quickstart/environments", ".tree article"],
      ["/projects/quickstart/versions", "li.card"],
      ["/projects/quickstart/deployments", "tbody tr"],
      ["/sandboxes", "li.card"],
      [`/episodes/${sandboxId}`, "tr[data-seq]"],
      ["/hosts", "tbody tr"],
    ] as const) {
      await phone.goto(`${origin}${at}`);
      await phone.locator(ready).first().waitFor();
      const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      expect(overflow, at).toBeLessThanOrEqual(0);
    }
    await narrow.close();
  }, 60_000);

  it("a scoped token sees only its project, and every request carries that token", async () => {
    const scoped = await newContext();
    const p = await scoped.newPage();
    const bodies: string[] = [];
    const auths = new Set<string>();
    p.on("request", (r) => {
      if (new URL(r.url()).pathname.startsWith("/v1/")) auths.add(r.headers().authorization ?? "none");
    });
    p.on("response", async (r) => {
      if (new URL(r.url()).pathname.startsWith("/v1/") && !r.url().includes("/log"))
        bodies.push(await r.text().catch(() => ""));
    });
    await signIn(p, scopedToken, "/projects");
    await p.getByRole("heading", { name: "quickstart" }).waitFor();
    expect(await p.getByRole("heading", { name: "secret-shop" }).count()).toBe(0);
    expect(await p.getByRole("button", { name: "Sign out" }).locator("..").textContent()).toContain(
      "project quickstart",
    );
    await p.goto(`${origin}/projects/secret-shop/environments`);
    await p.getByRole("alert").first().waitFor();
    expect(await p.getByRole("alert").first().textContent()).toMatch(/Could not load environments: /);
    await p.goto(`${origin}/sandboxes`);
    await p.getByRole("listitem", { name: `sandbox ${sandboxId}` }).waitFor();
    await p.goto(`${origin}/deployments/${deploymentId}`);
    await p.locator('.phase[data-phase="switch"]').waitFor();
    // The token stays in the tab's session storage, nowhere else.
    expect(await p.evaluate(() => sessionStorage.getItem("denv.token"))).toBe(scopedToken);
    expect(await p.evaluate(() => localStorage.length + document.cookie.length)).toBe(0);
    await shoot(p, "scoped");
    expect([...auths]).toEqual([`Bearer ${scopedToken}`]);
    for (const b of bodies) expect(b).not.toMatch(/"(name|project)":"secret-shop"/);
    expect(bodies.length).toBeGreaterThan(3);
    await scoped.close();
  }, 60_000);

  it("the browser talked to nothing but the control plane on loopback", () => {
    expect(offOrigin).toEqual([]);
    expect(new URL(origin).hostname).toBe("127.0.0.1");
  });
});
