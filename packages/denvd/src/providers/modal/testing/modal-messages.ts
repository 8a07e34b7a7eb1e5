import type { MethodDefinition } from "nice-grpc";
import { decode, encode, type Msg, type Schema } from "./modal-wire.js";

/** The parts of Modal's messages the double reads or answers (field numbers from its protos). */
const GenericResult: Schema = { status: [1, "int32"], exception: [2, "string"], exitcode: [3, "int32"] };
const SandboxTag: Schema = { tagName: [1, "string"], tagValue: [2, "string"] };
const StringMap: Schema = { contents: [1, "map"] };
const Empty: Schema = {};
const SecretSource: Schema = { secretId: [1, "string"], env: [2, StringMap] };
const RouterAccess: Schema = { jwt: [1, "string"], url: [2, "string"] };
/** The Sandbox message: the definition SandboxCreate and SandboxCreateV2 carry. */
const SandboxDefinition: Schema = {
  entrypointArgs: [1, "string", "repeated"],
  imageId: [3, "string"],
  secretIds: [4, "string", "repeated"],
  resources: [
    5,
    {
      memoryMb: [2, "uint32"],
      milliCpu: [3, "uint32"],
      memoryMbMax: [5, "uint32"],
      milliCpuMax: [7, "uint32"],
    },
  ],
  timeoutSecs: [7, "uint32"],
  workdir: [8, "string"],
  networkAccess: [22, { networkAccessType: [1, "int32"] }],
};

/** GenericResult's statuses the SDK tells apart. */
export const STATUS = { success: 1, failure: 2, terminated: 3, timeout: 4 } as const;
/** NetworkAccess.networkAccessType. */
export const NETWORK = { open: 1, blocked: 2, allowlist: 3 } as const;

type Method = [request: Schema, response: Schema];
/** Keeps a method table's names in its type (a `Record<string, Method>` annotation would lose them). */
const methods = <K extends string>(m: Record<K, Method>) => m;

/** modal.client.ModalClient: the control plane's RPCs that the sandbox flow calls. */
const CONTROL = methods({
  AuthTokenGet: [Empty, { token: [1, "string"] }],
  EnvironmentGetOrCreate: [
    { deploymentName: [1, "string"] },
    {
      environmentId: [1, "string"],
      metadata: [2, { name: [1, "string"], settings: [2, { imageBuilderVersion: [1, "string"] }] }],
    },
  ],
  AppGetOrCreate: [
    { appName: [1, "string"], environmentName: [2, "string"], objectCreationType: [3, "int32"] },
    { appId: [1, "string"] },
  ],
  SecretGetOrCreate: [
    { deploymentName: [1, "string"], objectCreationType: [4, "int32"], envDict: [5, "map"] },
    { secretId: [1, "string"] },
  ],
  ImageGetOrCreate: [
    {
      image: [
        2,
        {
          baseImages: [5, { imageId: [1, "string"], dockerTag: [2, "string"] }, "repeated"],
          dockerfileCommands: [6, "string", "repeated"],
        },
      ],
      appId: [4, "string"],
      forceBuild: [7, "bool"],
    },
    { imageId: [1, "string"], result: [2, GenericResult] },
  ],
  ImageJoinStreaming: [
    { imageId: [1, "string"], timeout: [2, "float"], lastEntryId: [3, "string"] },
    { result: [1, GenericResult], entryId: [3, "string"], eof: [4, "bool"] },
  ],
  ImageDelete: [{ imageId: [1, "string"] }, Empty],
  ImageFromId: [{ imageId: [1, "string"] }, { imageId: [1, "string"] }],
  SandboxCreate: [
    { appId: [1, "string"], definition: [2, SandboxDefinition], tags: [4, SandboxTag, "repeated"] },
    { sandboxId: [1, "string"] },
  ],
  SandboxCreateV2: [
    {
      appId: [1, "string"],
      definition: [2, SandboxDefinition],
      tags: [4, SandboxTag, "repeated"],
      secretSources: [6, SecretSource, "repeated"],
    },
    { sandboxId: [1, "string"], taskId: [3, "string"], commandRouterAccess: [5, RouterAccess] },
  ],
  SandboxGetTaskId: [{ sandboxId: [1, "string"] }, { taskId: [1, "string"], taskResult: [2, GenericResult] }],
  TaskGetCommandRouterAccess: [{ taskId: [1, "string"] }, RouterAccess],
  SandboxGetCommandRouterAccess: [{ sandboxId: [1, "string"] }, RouterAccess],
  SandboxWait: [
    { sandboxId: [1, "string"], timeout: [2, "float"] },
    { result: [1, GenericResult], metadata: [2, { appId: [2, "string"] }] },
  ],
  SandboxTerminate: [{ sandboxId: [1, "string"] }, { existingResult: [1, GenericResult] }],
  SandboxList: [
    {
      appId: [1, "string"],
      beforeTimestamp: [2, "double"],
      includeFinished: [4, "bool"],
      tags: [5, SandboxTag, "repeated"],
    },
    {
      sandboxes: [
        1,
        {
          id: [1, "string"],
          createdAt: [3, "double"],
          taskInfo: [4, { id: [1, "string"], result: [4, GenericResult] }],
          appId: [5, "string"],
          tags: [6, SandboxTag, "repeated"],
          imageId: [8, "string"],
        },
        "repeated",
      ],
    },
  ],
  SandboxTagsGet: [{ sandboxId: [1, "string"] }, { tags: [1, SandboxTag, "repeated"] }],
  SandboxTagsSet: [{ sandboxId: [2, "string"], tags: [3, SandboxTag, "repeated"] }, Empty],
});

