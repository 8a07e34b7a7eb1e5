import { randomBytes } from "node:crypto";
import type { DoubleDocker } from "../../testing/double-docker.js";
import { ApiError } from "./prime-api-error.js";

export type SandboxStatus = "PENDING" | "RUNNING" | "ERROR" | "TERMINATED";

/** The egress policy: no list lets everything out, an empty allowlist nothing. */
export interface EgressPolicy {
  allowlist: string[] | null;
  denylist: string[] | null;
}

export interface Sandbox {
  id: string;
  name: string;
  dockerImage: string;
  /** The local image its container runs (a checkpoint's image for a restored sandbox). */
  image: string;
  startCommand: { executable: string; args: string[] } | null;
  cpuCores: number;
  memoryGB: number;
  diskSizeGB: number;
  timeoutMinutes: number;
  environmentVars: Record<string, string> | null;
  secrets: Record<string, string> | null;
  labels: string[];
  teamId: string | null;
  status: SandboxStatus;
  errorType: string | null;
  errorMessage: string | null;
  createdAt: string;
  updatedAt: string;
  startedAt: string | null;
  terminatedAt: string | null;
  egress: EgressPolicy;
  egressGeneration: number;
  container?: string;
  /** The newest checkpoint of its chain (the one it was restored from until it makes its own). */
  tip: string | null;
}

/** What sandboxes run on: the engine, and the networks a sandbox with and without egress joins. */
export interface SandboxEnv {
  docker: DoubleDocker;
  serverId: string;
  networks: { open: string; internal: string };
  /** The local image a `docker_image` stands for (configured, or built by the image API). */
  localImage(dockerImage: string): string | undefined;
  /** A checkpoint's image and source image, when it is durable. */
  restorable(checkpointId: string): { image: string; dockerImage: string } | undefined;
  /** Whether the sandbox is a member of a private network (prime-networks.ts). */
  onPrivateNetwork(sandboxId: string): boolean;
}

/** Only an allowlist with no entry shuts a sandbox off: the double has no per-host filter. */
function shut(p: EgressPolicy): boolean {
  return p.allowlist !== null && p.allowlist.length === 0;
}

function now(): string {
  return new Date().toISOString();
}

function stringMap(v: unknown, field: string): Record<string, string> | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== "object" || Object.values(v).some((x) => typeof x !== "string"))
    throw new ApiError(422, `${field} must map names to strings`);
  return v as Record<string, string>;
}

function stringList(v: unknown, field: string): string[] | null {
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v) || v.some((x) => typeof x !== "string"))
    throw new ApiError(422, `${field} must be a list of strings`);
  return v as string[];
}

/**
 * The double's sandboxes: POST /sandbox answers at once with a PENDING sandbox whose container
 * starts in the background, then RUNNING (or ERROR); DELETE removes the container and leaves a
 * TERMINATED record, as Prime keeps the history of deleted sandboxes.
 */
export class Sandboxes {
  readonly all = new Map<string, Sandbox>();
  private readonly byIdempotencyKey = new Map<string, string>();
  private readonly starting = new Set<Promise<void>>();

  constructor(private readonly env: SandboxEnv) {}

  get(id: string): Sandbox {
    const sb = this.all.get(id);
    if (!sb) throw new ApiError(404, `Sandbox ${id} not found`);
    return sb;
  }

