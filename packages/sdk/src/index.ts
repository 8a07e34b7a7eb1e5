/**
 * @denv/sdk: a TypeScript client of the denv control plane's REST API, plus the client
 * configuration it shares with the CLI and the Python package, and the tar helpers the files
 * routes take and give.
 */
export {
  type ApiTokenInfo,
  DenvClient,
  type DenvClientOptions,
  type DeploySource,
  type FilesOptions,
  type JoinTokenInfo,
  type RemovedHostInfo,
  type WaitOptions,
} from "./client.js";
export {
  type ClientConfig,
  CONFIG_KEYS,
  type ConfigKey,
  type ConfigSource,
  clientConfigPath,
  type LoadClientConfigOptions,
  type LoadedClientConfig,
  loadClientConfig,
  saveClientConfig,
} from "./config.js";
export type { DeploymentEvent, FollowOptions } from "./deployments.js";
export { DenvApiError, DenvClientError, DenvUnreachableError } from "./errors.js";
export type { ExecStreamOptions } from "./exec-stream.js";
export { parseEventStream, type ServerSentEvent } from "./sse.js";
export { type ExtractOptions, type ExtractResult, extractTar, tarEntries } from "./tar/tar-extract.js";
export type { TarEntry } from "./tar/tar-header.js";
export { type PackOptions, packTar } from "./tar/tar-pack.js";
export type { PortForward, PortForwardOptions } from "./tunnel.js";
