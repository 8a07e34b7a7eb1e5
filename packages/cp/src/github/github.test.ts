import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checkRunName, GithubMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FakeGithub } from "../testing/fake-github.js";
import type { FakeHost } from "../testing/fake-host.js";
import { startTestCp, type TestCp, waitFor } from "../testing/harness.js";

/**
 * Push-to-deploy against GitHub on loopback (testing/fake-github.ts) and a fake host: signed
 * deliveries, the app's JWT and installation tokens, check runs, and what is refused.
 */
describe("GitHub push-to-deploy", () => {
  let gh: FakeGithub;
  let t: TestCp;
  let h: FakeHost;
  let dir: string;
  const repo = "acme/shop";
  const logged: string[] = [];
  const record = (msg: string, fields?: object) => logged.push(`${msg} ${JSON.stringify(fields ?? {})}`);
  const sha = (n: number) => n.toString(16).padStart(40, "a");

  beforeAll(async () => {
    gh = await FakeGithub.start();
    await gh.createRepository(repo);
    await gh.createRepository("acme/other");
    dir = await mkdtemp(join(tmpdir(), "denv-github-"));
    t = await startTestCp({
      dataDir: join(dir, "cp"),
      githubAppId: gh.appId,
      githubPrivateKeyFile: await gh.writePrivateKey(dir),
      githubWebhookSecret: gh.webhookSecret,
      githubApiUrl: gh.url,
      githubWebUrl: gh.url,
      resumeTimeoutMs: 30_000,
      log: { debug: record, info: record, warn: record, error: record },
    });
    gh.webhookUrl = `${t.url}/v1/github/webhook`;
    h = await t.host({ name: "h1" });
    await t.admin.post("/v1/projects", { name: "shop" });
  });
  afterAll(async () => {
    await t?.close();
    await gh?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const deployments = async () =>
    (await t.admin.get("/v1/projects/shop/deployments")).body.deployments as unknown[];
  const finished = (id: string) =>
    waitFor(async () => {
      const d = (await t.admin.get(`/v1/deployments/${id}`)).body;
      return d.status !== "queued" && d.status !== "running" && d;
    });
  const completedRun = (headSha: string) =>
    waitFor(() => gh.checkRuns.find((r) => r.head_sha === headSha && r.status === "completed"));

  it("connects a repository: the app's installation (JWT) and the default branch (installation token)", async () => {
    const r = await t.admin.post("/v1/projects/shop/github", { repository: repo });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      project: "shop",
      repository: repo,
      branch: "main",
      installation_id: gh.installationId,
      clone_url: gh.cloneUrl(repo),
    });
    expect((await t.admin.get("/v1/projects/shop/github")).body.branch).toBe("main");
    const bad = await t.admin.post("/v1/projects/shop/github", { repository: "acme/../x" });
    expect(bad.status).toBe(400);
    const missing = await t.admin.post("/v1/projects/shop/github", { repository: "acme/missing" });
    expect(missing.body.error.message).toBe(GithubMessages.notInstalled("acme/missing"));
  });

  it("refuses a delivery whose signature is wrong: 401, nothing queued, the delivery id not spent", async () => {
    const payload = gh.pushPayload(repo, "refs/heads/main", sha(0), sha(1));
    const forged = await gh.deliver("push", payload, {
      id: "d-forged",
      signature: `sha256=${"0".repeat(64)}`,
    });
    expect(forged.status).toBe(401);
    expect(forged.body).toMatchObject({
      error: { code: "unauthorized", message: GithubMessages.badSignature },
    });
    const unsigned = await gh.deliver("push", payload, { id: "d-unsigned", signature: "" });
    expect(unsigned.status).toBe(401);
    // Signed with another secret (as an attacker who knows the format but not the secret would).
    const other = await fetch(gh.webhookUrl, {
      method: "POST",
      headers: { "x-github-event": "push", "x-github-delivery": "d-other", "x-hub-signature": "sha1=00" },
      body: JSON.stringify(payload),
    });
    expect(other.status).toBe(401);
    expect(await deployments()).toEqual([]);
    expect(gh.checkRuns).toEqual([]);
    expect(h.gitFetches).toEqual([]);
    // Of a refused delivery only its id is logged: nothing of its body or its other headers.
    const refused = logged.filter((l) => l.includes("bad signature"));
    expect(refused.length).toBe(3);
    expect(refused[0]).toBe('github webhook refused: bad signature {"delivery":"d-forged"}');
    expect(logged.join("\n")).not.toContain(repo);
    expect(logged.join("\n")).not.toContain(sha(1));
  });

  it("deploys alpha at the pushed commit, fetched by the host with an installation token; the check run completes", async () => {
    const d = await gh.deliver("push", gh.pushPayload(repo, "refs/heads/main", sha(0), sha(1)), {
      id: "d-forged",
    });
    expect(d.status).toBe(202);
    const { deployment } = d.body as { deployment: string; outcome: string };
    expect(d.body).toMatchObject({ outcome: "deployed", delivery: "d-forged" });
    const done = await finished(deployment);
    expect(done).toMatchObject({ kind: "deploy", environment: "shop/alpha", status: "succeeded" });
    const fetch = h.gitFetches.at(-1);
    expect(fetch).toMatchObject({ url: gh.cloneUrl(repo), ref: sha(1) });
    const [user, token] = Buffer.from(String(fetch?.authorization).replace(/^Basic /, ""), "base64")
      .toString()
      .split(":");
    expect(user).toBe("x-access-token");
    expect(gh.tokensIssued).toContain(token);
    // The token is the host's to use, never the deployment row's.
    expect(JSON.stringify((await t.admin.get(`/v1/deployments/${deployment}`)).body)).not.toContain(
      String(token),
    );

    const run = await completedRun(sha(1));
    expect(run).toMatchObject({
      repository: repo,
      name: checkRunName("alpha"),
      conclusion: "success",
      details_url: `${t.url}/deployments/${deployment}`,
    });
    expect(run.history[0]).toBe("in_progress");
    expect(run.output?.summary).toContain("| resolve source | succeeded |");
    expect(run.output?.summary).toContain("Version: `shop@v1`");
    expect(run.output?.summary).toMatch(/\| switch \| succeeded \| \d+\.\d s \|/);
  });

  it("acts on a re-sent delivery once", async () => {
    const before = (await deployments()).length;
    const again = await gh.deliver("push", gh.pushPayload(repo, "refs/heads/main", sha(0), sha(1)), {
      id: "d-forged",
    });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ outcome: "duplicate" });
    expect((await deployments()).length).toBe(before);
    expect(gh.checkRuns.filter((r) => r.head_sha === sha(1)).length).toBe(1);
  });

  it("ignores an unknown repository, another branch, a deleted branch, pings and other events", async () => {
    const before = (await deployments()).length;
    const unknown = await gh.deliver("push", gh.pushPayload("acme/other", "refs/heads/main", sha(0), sha(2)));
    expect(unknown.body).toMatchObject({
      outcome: "ignored",
      reason: GithubMessages.unknownRepository("acme/other"),
    });
    const branch = await gh.deliver("push", gh.pushPayload(repo, "refs/heads/feature", sha(0), sha(3)));
    expect(branch.body).toMatchObject({
      outcome: "ignored",
      reason: GithubMessages.otherBranch("refs/heads/feature", "main"),
    });
    const deleted = await gh.deliver("push", gh.pushPayload(repo, "refs/heads/main", sha(1), "0".repeat(40)));
    expect(deleted.body).toMatchObject({ outcome: "ignored" });
    const ping = await gh.deliver("ping", { zen: "Keep it logically awesome.", hook_id: 1 });
    expect(ping).toMatchObject({ status: 200, body: { outcome: "pong" } });
    const issues = await gh.deliver("issues", { action: "opened" });
    expect(issues.body).toMatchObject({ outcome: "ignored", reason: GithubMessages.eventIgnored("issues") });
    expect((await deployments()).length).toBe(before);
    expect(gh.checkRuns.some((r) => [sha(2), sha(3)].includes(r.head_sha))).toBe(false);
  });

  it("uses one installation token until it nears expiry", () => {
    expect(gh.tokensIssued.length).toBe(1);
  });

  it("deploy --ref of a connected project: the host gets the clone URL and an installation token", async () => {
    const r = await t.admin.post("/v1/projects/shop/deploy?wait=true", { git_ref: "main" });
    expect(r.body.status).toBe("succeeded");
    const f = h.gitFetches.at(-1);
    expect(f).toMatchObject({ url: gh.cloneUrl(repo), ref: "main" });
    expect(f?.authorization).toMatch(/^Basic /);
  });

  it("an uninstalled app: the connection loses its installation and a push is not deployed", async () => {
    await gh.deliver("installation", { action: "deleted", installation: { id: gh.installationId } });
    expect((await t.admin.get("/v1/projects/shop/github")).body.installation_id).toBeUndefined();
    const refused = await t.admin.post("/v1/projects/shop/deploy", { git_ref: "main" });
    expect(refused.body.error.message).toBe(GithubMessages.notInstalled(repo));
    await gh.deliver("installation", {
      action: "created",
      installation: { id: gh.installationId },
      repositories: [{ full_name: repo }],
    });
    expect((await t.admin.get("/v1/projects/shop/github")).body.installation_id).toBe(gh.installationId);
  });

  it("a cp restart between the webhook and the deploy: the deployment runs once and its check run completes", async () => {
    h.hold = (c) => c.kind === "env.deploy";
    const d = await gh.deliver("push", gh.pushPayload(repo, "refs/heads/main", sha(1), sha(4)));
    const id = (d.body as { deployment: string }).deployment;
    await h.command("env.deploy");
    await waitFor(() => gh.checkRuns.find((r) => r.head_sha === sha(4)));
    await t.restart();
    gh.webhookUrl = `${t.url}/v1/github/webhook`;
    await h.until(() => !h.connected);
    h.hold = () => false;
    await h.connect(t.url);
    expect((await finished(id)).status).toBe("succeeded");
    const run = await completedRun(sha(4));
    expect(run).toMatchObject({ conclusion: "success", details_url: `${t.url}/deployments/${id}` });
    expect(gh.checkRuns.filter((r) => r.head_sha === sha(4)).length).toBe(1);
    expect((await deployments()).filter((x) => (x as { id: string }).id === id).length).toBe(1);
  });

  it("deploy --ref: a project with a public repository URL is fetched by the host, without a token; bad refs are refused", async () => {
    await t.admin.post("/v1/projects", { name: "pub", repo: "https://git.example.invalid/pub.git" });
    const r = await t.admin.post("/v1/projects/pub/deploy?wait=true", { git_ref: "v1.2" });
    expect(r.body.status).toBe("succeeded");
    expect(h.gitFetches.at(-1)).toEqual(
      expect.objectContaining({ url: "https://git.example.invalid/pub.git", ref: "v1.2" }),
    );
    expect(h.gitFetches.at(-1)?.authorization).toBeUndefined();
    for (const ref of ["--upload-pack=touch /tmp/x", "a..b", "main lock", "refs/heads/x.lock"]) {
      const bad = await t.admin.post("/v1/projects/pub/deploy", { git_ref: ref });
      expect(bad.status, ref).toBe(400);
    }
    await t.admin.post("/v1/projects", { name: "norepo" });
    const none = await t.admin.post("/v1/projects/norepo/deploy", { git_ref: "main" });
    expect(none.body.error.message).toBe(
      "project norepo has no repository: create it with --repo URL, connect it (denv projects connect-github OWNER/REPO), or upload the folder",
    );
  });
});
