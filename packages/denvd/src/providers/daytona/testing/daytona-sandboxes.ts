import { randomUUID } from "node:crypto";
import { ApiError } from "./daytona-api-error.js";
import { BuildLog, buildImage, plainBase } from "./daytona-build.js";
import type { DaytonaDocker } from "./daytona-docker.js";
import type { ObjectStorage } from "./daytona-object-storage.js";
import type { Snapshots } from "./daytona-snapshots.js";

/** The api-client's SandboxState values this double goes through. */
export type SandboxState =
  | "creating"
  | "pending_build"
  | "building_snapshot"
  | "starting"
  | "started"
  | "stopping"
  | "stopped"
  | "snapshotting"
  | "forking"
  | "error"
  | "build_failed"
  | "destroyed";

export interface Sandbox {
  id: string;
  name: string;
  snapshot?: string;
  /** The local image its container runs. */
  image: string;
  /** The OS user every toolbox call runs as (empty until the image is known). */
  user: string;
  /** Where toolbox calls without a cwd run: the image's WORKDIR, else the user's home. */
  workdir: string;
  env: Record<string, string>;
  labels: Record<string, string>;
  networkBlockAll: boolean;
  /** Outbound CIDRs, comma-separated (recorded, not enforced by the double). */
  networkAllowList?: string;
  cpu: number;
  memory: number;
  disk: number;
  state: SandboxState;
  errorReason?: string;
  autoStopInterval: number;
  autoArchiveInterval: number;
  autoDeleteInterval: number;
  createdAt: Date;
  updatedAt: Date;
  lastActivityAt: Date;
  containerId?: string;
  /** A Docker-capable sandbox: a machine of `Sandboxes.machines`, not a container. */
  machine?: boolean;
  buildInfo?: { dockerfileContent: string; contextHashes: string[] };
  log: BuildLog;
}

/**
 * Docker-capable sandboxes (Daytona's Docker-in-Docker: an image that ships Docker Engine, which
 * Daytona starts in the sandbox), which a container of the local engine cannot be here (no
 * privileged containers): a test gives machines with engines of their own (the e2e's machine.ts),
 * and every sandbox of `snapshot` is one of them. They answer the toolbox's execute only, as root.
 */
export interface DockerMachines {
  snapshot: string;
  boot(sandboxId: string): Promise<void>;
  execute(
    sandboxId: string,
    command: string,
    o: { envs: Record<string, string>; timeoutS: number },
  ): Promise<{ exitCode: number; output: string }>;
  remove(sandboxId: string): Promise<void>;
}

/**
 * Daytona's sandboxes on the local engine: each a container (see DaytonaDocker.createSandbox)
 * made in the background while the SDK polls its state. `networkBlockAll` runs it with no
 * network at all; otherwise it joins the double's bridge network.
 */
export class Sandboxes {
  readonly all = new Map<string, Sandbox>();
  /** Called when a sandbox stops or goes: its toolbox sessions end with its processes. */
  onGone: (id: string) => void = () => undefined;
  /** Where sandboxes of a Docker-capable snapshot run, when a test gives them. */
  machines?: DockerMachines;

  constructor(
    private readonly o: {
      docker: DaytonaDocker;
      storage: ObjectStorage;
      snapshots: Snapshots;
      organizationId: string;
      repo: string;
      network: () => string;
      prefix: string;
    },
  ) {}

  find(idOrName: string): Sandbox {
    const sb = this.all.get(idOrName) ?? [...this.all.values()].find((s) => s.name === idOrName);
    if (!sb) throw new ApiError(404, `Sandbox with ID or name ${idOrName} not found`);
    return sb;
  }

