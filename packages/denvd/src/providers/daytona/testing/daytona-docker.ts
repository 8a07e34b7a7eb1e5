import { randomInt } from "node:crypto";
import { DockerClient } from "../../../docker/docker-client.js";
import type { ExecHandle } from "../../../docker/engine-types.js";
import { onFreeSubnet } from "../../../runtime/subnets.js";

/** What one exec gave back: its exit code, its output per stream, and both interleaved. */
export interface ExecResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
  output: Buffer;
}

export interface ExecOptions {
  cmd: string[];
  user: string;
  cwd?: string;
  env?: Record<string, string>;
  /** Written to the process's stdin, which is then closed. */
  stdin?: Buffer;
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
}

/**
 * The Docker side of the Daytona double, on denvd's own engine clients (src/docker): sandbox
 * containers, execs in them (the double is their toolbox daemon), commits, builds and the
 * bridge network. Every object it makes carries `labels`, which close() removes by.
 */
export class DaytonaDocker {
  readonly docker: DockerClient;

  constructor(
    readonly labels: Record<string, string>,
    socketPath?: string,
  ) {
    this.docker = new DockerClient(socketPath);
  }

  /**
   * A bridge network for sandboxes that may reach out, with a free /24 of 10.200-249.x. The
   * host holds its gateway address, where a test's listener stands for "the outside".
   */
  async createNetwork(name: string): Promise<{ id: string; gateway: string }> {
    const pool = `10.${200 + randomInt(50)}.0.0/16`;
    return onFreeSubnet(this.docker.networks, pool, async ({ subnet, gateway }) => {
      const n = await this.docker.networks.create({
        name,
        internal: false,
        subnet,
        gateway,
        labels: this.labels,
      });
      return { id: n.id, gateway: n.gateway };
    });
  }

  /**
   * A sandbox's container: the image with its entrypoint replaced by `sleep infinity` under
   * tini, as root (the toolbox's execs pick the sandbox user), on `network` or none at all.
   */
  async createSandbox(o: {
    name: string;
    image: string;
    env: Record<string, string>;
    labels: Record<string, string>;
    network: string;
    cpu?: number;
    memoryGiB?: number;
  }): Promise<string> {
    return this.docker.containers.create({
      name: o.name,
      Image: o.image,
      Entrypoint: [],
      Cmd: ["sleep", "infinity"],
      User: "root",
      Env: Object.entries(o.env).map(([k, v]) => `${k}=${v}`),
      Labels: { ...this.labels, ...o.labels },
      HostConfig: {
        NetworkMode: o.network,
        Init: true,
        ...(o.cpu ? { NanoCpus: Math.round(o.cpu * 1e9) } : {}),
        ...(o.memoryGiB ? { Memory: Math.round(o.memoryGiB * 1024 ** 3) } : {}),
      },
    });
  }

  /** Runs a process in a container as `docker exec` does and resolves when it exits. */
  async exec(container: string, o: ExecOptions): Promise<ExecResult> {
    const h: ExecHandle = await this.docker.containers.exec(container, {
      cmd: o.cmd,
      user: o.user,
      ...(o.cwd ? { cwd: o.cwd } : {}),
      env: Object.entries(o.env ?? {}).map(([k, v]) => `${k}=${v}`),
      stdin: o.stdin !== undefined,
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const all: Buffer[] = [];
    // The engine's frames (1 byte stream, 3 zero, 4 bytes length), read here rather than from
    // the handle's two demuxed streams, whose events lose the order between stdout and stderr.
    let pending = Buffer.alloc(0);
    h.stream.on("data", (c: Buffer) => {
      pending = Buffer.concat([pending, c]);
      while (pending.length >= 8) {
        const size = pending.readUInt32BE(4);
        if (pending.length < 8 + size) break;
        const frame = Buffer.from(pending.subarray(8, 8 + size));
        all.push(frame);
        if (pending[0] === 2) {
          err.push(frame);
          o.onStderr?.(frame);
        } else {
          out.push(frame);
          o.onStdout?.(frame);
        }
        pending = pending.subarray(8 + size);
      }
    });
    h.stdout.resume();
    h.stderr.resume();
    const done = new Promise<void>((resolve, reject) => {
      h.stream.once("end", () => resolve());
      h.stream.once("close", () => resolve());
      h.stream.once("error", reject);
    });
    if (o.stdin !== undefined) {
      h.stream.write(o.stdin);
      h.stream.end();
    }
    await done;
    // The engine records the exit code a moment after the output ends.
    let exitCode: number | null = null;
    for (let i = 0; i < 50 && exitCode === null; i++) {
      exitCode = await h.exitCode();
      if (exitCode === null) await new Promise((r) => setTimeout(r, 20));
    }
    return {
      exitCode: exitCode ?? -1,
      stdout: Buffer.concat(out),
      stderr: Buffer.concat(err),
      output: Buffer.concat(all),
    };
  }

  /** Removes every container, image and network with this double's labels; all errors joined. */
  async removeAll(): Promise<void> {
    const errors: unknown[] = [];
    const attempt = (p: Promise<unknown>) => p.catch((e: unknown) => void errors.push(e));
    for (const c of await this.docker.containers.list(this.labels))
      await attempt(this.docker.containers.remove(c.id));
    // A removed image may take its untagged parents along; go round until none is left.
    for (let pass = 0; pass < 5; pass++) {
      const images = await this.docker.images.list(this.labels);
      if (images.length === 0) break;
      for (const i of images) await attempt(this.docker.images.remove(i.id));
    }
    for (const n of await this.docker.networks.list(this.labels))
      await attempt(this.docker.networks.remove(n.id));
    if (errors.length > 0) throw new AggregateError(errors, "Daytona double: cleanup failed");
  }
}
