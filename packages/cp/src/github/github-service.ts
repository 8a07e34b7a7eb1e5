import { createHash } from "node:crypto";
import {
  checkRunName,
  DenvError,
  type GithubConnection,
  GithubMessages,
  GithubRepoName,
  type GithubWebhookReply,
} from "@denv/spec";
import type { DeploymentEngine } from "../engine/engine.js";
import { nowIso } from "../ids.js";
import { errorMessage, type Log } from "../log.js";
import type { Principal } from "../services/access.js";
import type { DeploymentService } from "../services/deployment-service.js";
import type { ProjectService } from "../services/project-service.js";
import type { CheckRunRecord, GithubConnectionRecord } from "../store/github-store.js";
import type { Store } from "../store/store.js";
import { checkRunOutput } from "./check-run-summary.js";
import { type GithubApp, gitAuthorization } from "./github-app.js";
import { verifyWebhook } from "./webhook-signature.js";

/** The identity pushes deploy as. */
const GITHUB: Principal = { tokenId: "system", name: "github", role: "admin" };

/** The environment a push deploys. */
const PUSH_ENVIRONMENT = "alpha";

export interface GithubServiceOptions {
  app: GithubApp | undefined;
  webhookSecret: string | undefined;
  /** https://github.com or a GitHub Enterprise Server: clone URLs are <webUrl>/OWNER/REPO.git. */
  webUrl: string;
  /** The dashboard's deployment page is <publicUrl>/deployments/<id> (read late: tests bind port 0). */
  publicUrl: () => string;
}

export interface WebhookDelivery {
  event: string | undefined;
  delivery: string | undefined;
  signature: string | undefined;
  body: Buffer;
}

/**
 * Push-to-deploy: connects projects to repositories, turns signed push deliveries into deploys of
 * alpha at the pushed commit, keeps each one's check run up to date, and gives a deploy of a
 * connected project the installation token its host fetches with.
 */
export class GithubService {
  /** Each check run's updates in order, one at a time. */
  private chains = new Map<string, Promise<void>>();
  private tracked = new Set<string>();

  constructor(
    private readonly store: Store,
    private readonly engine: DeploymentEngine,
    private readonly projects: ProjectService,
    private readonly deployments: DeploymentService,
    private readonly log: Log,
    private readonly o: GithubServiceOptions,
  ) {}

  private requireApp(): GithubApp {
    if (!this.o.app || !this.o.webhookSecret)
      throw new DenvError("invalid_request", GithubMessages.notConfigured);
    return this.o.app;
  }

  async connect(
    p: Principal,
    project: string,
    req: { repository: string; branch?: string | undefined },
  ): Promise<GithubConnection> {
    await this.projects.require(p, project);
    const app = this.requireApp();
    const repository = GithubRepoName.parse(req.repository).toLowerCase();
    const other = await this.store.github.connectionOfRepository(repository);
    if (other && other.project !== project)
      throw new DenvError("conflict", `${repository} is connected to project ${other.project}`);
    const installationId = await app.repositoryInstallation(repository);
    if (installationId === undefined)
      throw new DenvError("invalid_request", GithubMessages.notInstalled(repository));
    const branch = req.branch ?? (await app.defaultBranch(repository, installationId));
    if (!/^[A-Za-z0-9._/-]{1,200}$/.test(branch) || branch.includes(".."))
      throw new DenvError("invalid_request", `refused branch name ${JSON.stringify(branch)}`);
    const c: GithubConnectionRecord = {
      project,
      repository,
      branch,
      installationId,
      cloneUrl: `${this.o.webUrl.replace(/\/$/, "")}/${repository}.git`,
      createdAt: nowIso(),
    };
    await this.store.github.putConnection(c);
    return present(c);
  }

  async connection(p: Principal, project: string): Promise<GithubConnection> {
    await this.projects.require(p, project);
    const c = await this.store.github.connectionOfProject(project);
    if (!c) throw new DenvError("not_found", `project ${project} is not connected to GitHub`);
    return present(c);
  }

  /** The git URL and HTTP authorization a deploy of `project` fetches with (connected projects). */
  async gitSource(project: string): Promise<{ url: string; authorization?: string } | undefined> {
    const c = await this.store.github.connectionOfProject(project);
    if (!c) return undefined;
    if (!this.o.app || c.installationId === undefined)
      throw new DenvError("invalid_request", GithubMessages.notInstalled(c.repository));
    return {
      url: c.cloneUrl,
      authorization: gitAuthorization(await this.o.app.installationToken(c.installationId)),
    };
  }