  /** POST /sandbox (CreateSandbox): answers at once; the container comes in the background. */
  create(body: Record<string, unknown>): Sandbox {
    const buildInfo = body.buildInfo as { dockerfileContent?: string; contextHashes?: string[] } | undefined;
    let snapshot: ReturnType<Snapshots["get"]> | undefined;
    const machine = this.machines !== undefined && body.snapshot === this.machines.snapshot;
    if (machine) {
      // A machine: no image of the local engine.
    } else if (typeof body.snapshot === "string" && body.snapshot !== "") {
      snapshot = this.o.snapshots.get(body.snapshot);
      if (snapshot.state !== "active")
        throw new ApiError(400, `Snapshot ${body.snapshot} is ${snapshot.state}, not active`);
    } else if (!buildInfo?.dockerfileContent) throw new ApiError(400, "a snapshot or an image is required");
    const id = randomUUID();
    const name = typeof body.name === "string" && body.name !== "" ? body.name : id;
    if ([...this.all.values()].some((s) => s.name === name))
      throw new ApiError(409, `Sandbox with name ${name} already exists`);
    const sb = this.add({
      id,
      name,
      snapshot: machine ? String(body.snapshot) : snapshot?.name,
      machine,
      image: snapshot?.image ?? "",
      user: machine ? "root" : typeof body.user === "string" ? body.user : (snapshot?.user ?? ""),
      env: (body.env ?? {}) as Record<string, string>,
      labels: (body.labels ?? {}) as Record<string, string>,
      networkBlockAll: body.networkBlockAll === true,
      networkAllowList: typeof body.networkAllowList === "string" ? body.networkAllowList : undefined,
      cpu: Number(body.cpu ?? snapshot?.cpu ?? 1),
      memory: Number(body.memory ?? snapshot?.memory ?? 1),
      disk: Number(body.disk ?? snapshot?.disk ?? 3),
      autoStopInterval: Number(body.autoStopInterval ?? 15),
      autoArchiveInterval: Number(body.autoArchiveInterval ?? 10080),
      autoDeleteInterval: Number(body.autoDeleteInterval ?? -1),
      state: snapshot || machine ? "creating" : "pending_build",
      buildInfo: buildInfo?.dockerfileContent
        ? { dockerfileContent: buildInfo.dockerfileContent, contextHashes: buildInfo.contextHashes ?? [] }
        : undefined,
    });
    this.o.snapshots.background(this.provision(sb));
    return sb;
  }

  /** POST /sandbox/{id}/stop: its processes end; its files stay. */
  stop(sb: Sandbox): void {
    if (sb.state === "stopped") return;
    this.needsContainer(sb);
    this.started(sb);
    this.set(sb, "stopping");
    this.onGone(sb.id);
    this.o.snapshots.background(
      this.o.docker.docker.containers.stop(sb.containerId ?? "", 5).then(
        () => this.set(sb, "stopped"),
        (e: unknown) => this.set(sb, "error", String(e)),
      ),
    );
  }

  /** POST /sandbox/{id}/start. */
  start(sb: Sandbox): void {
    if (sb.state === "started") return;
    if (sb.state !== "stopped")
      throw new ApiError(400, `Sandbox ${sb.id} is ${sb.state}; only a stopped one starts`);
    this.set(sb, "starting");
    this.o.snapshots.background(
      this.o.docker.docker.containers.start(sb.containerId ?? "").then(
        () => this.set(sb, "started"),
        (e: unknown) => this.set(sb, "error", String(e)),
      ),
    );
  }

  /** POST /sandbox/{id}/fork: a new sandbox of a commit of this one's filesystem. */
  fork(src: Sandbox, name: unknown): Sandbox {
    this.needsContainer(src);
    const id = randomUUID();
    const sb = this.add({
      ...src,
      id,
      name: typeof name === "string" && name !== "" ? name : id,
      image: "",
      state: "forking",
      buildInfo: undefined,
    });
    this.o.snapshots.background(
      (async () => {
        try {
          sb.image = await this.commit(src, `fork-${id.slice(0, 8)}`);
          await this.run(sb);
        } catch (e) {
          this.set(sb, "error", String(e instanceof Error ? e.message : e));
        }
      })(),
    );
    return sb;
  }

  /** POST /sandbox/{id}/snapshot: its filesystem as a new active snapshot named `name`. */
  snapshot(sb: Sandbox, name: unknown): void {
    if (typeof name !== "string" || name === "") throw new ApiError(400, "name is required");
    if (this.o.snapshots.find(name)) throw new ApiError(409, `Snapshot with name ${name} already exists`);
    this.needsContainer(sb);
    const before = sb.state;
    this.set(sb, "snapshotting");
    this.o.snapshots.background(
      (async () => {
        try {
          const image = await this.commit(sb, `snapshot-${randomUUID().slice(0, 8)}`);
          const s = this.o.snapshots.fromImage({ name, image, sourceSandboxId: sb.id });
          s.user = sb.user;
          this.set(sb, before);
        } catch (e) {
          this.set(sb, "error", String(e instanceof Error ? e.message : e));
        }
      })(),
    );
  }

  /** DELETE /sandbox/{id}: the container goes at once; the answer says "destroyed". */
  async remove(sb: Sandbox): Promise<void> {
    this.all.delete(sb.id);
    this.onGone(sb.id);
    if (sb.containerId) await this.o.docker.docker.containers.remove(sb.containerId);
    if (sb.machine) await this.machines?.remove(sb.id);
    this.set(sb, "destroyed");
  }