/** The control plane with the V2 backend's names (the SDK's default), which carry V1's messages. */
export const MODAL_CLIENT = methods({
  ...CONTROL,
  SandboxGetTaskIdV2: CONTROL.SandboxGetTaskId,
  SandboxWaitV2: CONTROL.SandboxWait,
  SandboxTerminateV2: CONTROL.SandboxTerminate,
  SandboxListV2: CONTROL.SandboxList,
  SandboxTagsGetV2: CONTROL.SandboxTagsGet,
  SandboxTagsSetV2: CONTROL.SandboxTagsSet,
});

/** modal.task_command_router.TaskCommandRouter: the per-sandbox exec service. */
export const TASK_COMMAND_ROUTER = methods({
  TaskExecStart: [
    {
      taskId: [1, "string"],
      execId: [2, "string"],
      commandArgs: [3, "string", "repeated"],
      stdoutConfig: [4, "int32"],
      stderrConfig: [5, "int32"],
      timeoutSecs: [6, "uint32"],
      workdir: [7, "string"],
      env: [12, "map"],
      secretSources: [13, SecretSource, "repeated"],
    },
    Empty,
  ],
  TaskExecStdioRead: [
    { taskId: [1, "string"], execId: [2, "string"], offset: [3, "uint64"], fileDescriptor: [4, "int32"] },
    { data: [1, "bytes"] },
  ],
  TaskExecStdinWrite: [
    {
      taskId: [1, "string"],
      execId: [2, "string"],
      offset: [3, "uint64"],
      data: [4, "bytes"],
      eof: [5, "bool"],
    },
    Empty,
  ],
  TaskExecStdinWriteStream: [
    {
      start: [1, { taskId: [1, "string"], execId: [2, "string"], offset: [3, "uint64"] }],
      data: [2, "bytes"],
      end: [3, Empty],
    },
    Empty,
  ],
  TaskExecStdinStatus: [
    { taskId: [1, "string"], execId: [2, "string"] },
    { numBytesWritten: [1, "uint64"], closed: [2, "bool"] },
  ],
  TaskExecPoll: [
    { taskId: [1, "string"], execId: [2, "string"] },
    { code: [1, "int32"], signal: [2, "int32"] },
  ],
  TaskExecWait: [
    { taskId: [1, "string"], execId: [2, "string"] },
    { code: [1, "int32"], signal: [2, "int32"] },
  ],
  TaskSnapshotFilesystem: [{ taskId: [1, "string"], snapshotId: [2, "string"] }, { imageId: [1, "string"] }],
});

/** A service's methods for nice-grpc: unary but for those named to stream requests or answers. */
export type Definition<K extends string, C extends K, S extends K> = {
  [P in K]: MethodDefinition<Msg, Msg, Msg, Msg, P extends C ? true : false, P extends S ? true : false>;
};

/** A nice-grpc service definition for `service` with these methods, coded by the schemas above. */
export function serviceDefinition<K extends string, C extends K = never, S extends K = never>(
  service: string,
  methods: Record<K, Method>,
  streams: { client?: readonly C[]; server?: readonly S[] } = {},
): Definition<K, C, S> {
  const entries = (Object.entries(methods) as [K, Method][]).map(([name, [req, res]]) => [
    name,
    {
      path: `/${service}/${name}`,
      requestStream: ((streams.client ?? []) as readonly K[]).includes(name),
      responseStream: ((streams.server ?? []) as readonly K[]).includes(name),
      requestSerialize: (v: Msg) => encode(req, v),
      requestDeserialize: (b: Uint8Array) => decode(req, b),
      // Answers leave unset fields out, so a oneof (TaskExecWaitResponse's code or signal) stays unset.
      responseSerialize: (v: Msg) => encode(res, v),
      responseDeserialize: (b: Uint8Array) => decode(res, b),
      options: {},
    },
  ]);
  return Object.fromEntries(entries) as Definition<K, C, S>;
}
