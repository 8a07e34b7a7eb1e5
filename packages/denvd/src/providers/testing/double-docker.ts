import { randomInt } from "node:crypto";
import { DockerClient } from "../../docker/docker-client.js";
import { onFreeSubnet } from "../../runtime/subnets.js";

/** A process started in a sandbox's container: its input, and its exit code once it ended. */
export interface Spawned {
  write(data: Buffer): void;
  /** Closes its stdin. */
  end(): void;
  /** Resolves with the exit code (-1 when the engine never recorded one). */
  exited: Promise<number>;
}

export interface SpawnOptions {
  cmd: string[];
  user: string;
  cwd?: string;
  env?: Record<string, string>;
  /** Keep stdin open for write(); otherwise the process reads end-of-file. */
  stdin: boolean;
  onStdout(chunk: Buffer): void;
  onStderr(chunk: Buffer): void;
}

/**
 * The Docker side of a hosted provider's double (Prime's, Modal's), on denvd's own engine
 * clients (src/docker): networks, sandbox containers, processes in them (the double plays their
 * sandbox agent) and snapshot commits. Everything it makes carries `labels`; removeAll() removes
 * by them. `name` says whose double it is in its errors.
 */
export class DoubleDocker {
  readonly docker: DockerClient;

  constructor(
    readonly name: string,
    readonly labels: Record<string, string>,
    socketPath?: string,
  ) {
    this.docker = new DockerClient(socketPath);
  }

  /**
   * A bridge network on a free /24 of 10.200-249.x; `internal` ones have no route out. `options`
   * are the bridge driver's (`com.docker.network.bridge.*`).
   */
  async createNetwork(name: string, internal: boolean, options?: Record<string, string>): Promise<string> {
    const pool = `10.${200 + randomInt(50)}.0.0/16`;
    return onFreeSubnet(this.docker.networks, pool, async ({ subnet, gateway }) => {
      const labels = this.labels;
      return (await this.docker.networks.create({ name, internal, subnet, gateway, labels, options })).id;
    });
  }

  async removeNetwork(id: string): Promise<void> {
    await this.docker.networks.remove(id);
  }

  /**
   * A sandbox's container, started: its start command (or `tail -f /dev/null`) under tini, as
   * root, as the providers' sandboxes run theirs.
   */
  async runSandbox(o: {
    name: string;
    image: string;
    start?: { executable: string; args: string[] };
    env: Record<string, string>;
    labels: Record<string, string>;
    network: string;
    cpu: number;
    memoryGiB: number;
  }): Promise<string> {
    const id = await this.docker.containers.create({
      name: o.name,
      Image: o.image,
      Entrypoint: [o.start?.executable ?? "tail"],
      Cmd: o.start ? o.start.args : ["-f", "/dev/null"],
      User: "root",
      Env: Object.entries(o.env).map(([k, v]) => `${k}=${v}`),
      Labels: { ...this.labels, ...o.labels },
      HostConfig: {
        NetworkMode: o.network,
        Init: true,
        // Root in a hosted sandbox (a microVM) has every capability; the engine's default set lacks
        // the one that reads another user's /proc/PID/environ.
        CapAdd: ["SYS_PTRACE"],
        NanoCpus: Math.round(o.cpu * 1e9),
        Memory: Math.round(o.memoryGiB * 1024 ** 3),
      },
    });
    await this.docker.containers.start(id);
    return id;
  }

  /** Connects a container to a network, where the network's DNS resolves `aliases` to it. */
  async joinNetwork(container: string, network: string, aliases?: string[]): Promise<void> {
    await this.docker.networks.connect(network, container, aliases);
  }

  async leaveNetwork(container: string, network: string): Promise<void> {
    await this.docker.networks.disconnect(network, container);
  }