  /** POST /v1/github/webhook. Throws 401 before anything is read when the signature is wrong. */
  async webhook(d: WebhookDelivery): Promise<{ status: 200 | 202; body: GithubWebhookReply }> {
    const secret = this.o.webhookSecret;
    if (!secret || !verifyWebhook(secret, d.body, d.signature)) {
      // Only the delivery id is logged: nothing of an unverified body or its headers.
      this.log.warn("github webhook refused: bad signature", { delivery: safeId(d.delivery) ?? "(none)" });
      throw new DenvError("unauthorized", GithubMessages.badSignature);
    }
    const delivery = safeId(d.delivery);
    if (!delivery) throw new DenvError("invalid_request", "X-GitHub-Delivery is missing or malformed");
    const event = d.event ?? "";
    const seen = await this.store.github.getDelivery(delivery);
    if (seen)
      return ok(200, {
        delivery,
        outcome: "duplicate",
        ...(seen.deploymentId ? { deployment: seen.deploymentId } : {}),
      });
    let payload: Record<string, unknown>;
    try {
      payload = JSON.parse(d.body.toString("utf8")) as Record<string, unknown>;
    } catch {
      throw new DenvError(
        "invalid_request",
        "the delivery's body is not JSON (set the webhook's content type to application/json)",
      );
    }
    const reply = await this.handle(event, delivery, payload);
    await this.store.github.recordDelivery({
      id: delivery,
      event,
      outcome: reply.outcome,
      ...(reply.deployment ? { deploymentId: reply.deployment } : {}),
      at: nowIso(),
    });
    this.log.info("github webhook", { delivery, event, outcome: reply.outcome });
    return ok(reply.outcome === "deployed" ? 202 : 200, reply);
  }

  private async handle(
    event: string,
    delivery: string,
    payload: Record<string, unknown>,
  ): Promise<GithubWebhookReply> {
    switch (event) {
      case "ping":
        return { delivery, outcome: "pong" };
      case "installation":
      case "installation_repositories":
        await this.installation(event, payload);
        return { delivery, outcome: "installation" };
      case "push":
        return this.push(delivery, payload);
      default:
        return { delivery, outcome: "ignored", reason: GithubMessages.eventIgnored(event || "(none)") };
    }
  }

  private async installation(event: string, payload: Record<string, unknown>): Promise<void> {
    const action = String(payload.action ?? "");
    const id = Number((payload.installation as { id?: unknown } | undefined)?.id);
    if (!Number.isInteger(id)) return;
    const names = (key: string) =>
      ((payload[key] as Array<{ full_name?: unknown }> | undefined) ?? [])
        .map((r) => String(r.full_name ?? ""))
        .filter((n) => GithubRepoName.safeParse(n).success);
    if (event === "installation" && (action === "deleted" || action === "suspend")) {
      await this.store.github.clearInstallation(id);
    } else if (event === "installation") {
      await this.store.github.setInstallation(names("repositories"), id);
    } else {
      await this.store.github.setInstallation(names("repositories_added"), id);
      await this.store.github.setInstallation(names("repositories_removed"), undefined);
    }
  }

