import { randomBytes } from "node:crypto";
import {
  type CallContext,
  createServer,
  type Server,
  ServerError,
  type ServerMiddleware,
  Status,
} from "nice-grpc";
import { DoubleDocker } from "../../testing/double-docker.js";
import { ModalExecs } from "./modal-exec.js";
import { ModalImages } from "./modal-images.js";
import { MODAL_CLIENT, serviceDefinition, TASK_COMMAND_ROUTER } from "./modal-messages.js";
import { ModalSandboxes, modalId } from "./modal-sandboxes.js";
import type { Msg } from "./modal-wire.js";

/**
 * Modal's API server on 127.0.0.1 for tests, as the official `modal` JS SDK (0.11.1) calls it
 * with `MODAL_SERVER_URL=http://127.0.0.1:<port>` (plaintext HTTP/2; the SDK dials a loopback URL
 * without TLS). One gRPC server holds both services the SDK dials: `modal.client.ModalClient`
 * (token id and secret in `x-modal-token-id`/`x-modal-token-secret`, else UNAUTHENTICATED) and
 * `modal.task_command_router.TaskCommandRouter` (Bearer JWT from TaskGetCommandRouterAccess; its
 * URL must say https, and the SDK then dials it in plaintext because the server URL is loopback).
 *
 * Served: AuthTokenGet, EnvironmentGetOrCreate, AppGetOrCreate, SecretGetOrCreate (env dicts),
 * ImageGetOrCreate and ImageJoinStreaming (registry names mapped to local images, never pulled;
 * Dockerfile commands built on the local engine, see modal-images.ts), ImageFromId, ImageDelete,
 * SandboxCreate/GetTaskId/Wait/Terminate/List/TagsGet/TagsSet (and their V2 twins: V2 is the
 * SDK's default; V1 when MODAL_SANDBOX_V2=false), Task/SandboxGetCommandRouterAccess; on
 * the router TaskExecStart/StdioRead/StdinWrite/StdinWriteStream/StdinStatus/Poll/Wait (the file
 * API's tool played by modal-fs-tools.ts) and TaskSnapshotFilesystem. Anything
 * else is UNIMPLEMENTED (nice-grpc's answer for an unknown method). Everything it makes in
 * Docker carries LABELS plus `ai.denv.modal.server=<id>`; close() removes all of it.
 */
const LABELS = { "ai.denv.managed": "true", "ai.denv.test": "modal-server" } as const;

export interface ModalServerOptions {
  tokenId: string;
  tokenSecret: string;
  /** The registry names images may come from → images already on the local engine. */
  images: Record<string, string>;
  /** The network a build's RUN steps get: "none" (reach nothing, the default) or the engine's. */
  buildNetwork?: "none" | "default";
}

export class ModalServer {
  readonly id = randomBytes(4).toString("hex");
  readonly docker: DoubleDocker;
  readonly sandboxes: ModalSandboxes;
  readonly images: ModalImages;
  readonly execs: ModalExecs;
  /** Every RPC served, as its method name, in order. */
  readonly calls: string[] = [];
  /** The SDK's MODAL_SERVER_URL. */
  url = "";
  private readonly networks = { open: "" };
  private readonly apps = new Map<string, string>();
  private readonly secrets = new Map<string, Record<string, string>>();
  private readonly routerJwt: string;
  private server: Server | undefined;

  constructor(private readonly options: ModalServerOptions) {
    this.docker = new DoubleDocker("Modal", { ...LABELS, "ai.denv.modal.server": this.id });
    this.images = new ModalImages(
      this.docker,
      options.images,
      `denv-modal-${this.id}`,
      options.buildNetwork ?? "none",
    );
    this.sandboxes = new ModalSandboxes(this.docker, this.id, this.networks, (i) => this.images.ref(i));
    this.execs = new ModalExecs(this.docker, (t) => this.sandboxes.containerOf(t));
    this.routerJwt = jwt();
  }

  get labels(): Record<string, string> {
    return this.docker.labels;
  }

