import { randomBytes } from "node:crypto";
import { ServerError, Status } from "nice-grpc";
import type { DoubleDocker } from "../../testing/double-docker.js";
import { NETWORK, STATUS } from "./modal-messages.js";
import type { Msg } from "./modal-wire.js";

/** What the SDK knows a sandbox by, and what the double keeps of it. */
export interface ModalSandbox {
  id: string;
  taskId: string;
  appId: string;
  imageId: string;
  container: string;
  createdAt: number;
  tags: Record<string, string>;
  /** Set once the sandbox ended: its GenericResult. */
  result?: Msg;
  ended: Promise<void>;
  timer: NodeJS.Timeout;
}

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** An id in Modal's shape: `<prefix>-` and 22 base-62 characters (the SDK checks `sb-` ids). */
export function modalId(prefix: string): string {
  return `${prefix}-${Array.from(randomBytes(22), (b) => BASE62[b % 62]).join("")}`;
}

/**
 * Sandboxes of the Modal double: each a container on the engine, started at SandboxCreate (so
 * its task is scheduled at once), on the open network or, with `blockNetwork`, on no network at all
 * (Docker's `none`): a container on an internal network still reaches the host's own addresses,
 * the engine filters only forwarding, as the Prime double found.
 * A sandbox ends when its command exits (success or failure with the exit code), at its
 * `timeoutSecs` (timeout) or at SandboxTerminate (terminated); its container goes then.
 */
export class ModalSandboxes {
  readonly all = new Map<string, ModalSandbox>();
  private readonly failures: unknown[] = [];

  constructor(
    private readonly docker: DoubleDocker,
    private readonly serverId: string,
    private readonly networks: { open: string },
    /** The local image of a Modal image id, or undefined. */
    private readonly imageRef: (imageId: string) => string | undefined,
  ) {}

  /**
   * Starts a sandbox with `env` (the server resolved its secrets); a V2 one (SandboxCreateV2, the
   * SDK's default) gets an id the SDK cannot take for V1's (`sb-` and 22 characters).
   */
  async create(r: Msg, env: Record<string, string>, v2: boolean): Promise<ModalSandbox> {
    const d = r.definition ?? {};
    const image = this.imageRef(d.imageId);
    if (!image) throw new ServerError(Status.NOT_FOUND, `Image ${d.imageId} not found`);
    const access = d.networkAccess?.networkAccessType ?? NETWORK.open;
    if (access === NETWORK.allowlist)
      throw new ServerError(Status.UNIMPLEMENTED, "the Modal double enforces no outbound allowlists");
    const argv = d.entrypointArgs as string[];
    const id = v2 ? modalId("sb2") : modalId("sb");
    const container = await this.docker.docker.containers.create({
      name: `denv-modal-${this.serverId}-${id.slice(-12).toLowerCase()}`,
      Image: image,
      // Without a command a Modal sandbox idles until its timeout.
      Entrypoint: argv.length > 0 ? [argv[0] as string] : ["sleep"],
      Cmd: argv.length > 0 ? argv.slice(1) : ["infinity"],
      Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
      ...(d.workdir ? { WorkingDir: d.workdir } : {}),
      Labels: { ...this.docker.labels, "ai.denv.modal.sandbox": id },
      HostConfig: {
        NetworkMode: access === NETWORK.blocked ? "none" : this.networks.open,
        Init: true,
        // Assumed of Modal, not yet checked against it: root in its (gVisor) sandbox may read another
        // user's /proc/PID/environ, which is how an exec's processes are found to kill them; the
        // engine's default capability set lacks the one that allows it.
        CapAdd: ["SYS_PTRACE"],
        // Modal's hard limits (cpuLimit, memoryLimitMiB), as the engine's caps.
        ...(d.resources?.milliCpuMax ? { NanoCpus: d.resources.milliCpuMax * 1e6 } : {}),
        ...(d.resources?.memoryMbMax ? { Memory: d.resources.memoryMbMax * 2 ** 20 } : {}),
      },
    });
    await this.docker.docker.containers.start(container);
    const sb: ModalSandbox = {
      id,
      taskId: modalId("ta"),
      appId: r.appId,
      imageId: d.imageId,
      container,
      createdAt: Date.now() / 1000,
      tags: Object.fromEntries((r.tags as Msg[]).map((t) => [t.tagName, t.tagValue])),
      ended: Promise.resolve(),
      timer: setTimeout(
        () => void this.finish(sb, { status: STATUS.timeout }),
        (d.timeoutSecs || 300) * 1000,
      ),
    };
    sb.timer.unref();
    // A wait the engine fails (the container removed under it) ends nothing: finish() did already.
    // A failed removal here has no caller to tell: closeAll() reports it.
    sb.ended = this.docker.docker.containers.wait(container).then(
      (code) =>
        this.finish(sb, { status: code === 0 ? STATUS.success : STATUS.failure, exitcode: code }).catch(
          (e: unknown) => void this.failures.push(e),
        ),
      () => undefined,
    );
    this.all.set(id, sb);
    return sb;
  }