  /** Starts a process as `docker exec` does; output reaches the callbacks as the engine frames it. */
  async spawn(container: string, o: SpawnOptions): Promise<Spawned> {
    const h = await this.docker.containers.exec(container, {
      cmd: o.cmd,
      user: o.user,
      ...(o.cwd ? { cwd: o.cwd } : {}),
      env: Object.entries(o.env ?? {}).map(([k, v]) => `${k}=${v}`),
      stdin: o.stdin,
    });
    // The engine's frames (1 byte stream, 3 zero, 4 bytes length), read here rather than from
    // the handle's two demuxed streams, whose events lose the order between stdout and stderr.
    let pending = Buffer.alloc(0);
    h.stream.on("data", (c: Buffer) => {
      pending = Buffer.concat([pending, c]);
      while (pending.length >= 8) {
        const size = pending.readUInt32BE(4);
        if (pending.length < 8 + size) break;
        const frame = Buffer.from(pending.subarray(8, 8 + size));
        if (pending[0] === 2) o.onStderr(frame);
        else o.onStdout(frame);
        pending = pending.subarray(8 + size);
      }
    });
    h.stdout.resume();
    h.stderr.resume();
    const ended = new Promise<void>((resolve, reject) => {
      h.stream.once("end", () => resolve());
      h.stream.once("close", () => resolve());
      h.stream.once("error", reject);
    });
    const exited = ended.then(async () => {
      // The engine records the exit code a moment after the output ends.
      for (let i = 0; i < 50; i++) {
        const code = await h.exitCode();
        if (code !== null) return code;
        await new Promise((r) => setTimeout(r, 20));
      }
      return -1;
    });
    return { write: (data) => void h.stream.write(data), end: () => void h.stream.end(), exited };
  }

  /** Runs a process to its end and returns its exit code and output. */
  async run(
    container: string,
    cmd: string[],
    o: { user?: string; stdin?: Buffer } = {},
  ): Promise<{ exitCode: number; stdout: Buffer; stderr: Buffer }> {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const p = await this.spawn(container, {
      cmd,
      user: o.user ?? "root",
      stdin: o.stdin !== undefined,
      onStdout: (c) => out.push(c),
      onStderr: (c) => err.push(c),
    });
    if (o.stdin !== undefined) {
      p.write(o.stdin);
      p.end();
    }
    return { exitCode: await p.exited, stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
  }

  /** A checkpoint: the container's filesystem committed to an image, with the container frozen. */
  async commit(
    container: string,
    repo: string,
    tag: string,
    labels: Record<string, string>,
  ): Promise<string> {
    await this.docker.containers.pause(container);
    try {
      return await this.docker.images.commit(container, { repo, tag, labels: { ...this.labels, ...labels } });
    } finally {
      await this.docker.containers.unpause(container);
    }
  }

  /** Whether an image exists on the engine (never pulled: there is no registry here). */
  async hasImage(ref: string): Promise<boolean> {
    return (await this.docker.images.info(ref)) !== undefined;
  }

  async removeContainer(id: string): Promise<void> {
    await this.docker.containers.remove(id);
  }

  async removeImage(ref: string): Promise<void> {
    await this.docker.images.remove(ref);
  }

  /** Removes every container, image and network with this double's labels; all errors joined. */
  async removeAll(): Promise<void> {
    const errors: unknown[] = [];
    const attempt = (p: Promise<unknown>) => p.catch((e: unknown) => void errors.push(e));
    for (const c of await this.docker.containers.list(this.labels))
      await attempt(this.docker.containers.remove(c.id));
    for (let pass = 0; pass < 5; pass++) {
      const images = await this.docker.images.list(this.labels);
      if (images.length === 0) break;
      for (const i of images) await attempt(this.docker.images.remove(i.id));
    }
    for (const n of await this.docker.networks.list(this.labels))
      await attempt(this.docker.networks.remove(n.id));
    if (errors.length > 0) throw new AggregateError(errors, `${this.name} double: cleanup failed`);
  }
}
