import { DenvError } from "@denv/spec/errors";
import { DenvdMessages, ExitCodes } from "@denv/spec/messages";
import { startDaemon } from "../agent/daemon.js";
import { readHostFile } from "../agent/host-file.js";
import type { Log } from "../agent/log.js";
import {
  type DenvdConfig,
  insecureUrlRefusal,
  modalToken,
  parseListen,
  providerKeyRefusal,
  redact,
} from "../config.js";
import { DockerHostRuntime } from "../runtime/docker-host-runtime.js";
import type { HostRuntime } from "../runtime/host-runtime.js";
import { Runtime } from "../runtime/runtime.js";
import type { Output } from "./output.js";

/**
 * `denvd run`: the sidecar. Opens the runtime (which collects what this host no longer owns),
 * reconciles the journal, dials the control plane and serves commands until SIGTERM/SIGINT.
 */
export async function run(config: DenvdConfig, out: Output, log: Log): Promise<number> {
  const keyRefusal = providerKeyRefusal(config);
  if (keyRefusal) return out.fail(keyRefusal, ExitCodes.usage);
  const host = await readHostFile(config.stateDir).catch((err: Error) => err);
  if (host instanceof Error) return out.fail(host.message);
  const url = config.url ?? host.url;
  // Checked before anything starts: the credential is sent with the first dial.
  const refusal = insecureUrlRefusal(url, config.insecure);
  if (refusal) return out.fail(refusal, ExitCodes.usage);
  // Installed first: a signal during start-up stops denvd once it is up, cleanly.
  const stopping = new Promise<NodeJS.Signals>((resolve) => {
    process.once("SIGTERM", () => resolve("SIGTERM"));
    process.once("SIGINT", () => resolve("SIGINT"));
  });
  log("starting", { host: host.host_id, target: host.target, config: redact(config) });
  const runtime = await openRuntime(config, host.host_id, log);
  const daemon = await startDaemon({
    runtime,
    host: { url, credential: host.credential },
    labels: config.labels,
    capacityMemory: config.capacityMemory,
    transferListen: config.transferListen ? parseListen(config.transferListen) : undefined,
    log,
  });
  const signal = await stopping;
  log("stopping", { signal });
  await daemon.stop();
  await runtime.close();
  log("stopped");
  return ExitCodes.ok;
}

/**
 * The runtime behind the agent, chosen once: a bridge to the configured provider (its SDK loaded
 * only then), or denv's own runtime on this machine's Docker engine.
 */
async function openRuntime(config: DenvdConfig, hostId: string, log: Log): Promise<HostRuntime> {
  const runtimeLog = (line: string) => log("runtime", { line });
  if (config.provider !== undefined) {
    const runtime = await openProvider(config, hostId, runtimeLog);
    log("runtime open", { provider: config.provider });
    return runtime;
  }
  const engine = await Runtime.open({
    hostId,
    stateDir: config.stateDir,
    dockerSocket: config.dockerSocket,
    storeMethod: config.store,
    log: runtimeLog,
  });
  log("runtime open", { store: engine.host.store.method });
  return new DockerHostRuntime(engine);
}

/** The bridge's runtime at its provider, on this host's state (the provider's SDK loaded only now). */
export async function openProvider(
  config: DenvdConfig,
  hostId: string,
  log: (line: string) => void,
): Promise<HostRuntime & { release(): Promise<{ removed: string[] }> }> {
  const egressCanaries = config.providerCanaries.flatMap((c) => parseListen(c) ?? []);
  if (config.provider === "modal") {
    const token = modalToken(config.providerApiKey as string);
    if (!token) throw new DenvError("invalid_request", DenvdMessages.modalKeyMalformed());
    const { ModalRuntime } = await import("../providers/modal/modal-runtime.js");
    return ModalRuntime.open({
      hostId,
      stateDir: config.stateDir,
      // The provider's API URL is Modal's server, as its SDK's MODAL_SERVER_URL.
      connection: { ...token, ...(config.providerApiUrl ? { serverUrl: config.providerApiUrl } : {}) },
      egressCanaries,
      log,
    });
  }
  if (config.provider === "prime") {
    const { PrimeRuntime } = await import("../providers/prime/prime-runtime.js");
    return PrimeRuntime.open({
      hostId,
      stateDir: config.stateDir,
      connection: {
        apiKey: config.providerApiKey as string,
        // The provider's API URL is Prime's base, as its SDK's PRIME_API_BASE_URL; the API is under /api/v1.
        ...(config.providerApiUrl ? { baseUrl: `${config.providerApiUrl.replace(/\/+$/, "")}/api/v1` } : {}),
      },
      egressCanaries,
      log,
    });
  }
  if (config.provider === "daytona") {
    const { DaytonaRuntime } = await import("../providers/daytona/daytona-runtime.js");
    return DaytonaRuntime.open({
      hostId,
      stateDir: config.stateDir,
      connection: { apiKey: config.providerApiKey as string, apiUrl: config.providerApiUrl },
      egressCanaries,
      log,
    });
  }
  const { E2bRuntime } = await import("../providers/e2b/e2b-runtime.js");
  return E2bRuntime.open({
    hostId,
    stateDir: config.stateDir,
    connection: {
      apiKey: config.providerApiKey as string,
      apiUrl: config.providerApiUrl,
      sandboxUrl: config.providerSandboxUrl,
    },
    egressCanaries,
    log,
  });
}