  /** GET /sandbox: ListSandboxesResponse, by labels (a JSON object) and states, cursor paged. */
  list(q: URLSearchParams): { items: Sandbox[]; nextCursor: string | null } {
    const labels = JSON.parse(q.get("labels") ?? "{}") as Record<string, string>;
    const states = q.getAll("states").flatMap((s) => s.split(","));
    const all = [...this.all.values()]
      .filter((sb) => Object.entries(labels).every(([k, v]) => sb.labels[k] === v))
      .filter((sb) => states.length === 0 || states.includes(sb.state))
      .filter((sb) => !q.get("name") || sb.name === q.get("name"))
      .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || a.id.localeCompare(b.id));
    const from = Number(q.get("cursor") ?? 0);
    const limit = Math.max(1, Number(q.get("limit") ?? 100));
    return {
      items: all.slice(from, from + limit),
      nextCursor: from + limit < all.length ? String(from + limit) : null,
    };
  }

  /** The sandbox's container, which a toolbox call needs running. */
  started(sb: Sandbox): string {
    if (sb.state === "started" && sb.machine) return "";
    if (sb.state !== "started" || !sb.containerId)
      throw new ApiError(400, `Sandbox ${sb.id} is not started (state: ${sb.state})`);
    return sb.containerId;
  }

  touch(sb: Sandbox): void {
    sb.lastActivityAt = new Date();
  }

  set(sb: Sandbox, state: SandboxState, errorReason?: string): void {
    sb.state = state;
    sb.errorReason = errorReason;
    sb.updatedAt = new Date();
  }

  private add(
    p: Omit<Sandbox, "createdAt" | "updatedAt" | "lastActivityAt" | "log" | "workdir" | "containerId">,
  ): Sandbox {
    const now = new Date();
    const sb: Sandbox = {
      ...p,
      containerId: undefined,
      workdir: "",
      createdAt: now,
      updatedAt: now,
      lastActivityAt: now,
      log: new BuildLog(),
    };
    this.all.set(sb.id, sb);
    return sb;
  }

  private needsContainer(sb: Sandbox): void {
    if (!sb.containerId || !["started", "stopped"].includes(sb.state))
      throw new ApiError(400, `Sandbox ${sb.id} is ${sb.state}`);
  }

  private async commit(sb: Sandbox, tag: string): Promise<string> {
    const repo = `${this.o.repo}/commit`;
    await this.o.docker.docker.images.commit(sb.containerId ?? "", {
      repo,
      tag,
      labels: { ...this.o.docker.labels, "ai.denv.daytona.source": sb.id },
    });
    return `${repo}:${tag}`;
  }

  /** The image (a build when the SDK sent a Dockerfile), then the container. */
  private async provision(sb: Sandbox): Promise<void> {
    try {
      if (sb.machine) {
        this.set(sb, "starting");
        await this.machines?.boot(sb.id);
        sb.workdir = "/";
        this.set(sb, "started");
        return;
      }
      if (sb.buildInfo) {
        const base =
          sb.buildInfo.contextHashes.length === 0 ? plainBase(sb.buildInfo.dockerfileContent) : undefined;
        if (base) sb.image = base;
        else {
          this.set(sb, "building_snapshot");
          sb.image = `${this.o.repo}/sandbox-${sb.id.slice(0, 8)}:latest`;
          await buildImage({
            docker: this.o.docker,
            storage: this.o.storage,
            organizationId: this.o.organizationId,
            dockerfile: sb.buildInfo.dockerfileContent,
            contextHashes: sb.buildInfo.contextHashes,
            tag: sb.image,
            labels: { ...this.o.docker.labels, "ai.denv.daytona.sandbox": sb.id },
            log: sb.log,
          }).catch((e: unknown) => {
            throw Object.assign(new Error(String(e instanceof Error ? e.message : e)), { build: true });
          });
        }
      }
      await this.run(sb);
    } catch (e) {
      const failed = (e as { build?: boolean }).build === true;
      this.set(sb, failed ? "build_failed" : "error", String(e instanceof Error ? e.message : e));
    } finally {
      sb.log.end();
    }
  }

  /** Creates and starts the container, then settles the user and its working directory. */
  private async run(sb: Sandbox): Promise<void> {
    const info = await this.o.docker.docker.images.info(sb.image);
    if (!info) throw new Error(`image ${sb.image} is not on the local engine (the double never pulls)`);
    this.set(sb, "starting");
    sb.containerId = await this.o.docker.createSandbox({
      name: `${this.o.prefix}-${sb.id}`,
      image: sb.image,
      env: sb.env,
      labels: { "ai.denv.daytona.sandbox": sb.id },
      network: sb.networkBlockAll ? "none" : this.o.network(),
      cpu: sb.cpu,
      memoryGiB: sb.memory,
    });
    await this.o.docker.docker.containers.start(sb.containerId);
    if (!sb.user) sb.user = info.user || "root";
    const home = await this.o.docker.exec(sb.containerId, {
      cmd: ["sh", "-c", 'printf %s "$HOME"'],
      user: sb.user,
    });
    if (home.exitCode !== 0)
      throw new Error(`user ${sb.user} cannot run in ${sb.image}: ${home.output.toString().trim()}`);
    sb.workdir = info.workingDir || home.stdout.toString() || "/";
    this.set(sb, "started");
  }
}
