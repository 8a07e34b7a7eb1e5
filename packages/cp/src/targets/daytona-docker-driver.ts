import { TargetMessages } from "@denv/spec";
import { nowIso } from "../ids.js";
import { errorMessage } from "../log.js";
import type { TargetRecord } from "../store/records.js";
import { DaytonaApi, type DaytonaSandbox } from "./daytona-api.js";
import { installCommand, joinEnv } from "./install-assets.js";
import {
  credential,
  type MachineProvider,
  type ProviderMachine,
  type ProvisionDeps,
  ProvisionedDriver,
} from "./provisioned-driver.js";

interface DaytonaDockerSettings {
  snapshot: string;
  cpu: number;
  memory: number;
  disk: number;
  allow_list: string[];
  base_url: string;
  labels: Record<string, string>;
}

/** How long a new sandbox may take to start, and the install in it to finish. */
const START_TIMEOUT_MS = 10 * 60_000;
const INSTALL_TIMEOUT_S = 15 * 60;

/**
 * Daytona's Docker-in-Docker: machines that are Daytona sandboxes of a Docker-capable snapshot
 * (its image ships Docker Engine, which Daytona starts in the sandbox; the sandbox's disk backs
 * /var/lib/docker). Daytona has no user data, so once a sandbox is started the driver runs the
 * control plane's install script in it through the toolbox's execute, with the machine's
 * single-use join token in the command's environment; denvd there dials the control plane
 * (the sandbox's allow_list must let it) and is a host like any other: whole compose files on
 * the sandbox's own engine, every protection denvd's. A machine's id is its sandbox's name and
 * its `ai.denv.machine` label.
 */
export class DaytonaDockerDriver extends ProvisionedDriver {
  constructor(deps: ProvisionDeps) {
    super("daytona-docker", deps);
  }

  protected provider(target: TargetRecord, credentials: Record<string, string>): MachineProvider {
    const s = settingsOf(target);
    const api = new DaytonaApi(s.base_url, credential(target, credentials, "api_key"));
    const machine = (sb: DaytonaSandbox): ProviderMachine => ({
      providerId: sb.id,
      machine: sb.labels["ai.denv.machine"] ?? sb.name ?? sb.id,
      costClass: this.costClass(target),
    });
    return {
      list: async (labels) => (await api.listSandboxes(labels)).map(machine),
      create: async (req) => {
        const sb = await api.createSandbox({
          name: req.machine,
          snapshot: s.snapshot,
          labels: req.labels,
          cpu: s.cpu,
          memory: s.memory,
          disk: s.disk,
          networkAllowList: s.allow_list.join(","),
        });
        // What Daytona answers is checked against what was asked: a sandbox of this machine.
        if (sb.labels["ai.denv.machine"] !== req.machine) {
          await api.deleteSandbox(sb.id).catch(() => undefined);
          throw new Error(
            `Daytona answered the create of machine ${req.machine} with sandbox ${sb.id}, labelled for ${sb.labels["ai.denv.machine"] ?? "no machine"}`,
          );
        }
        const env = joinEnv({ joinToken: req.joinToken, machine: req.machine, labels: s.labels });
        // In the background: the machine is recorded `running` meanwhile, as a booting server is.
        void this.install(target, api, sb.id, req.machine, req.cpUrl, { ...env }).catch((err: unknown) =>
          this.deps.log.warn("machine install not settled", {
            target: target.name,
            machine: req.machine,
            error: errorMessage(err),
          }),
        );
        return machine(sb);
      },
      delete: (providerId) => api.deleteSandbox(providerId),
    };
  }

  protected costClass(target: TargetRecord): string {
    const s = settingsOf(target);
    return `daytona-docker/${s.cpu}cpu-${s.memory}GiB-${s.disk}GiB (billed by Daytona)`;
  }

  /**
   * Waits for the sandbox to start, then runs the install in it. A sandbox that never starts or
   * whose install fails is deleted at once and its machine recorded failed with the reason (the
   * install's last lines), rather than left to cost money until the join timeout.
   */
  private async install(
    target: TargetRecord,
    api: DaytonaApi,
    sandboxId: string,
    machine: string,
    cpUrl: string,
    envs: Record<string, string>,
  ): Promise<void> {
    try {
      const sb = await api.waitStarted(sandboxId, START_TIMEOUT_MS);
      const r = await api.execute(sb, installCommand(cpUrl), { envs, timeoutS: INSTALL_TIMEOUT_S });
      if (r.exitCode !== 0) {
        const tail = r.result.trim().split("\n").slice(-3).join(" | ");
        throw new Error(`the install exited with ${r.exitCode}: ${tail}`);
      }
      this.deps.log.info("machine installed", { target: target.name, machine });
    } catch (err) {
      const why = TargetMessages.installFailed(sandboxId, errorMessage(err));
      this.deps.log.warn("machine not installed", { target: target.name, machine, error: why });
      await this.exclusive(target.name, async () => {
        await api.deleteSandbox(sandboxId).catch(() => undefined);
        const m = (await this.deps.store.listMachines(target.name)).find((x) => x.id === machine);
        if (!m || (m.status !== "creating" && m.status !== "running")) return;
        if (m.joinTokenId) await this.deps.revokeJoinToken(target.name, m.joinTokenId);
        await this.deps.store.putMachine({ ...m, status: "failed", error: why, updatedAt: nowIso() });
      });
    }
  }
}

function settingsOf(t: TargetRecord): DaytonaDockerSettings {
  return t.settings as unknown as DaytonaDockerSettings;
}