  create(body: Record<string, unknown>): Sandbox {
    const key = typeof body.idempotency_key === "string" ? body.idempotency_key : undefined;
    const earlier = key ? this.byIdempotencyKey.get(key) : undefined;
    if (earlier) return this.get(earlier);
    if (typeof body.name !== "string" || body.name === "") throw new ApiError(422, "name is required");
    const checkpointId = typeof body.checkpoint_id === "string" ? body.checkpoint_id : undefined;
    let image: string;
    let dockerImage: string;
    if (checkpointId) {
      if (body.docker_image !== undefined)
        throw new ApiError(422, "omit docker_image when restoring a checkpoint");
      const from = this.env.restorable(checkpointId);
      if (!from) throw new ApiError(409, `Checkpoint ${checkpointId} is not durable or does not exist`);
      ({ image, dockerImage } = from);
    } else {
      if (typeof body.docker_image !== "string") throw new ApiError(422, "docker_image is required");
      dockerImage = body.docker_image;
      const local = this.env.localImage(dockerImage);
      if (!local) throw new ApiError(400, `Image ${dockerImage} is not available`);
      image = local;
    }
    const allowlist = stringList(body.network_allowlist, "network_allowlist");
    const denylist = stringList(body.network_denylist, "network_denylist");
    if (allowlist && denylist)
      throw new ApiError(422, "network_allowlist and network_denylist are exclusive");
    const start = body.start_command as { executable?: unknown; args?: unknown } | undefined;
    if (start !== undefined && typeof start.executable !== "string")
      throw new ApiError(422, "start_command.executable is required");
    const t = now();
    const sb: Sandbox = {
      id: randomBytes(12).toString("hex"),
      name: body.name,
      dockerImage,
      image,
      startCommand: start
        ? { executable: start.executable as string, args: stringList(start.args, "start_command.args") ?? [] }
        : null,
      cpuCores: Number(body.cpu_cores ?? 1),
      memoryGB: Number(body.memory_gb ?? 1),
      diskSizeGB: Number(body.disk_size_gb ?? 5),
      timeoutMinutes: Number(body.timeout_minutes ?? 60),
      environmentVars: stringMap(body.environment_vars, "environment_vars"),
      secrets: stringMap(body.secrets, "secrets"),
      labels: stringList(body.labels, "labels") ?? [],
      teamId: typeof body.team_id === "string" ? body.team_id : null,
      status: "PENDING",
      errorType: null,
      errorMessage: null,
      createdAt: t,
      updatedAt: t,
      startedAt: null,
      terminatedAt: null,
      egress: { allowlist, denylist },
      egressGeneration: 1,
      tip: checkpointId ?? null,
    };
    this.all.set(sb.id, sb);
    if (key) this.byIdempotencyKey.set(key, sb.id);
    const starting = this.start(sb).finally(() => this.starting.delete(starting));
    this.starting.add(starting);
    return sb;
  }

  private async start(sb: Sandbox): Promise<void> {
    try {
      sb.container = await this.env.docker.runSandbox({
        name: `denv-prime-${this.env.serverId}-${sb.id}`,
        image: sb.image,
        ...(sb.startCommand ? { start: sb.startCommand } : {}),
        env: { ...sb.environmentVars, ...sb.secrets },
        labels: { "ai.denv.prime.sandbox": sb.id },
        network: this.networkOf(sb.egress),
        cpu: sb.cpuCores,
        memoryGiB: sb.memoryGB,
      });
      if (sb.status !== "PENDING") {
        // Deleted while it was starting.
        await this.env.docker.removeContainer(sb.container);
        return;
      }
      sb.status = "RUNNING";
      sb.startedAt = now();
    } catch (e) {
      if (sb.status !== "PENDING") return;
      sb.status = "ERROR";
      sb.errorType = "START_FAILED";
      sb.errorMessage = String(e);
    }
    sb.updatedAt = now();
  }

  /** GET /sandbox: newest first, filtered by status, activity and labels (a sandbox has them all). */
  list(q: URLSearchParams): object {
    const page = Math.max(1, Number(q.get("page") ?? 1));
    const perPage = Math.max(1, Number(q.get("per_page") ?? 50));
    const labels = q.getAll("labels");
    const status = q.get("status");
    const active = q.get("is_active");
    const matching = [...this.all.values()]
      .filter((sb) => labels.every((l) => sb.labels.includes(l)))
      .filter((sb) => !status || sb.status === status)
      .filter((sb) => active !== "true" || (sb.status !== "TERMINATED" && sb.status !== "ERROR"))
      .reverse();
    const sandboxes = matching.slice((page - 1) * perPage, page * perPage).map((sb) => this.json(sb));
    return { sandboxes, total: matching.length, page, perPage, hasNext: page * perPage < matching.length };
  }

  async delete(id: string): Promise<object> {
    const sb = this.get(id);
    if (sb.status === "TERMINATED") throw new ApiError(404, `Sandbox ${id} not found`);
    sb.status = "TERMINATED";
    sb.terminatedAt = now();
    sb.updatedAt = sb.terminatedAt;
    if (sb.container) await this.env.docker.removeContainer(sb.container);
    return { success: true, message: `Sandbox ${id} deleted` };
  }

  /** POST /sandbox/status:batchGet. */
  statuses(ids: unknown): object {
    if (!Array.isArray(ids)) throw new ApiError(422, "sandbox_ids must be a list");
    const statuses: object[] = [];
    const errors: object[] = [];
    for (const id of ids as string[]) {
      const sb = this.all.get(id);
      if (!sb) errors.push({ sandbox_id: id, code: "NOT_FOUND", message: `Sandbox ${id} not found` });
      else
        statuses.push({
          sandbox_id: id,
          status: sb.status,
          error_type: sb.errorType,
          error_message: sb.errorMessage,
        });
    }
    return { statuses, errors };
  }