  get(sandboxId: string): ModalSandbox {
    const sb = this.all.get(sandboxId);
    if (!sb) throw new ServerError(Status.NOT_FOUND, `Sandbox ${sandboxId} not found`);
    return sb;
  }

  /** The container of a running task, for the command router. */
  containerOf(taskId: string): string {
    const sb = [...this.all.values()].find((s) => s.taskId === taskId);
    if (!sb) throw new ServerError(Status.NOT_FOUND, `task ${taskId} not found`);
    if (sb.result) throw new ServerError(Status.FAILED_PRECONDITION, `Sandbox ${sb.id} has finished`);
    return sb.container;
  }

  getTaskId(r: Msg): Msg {
    const sb = this.get(r.sandboxId);
    return sb.result ? { taskResult: sb.result } : { taskId: sb.taskId };
  }

  /** Long-polls up to `timeout` seconds for the sandbox's end. */
  async wait(r: Msg): Promise<Msg> {
    const sb = this.get(r.sandboxId);
    if (!sb.result && r.timeout > 0)
      await Promise.race([sb.ended, new Promise((res) => setTimeout(res, r.timeout * 1000).unref())]);
    return { result: sb.result, metadata: { appId: sb.appId } };
  }

  async terminate(r: Msg): Promise<Msg> {
    const sb = this.get(r.sandboxId);
    const existing = sb.result;
    await this.finish(sb, { status: STATUS.terminated });
    return existing ? { existingResult: existing } : {};
  }

  /**
   * Newest first, before `beforeTimestamp`; running ones unless `includeFinished`; tags must all
   * match. V1 and V2 sandboxes are listed apart, as Modal lists them (its V2 list is experimental).
   */
  list(r: Msg, v2: boolean): Msg {
    const want = r.tags as Msg[];
    const sandboxes = [...this.all.values()]
      .filter((s) => s.id.startsWith("sb2-") === v2)
      .filter((s) => !r.appId || s.appId === r.appId)
      .filter((s) => r.includeFinished || !s.result)
      .filter((s) => !r.beforeTimestamp || s.createdAt < r.beforeTimestamp)
      .filter((s) => want.every((t) => s.tags[t.tagName] === t.tagValue))
      .sort((a, b) => b.createdAt - a.createdAt)
      .map((s) => ({
        id: s.id,
        createdAt: s.createdAt,
        appId: s.appId,
        imageId: s.imageId,
        tags: Object.entries(s.tags).map(([tagName, tagValue]) => ({ tagName, tagValue })),
        taskInfo: { id: s.taskId, ...(s.result ? { result: s.result } : {}) },
      }));
    return { sandboxes };
  }

  tags(r: Msg): Msg {
    const sb = this.get(r.sandboxId);
    return { tags: Object.entries(sb.tags).map(([tagName, tagValue]) => ({ tagName, tagValue })) };
  }

  setTags(r: Msg): Msg {
    this.get(r.sandboxId).tags = Object.fromEntries((r.tags as Msg[]).map((t) => [t.tagName, t.tagValue]));
    return {};
  }

  /** Terminates every sandbox still running and waits until each one's end is recorded. */
  async closeAll(): Promise<void> {
    const errors = this.failures;
    for (const sb of this.all.values())
      await this.finish(sb, { status: STATUS.terminated }).catch((e: unknown) => void errors.push(e));
    await Promise.all([...this.all.values()].map((sb) => sb.ended));
    if (errors.length > 0) throw new AggregateError(errors, "Modal double: removing sandboxes failed");
  }

  /** Records how the sandbox ended (the first ending wins) and removes its container. */
  private async finish(sb: ModalSandbox, result: Msg): Promise<void> {
    clearTimeout(sb.timer);
    if (sb.result) return;
    sb.result = result;
    await this.docker.removeContainer(sb.container);
  }
}