  async start(): Promise<this> {
    this.networks.open = await this.docker.createNetwork(`denv-modal-${this.id}-open`, false);
    const server = createServer();
    const { sandboxes: sb, images, execs } = this;
    server
      .with(this.authorize((c) => this.tokenOk(c)))
      .add(serviceDefinition("modal.client.ModalClient", MODAL_CLIENT, { server: ["ImageJoinStreaming"] }), {
        AuthTokenGet: async () => ({ token: jwt() }),
        EnvironmentGetOrCreate: async (r: Msg) => ({
          environmentId: "en-double",
          metadata: { name: r.deploymentName || "main", settings: { imageBuilderVersion: "2025.06" } },
        }),
        AppGetOrCreate: async (r: Msg) => ({ appId: this.app(r) }),
        SecretGetOrCreate: async (r: Msg) => {
          // Only the SDK's env dicts (OBJECT_CREATION_TYPE_EPHEMERAL): the double has no named secrets.
          if (r.objectCreationType !== 5)
            throw new ServerError(Status.NOT_FOUND, `Secret '${r.deploymentName}' not found`);
          const secretId = modalId("st");
          this.secrets.set(secretId, r.envDict);
          return { secretId };
        },
        ImageGetOrCreate: async (r: Msg) => images.getOrCreate(r),
        ImageJoinStreaming: (r: Msg, c: CallContext) => images.join(r, c.signal),
        ImageFromId: async (r: Msg) => ({ imageId: images.get(r.imageId) }),
        ImageDelete: async (r: Msg) => {
          await images.delete(r.imageId);
          return {};
        },
        SandboxCreate: async (r: Msg) => {
          const env = Object.assign(
            {},
            ...(r.definition?.secretIds ?? []).map((id: string) => this.secret(id)),
          );
          return { sandboxId: (await sb.create(r, env, false)).id };
        },
        SandboxCreateV2: async (r: Msg) => {
          const env = Object.assign(
            {},
            ...(r.secretSources as Msg[]).map((s) =>
              s.secretId ? this.secret(s.secretId) : s.env?.contents,
            ),
          );
          const created = await sb.create(r, env, true);
          // The router access comes with the sandbox, as Modal's answer carries it.
          return { sandboxId: created.id, taskId: created.taskId, commandRouterAccess: this.routerAccess() };
        },
        SandboxGetTaskId: async (r: Msg) => sb.getTaskId(r),
        TaskGetCommandRouterAccess: async (r: Msg) => {
          sb.containerOf(r.taskId);
          return this.routerAccess();
        },
        SandboxGetCommandRouterAccess: async (r: Msg) => {
          sb.get(r.sandboxId);
          return this.routerAccess();
        },
        SandboxGetTaskIdV2: async (r: Msg) => sb.getTaskId(r),
        SandboxWait: async (r: Msg) => sb.wait(r),
        SandboxWaitV2: async (r: Msg) => sb.wait(r),
        SandboxTerminate: async (r: Msg) => sb.terminate(r),
        SandboxTerminateV2: async (r: Msg) => sb.terminate(r),
        SandboxList: async (r: Msg) => sb.list(r, false),
        SandboxListV2: async (r: Msg) => sb.list(r, true),
        SandboxTagsGet: async (r: Msg) => sb.tags(r),
        SandboxTagsGetV2: async (r: Msg) => sb.tags(r),
        SandboxTagsSet: async (r: Msg) => sb.setTags(r),
        SandboxTagsSetV2: async (r: Msg) => sb.setTags(r),
      });
    const routerAuth = (c: CallContext) => c.metadata.get("authorization") === `Bearer ${this.routerJwt}`;
    server.with(this.authorize(routerAuth)).add(
      serviceDefinition("modal.task_command_router.TaskCommandRouter", TASK_COMMAND_ROUTER, {
        client: ["TaskExecStdinWriteStream"],
        server: ["TaskExecStdioRead"],
      }),
      {
        TaskExecStart: async (r: Msg) => execs.start(r),
        TaskExecStdioRead: (r: Msg, c: CallContext) => execs.read(r, c.signal),
        TaskExecStdinWrite: async (r: Msg) => execs.stdin(r),
        TaskExecStdinWriteStream: async (r: AsyncIterable<Msg>) => execs.stdinStream(r),
        TaskExecStdinStatus: async (r: Msg) => execs.stdinStatus(r),
        TaskExecPoll: async (r: Msg) => execs.poll(r),
        TaskExecWait: async (r: Msg) => execs.wait(r),
        TaskSnapshotFilesystem: async (r: Msg) => ({
          imageId: await images.snapshot(sb.containerOf(r.taskId), r.snapshotId),
        }),
      },
    );
    this.server = server;
    const port = await server.listen("127.0.0.1:0");
    this.url = `http://127.0.0.1:${port}`;
    return this;
  }

  /** Stops serving (cancelling open streams), ends every sandbox, removes every labelled object. */
  async close(): Promise<void> {
    await this.server?.forceShutdown();
    try {
      await this.images.settle();
      await this.sandboxes.closeAll();
    } finally {
      await this.docker.removeAll();
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** The command router of every sandbox: this server, under an https URL the SDK insists on. */
  private routerAccess(): Msg {
    return { jwt: this.routerJwt, url: this.url.replace(/^http:/, "https:") };
  }

  private secret(secretId: string): Record<string, string> {
    const env = this.secrets.get(secretId);
    if (!env) throw new ServerError(Status.NOT_FOUND, `Secret ${secretId} not found`);
    return env;
  }

  private tokenOk(c: CallContext): boolean {
    return (
      c.metadata.get("x-modal-token-id") === this.options.tokenId &&
      c.metadata.get("x-modal-token-secret") === this.options.tokenSecret
    );
  }

  /** Refuses a call whose credentials `ok` rejects, as Modal does (UNAUTHENTICATED); logs the rest. */
  private authorize(ok: (c: CallContext) => boolean): ServerMiddleware {
    const calls = this.calls;
    return async function* authorize(call, context) {
      calls.push(call.method.path.split("/").pop() ?? "");
      if (!ok(context)) throw new ServerError(Status.UNAUTHENTICATED, "Invalid token id or secret");
      return yield* call.next(call.request, context);
    };
  }

  /** An app by name in an environment, created when asked (createIfMissing) and missing. */
  private app(r: Msg): string {
    const key = `${r.environmentName}/${r.appName}`;
    const existing = this.apps.get(key);
    if (existing) return existing;
    // OBJECT_CREATION_TYPE_CREATE_IF_MISSING
    if (r.objectCreationType !== 1) throw new ServerError(Status.NOT_FOUND, `App '${r.appName}' not found`);
    const appId = modalId("ap");
    this.apps.set(key, appId);
    return appId;
  }
}

/** A token in JWT form with an hour to live: the SDK reads only its `exp` (it cannot check a signature). */
function jwt(): string {
  const part = (o: object) => Buffer.from(JSON.stringify(o)).toString("base64url");
  return `${part({ alg: "none", typ: "JWT" })}.${part({ exp: Math.floor(Date.now() / 1000) + 3600 })}.${randomBytes(16).toString("base64url")}`;
}