  private async push(delivery: string, payload: Record<string, unknown>): Promise<GithubWebhookReply> {
    const repository = String((payload.repository as { full_name?: unknown } | undefined)?.full_name ?? "");
    const ref = String(payload.ref ?? "");
    const after = String(payload.after ?? "");
    const c = GithubRepoName.safeParse(repository).success
      ? await this.store.github.connectionOfRepository(repository)
      : undefined;
    if (!c) return { delivery, outcome: "ignored", reason: GithubMessages.unknownRepository(repository) };
    const branch = ref.replace(/^refs\/heads\//, "");
    if (!ref.startsWith("refs/heads/") || branch !== c.branch)
      return { delivery, outcome: "ignored", reason: GithubMessages.otherBranch(ref, c.branch) };
    if (payload.deleted === true || !/^[0-9a-f]{40}$/.test(after) || /^0+$/.test(after))
      return { delivery, outcome: "ignored", reason: `push to ${branch} deleted it: nothing to deploy` };
    const installationId = Number(
      (payload.installation as { id?: unknown } | undefined)?.id ?? c.installationId,
    );
    if (!Number.isInteger(installationId))
      return { delivery, outcome: "ignored", reason: GithubMessages.notInstalled(c.repository) };
    // One deployment per delivery, whatever happens: its id comes from the delivery's.
    const id = `dep_gh${createHash("sha256").update(delivery).digest("hex").slice(0, 20)}`;
    await this.store.github.putCheckRun({
      deploymentId: id,
      repository: c.repository,
      installationId,
      headSha: after,
      name: checkRunName(PUSH_ENVIRONMENT),
      completed: false,
      createdAt: nowIso(),
    });
    this.track(id);
    try {
      await this.deployments.deploy(
        GITHUB,
        c.project,
        { environment: PUSH_ENVIRONMENT },
        { kind: "git", ref: after },
        id,
      );
    } catch (err) {
      if (err instanceof DenvError && err.code === "conflict")
        return { delivery, outcome: "duplicate", deployment: id };
      throw err;
    }
    return { delivery, outcome: "deployed", deployment: id };
  }

  /** Check runs a previous process left open: completed if their deployment ended, else followed. */
  async resume(): Promise<void> {
    for (const r of await this.store.github.listOpenCheckRuns()) {
      const d = await this.store.getDeployment(r.deploymentId);
      if (!d) continue;
      this.track(r.deploymentId);
      if (d.status === "succeeded" || d.status === "failed") this.update(r.deploymentId);
    }
  }

  /** Waits for a deployment's check-run updates queued so far (tests, shutdown). */
  async settled(deploymentId: string): Promise<void> {
    await this.chains.get(deploymentId);
  }

  private track(id: string): void {
    if (this.tracked.has(id)) return;
    this.tracked.add(id);
    const unsubscribe = this.engine.subscribe(id, {
      entry: (e) => {
        if (e.event === "phase") this.update(id);
      },
      done: () => {
        unsubscribe();
        this.tracked.delete(id);
        this.update(id);
      },
    });
  }

  /** Queues one update of the check run from the deployment's row as it is when the update runs. */
  private update(id: string): void {
    const previous = this.chains.get(id) ?? Promise.resolve();
    const next = previous.then(() =>
      this.sync(id).catch((err: unknown) =>
        this.log.warn("github check run update failed", { deployment: id, error: errorMessage(err) }),
      ),
    );
    this.chains.set(id, next);
    void next.finally(() => {
      if (this.chains.get(id) === next) this.chains.delete(id);
    });
  }

  private async sync(id: string): Promise<void> {
    const app = this.o.app;
    const r = await this.store.github.getCheckRun(id);
    const d = await this.store.getDeployment(id);
    if (!app || !r || r.completed || !d) return;
    const details_url = `${this.o.publicUrl().replace(/\/$/, "")}/deployments/${id}`;
    const done = d.status === "succeeded" || d.status === "failed";
    const output = checkRunOutput(d);
    let checkRunId = r.checkRunId;
    if (checkRunId === undefined) {
      checkRunId = await app.createCheckRun(r.repository, r.installationId, {
        name: r.name,
        head_sha: r.headSha,
        status: "in_progress",
        started_at: d.createdAt,
        details_url,
        external_id: id,
        output,
      });
      await this.store.github.putCheckRun({ ...r, checkRunId });
    }
    if (done) {
      await app.updateCheckRun(r.repository, r.installationId, checkRunId, {
        status: "completed",
        conclusion: d.status === "succeeded" ? "success" : "failure",
        completed_at: d.finishedAt ?? nowIso(),
        details_url,
        output,
      });
      await this.store.github.putCheckRun({ ...r, checkRunId, completed: true } satisfies CheckRunRecord);
    } else {
      await app.updateCheckRun(r.repository, r.installationId, checkRunId, { status: "in_progress", output });
    }
  }
}

function ok(status: 200 | 202, body: GithubWebhookReply) {
  return { status, body };
}

/** GitHub's delivery ids are GUIDs; anything else is not trusted into a log line or a key. */
function safeId(v: string | undefined): string | undefined {
  return typeof v === "string" && /^[A-Za-z0-9-]{1,64}$/.test(v) ? v : undefined;
}

function present(c: GithubConnectionRecord): GithubConnection {
  return {
    project: c.project,
    repository: c.repository,
    branch: c.branch,
    ...(c.installationId !== undefined ? { installation_id: c.installationId } : {}),
    clone_url: c.cloneUrl,
    created_at: c.createdAt,
  };
}
