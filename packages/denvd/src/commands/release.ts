import { DenvdMessages, ExitCodes } from "@denv/spec/messages";
import { readHostFile } from "../agent/host-file.js";
import type { Log } from "../agent/log.js";
import { type DenvdConfig, providerKeyRefusal } from "../config.js";
import type { Output } from "./output.js";
import { openProvider } from "./run.js";

/**
 * `denvd release --provider e2b|daytona|prime|modal`: a bridge whose target is removed gives back
 * everything it holds at its provider (every sandbox, snapshot and template it made, found through
 * its own records and the provider's metadata), so that nothing is left running or stored in the
 * user's account.
 * Run by the control plane after it stopped the bridge, on the bridge's state; the records go
 * with what they name.
 */
export async function release(config: DenvdConfig, out: Output, log: Log): Promise<number> {
  if (config.provider === undefined) return out.fail(DenvdMessages.releaseNeedsProvider(), ExitCodes.usage);
  const keyRefusal = providerKeyRefusal(config);
  if (keyRefusal) return out.fail(keyRefusal, ExitCodes.usage);
  const host = await readHostFile(config.stateDir).catch((err: Error) => err);
  if (host instanceof Error) return out.fail(host.message);
  const runtime = await openProvider(config, host.host_id, (line) => log("runtime", { line }));
  try {
    const { removed } = await runtime.release();
    out.result({ host_id: host.host_id, removed }, [`released ${removed.length}`, ...removed].join("\n"));
    return ExitCodes.ok;
  } finally {
    await runtime.close();
  }
}
