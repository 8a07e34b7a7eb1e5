import { ExitCodes } from "@denv/spec/messages";
import { startDaemon } from "../agent/daemon.js";
import { readHostFile } from "../agent/host-file.js";
import type { Log } from "../agent/log.js";
import { type DenvdConfig, insecureUrlRefusal, parseListen, redact } from "../config.js";
import { DockerHostRuntime } from "../runtime/docker-host-runtime.js";
import { Runtime } from "../runtime/runtime.js";
import type { Output } from "./output.js";

/**
 * `denvd run`: the sidecar. Opens the runtime (which collects what this host no longer owns),
 * reconciles the journal, dials the control plane and serves commands until SIGTERM/SIGINT.
 */
export async function run(config: DenvdConfig, out: Output, log: Log): Promise<number> {
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
  const runtime = await Runtime.open({
    hostId: host.host_id,
    stateDir: config.stateDir,
    dockerSocket: config.dockerSocket,
    storeMethod: config.store,
    log: (line) => log("runtime", { line }),
  });
  log("runtime open", { store: runtime.host.store.method });
  const daemon = await startDaemon({
    runtime: new DockerHostRuntime(runtime),
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