  errorContext(id: string): object {
    const sb = this.get(id);
    return { status: sb.status, errorType: sb.errorType, errorMessage: sb.errorMessage };
  }

  egress(id: string): object {
    const sb = this.get(id);
    return {
      policy: sb.egress,
      generation: sb.egressGeneration,
      applied_generation: sb.egressGeneration,
      applied: true,
    };
  }

  /** PUT /sandbox/{id}/egress-policy: a whole new policy, applied by moving networks. */
  async setEgress(id: string, body: Record<string, unknown>): Promise<object> {
    const sb = this.get(id);
    if (sb.status !== "RUNNING" || !sb.container) throw new ApiError(409, `Sandbox ${id} is not running`);
    const policy = {
      allowlist: stringList(body.allowlist, "allowlist"),
      denylist: stringList(body.denylist, "denylist"),
    };
    if ((policy.allowlist === null) === (policy.denylist === null))
      throw new ApiError(422, "exactly one of allowlist or denylist must be set");
    if (shut(policy) !== shut(sb.egress)) await this.moveEgress(sb, sb.container, policy);
    sb.egress = policy;
    sb.egressGeneration += 1;
    sb.updatedAt = now();
    return this.egress(id);
  }

  /** The network a policy puts a sandbox on: the open one, or the internal one (`none`) if shut. */
  networkOf(p: EgressPolicy): string {
    return shut(p) ? this.env.networks.internal : this.env.networks.open;
  }

  /**
   * Moves the container from the network of one policy to that of the other. Docker's `none`
   * stands beside no other network, so a member of a private network is kept off it (those
   * networks reach nothing outside either).
   */
  private async moveEgress(sb: Sandbox, container: string, to: EgressPolicy): Promise<void> {
    const moves = (network: string) => network !== "none" || !this.env.onPrivateNetwork(sb.id);
    const [left, joined] = [this.networkOf(sb.egress), this.networkOf(to)];
    if (moves(left)) await this.env.docker.leaveNetwork(container, left);
    if (moves(joined)) await this.env.docker.joinNetwork(container, joined);
  }

  /** The running sandbox's container, or the gateway's answer for one that is not. */
  container(id: string): string {
    const sb = this.all.get(id);
    if (!sb) throw new ApiError(502, `sandbox ${id} not found`, "sandbox_not_found");
    if (sb.status === "TERMINATED")
      throw new ApiError(410, `sandbox ${id} was terminated`, "sandbox_terminated");
    if (sb.status !== "RUNNING" || !sb.container)
      throw new ApiError(409, `sandbox ${id} is not running`, "sandbox_not_running");
    return sb.container;
  }

  /** Waits for sandboxes still starting (their containers would escape close()'s sweep). */
  async settle(): Promise<void> {
    await Promise.allSettled([...this.starting]);
  }

  json(sb: Sandbox): object {
    return {
      id: sb.id,
      name: sb.name,
      dockerImage: sb.dockerImage,
      startCommand: sb.startCommand,
      cpuCores: sb.cpuCores,
      memoryGB: sb.memoryGB,
      diskSizeGB: sb.diskSizeGB,
      diskMountPath: "/",
      gpuCount: 0,
      gpuType: null,
      vm: true,
      networkAllowlist: sb.egress.allowlist,
      networkDenylist: sb.egress.denylist,
      status: sb.status,
      timeoutMinutes: sb.timeoutMinutes,
      idleTimeoutMinutes: null,
      terminationReason: sb.status === "TERMINATED" ? "USER_DELETED" : null,
      environmentVars: sb.environmentVars,
      // The double does not echo secret values, only their names.
      secrets: sb.secrets ? Object.fromEntries(Object.keys(sb.secrets).map((k) => [k, "***"])) : null,
      advancedConfigs: null,
      labels: sb.labels,
      createdAt: sb.createdAt,
      updatedAt: sb.updatedAt,
      startedAt: sb.startedAt,
      terminatedAt: sb.terminatedAt,
      exitCode: null,
      errorType: sb.errorType,
      errorMessage: sb.errorMessage,
      userId: null,
      teamId: sb.teamId,
      region: "local",
      pendingImageBuildId: null,
    };
  }
}
