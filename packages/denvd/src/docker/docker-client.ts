import { PassThrough, type Readable } from "node:stream";
import { DenvError } from "@denv/spec";
import Docker from "dockerode";

/**
 * The one place denvd talks to the Docker Engine. Docker's PascalCase inspect JSON is mapped
 * into denv's own small types here and nowhere else.
 */

export interface ContainerState {
  id: string;
  name: string;
  running: boolean;
  paused: boolean;
  pid: number;
  exitCode: number;
  health: "none" | "starting" | "healthy" | "unhealthy";
  image: string;
  labels: Record<string, string>;
  networks: Record<string, { ip: string; gateway: string }>;
  hostConfig: {
    memory: number;
    nanoCpus: number;
    pidsLimit: number;
    capDrop: string[];
    capAdd: string[];
    securityOpt: string[];
    networkMode: string;
  };
  user: string;
}

export interface ImageInfo {
  id: string;
  repoDigests: string[];
  layers: number;
  size: number;
  user: string;
  workingDir: string;
  env: string[];
  cmd: string[] | null;
  entrypoint: string[] | null;
}

export interface NetworkInfo {
  id: string;
  name: string;
  internal: boolean;
  subnet: string;
  gateway: string;
  labels: Record<string, string>;
  containers: string[];
}

export interface ManagedObject {
  id: string;
  name: string;
  labels: Record<string, string>;
}

export interface ExecHandle {
  /** Host pid of the exec's first process (0 until it started). */
  pid(): Promise<number>;
  stream: NodeJS.ReadWriteStream;
  stdout: Readable;
  stderr: Readable;
  exitCode(): Promise<number | null>;
}

export interface ExecSpec {
  cmd: string[];
  user?: string;
  cwd?: string;
  env?: string[];
  tty?: boolean;
  stdin: boolean;
}

function wrap(err: unknown, what: string): DenvError {
  const e = err as { statusCode?: number; json?: { message?: string }; message?: string };
  const msg = e.json?.message ?? e.message ?? String(err);
  if (e.statusCode === 404) return new DenvError("not_found", `${what}: ${msg}`);
  if (e.statusCode === 409) return new DenvError("conflict", `${what}: ${msg}`);
  return new DenvError("docker", `${what}: ${msg}`);
}

export class DockerClient {
  readonly api: Docker;

  constructor(socketPath = "/var/run/docker.sock") {
    this.api = new Docker({ socketPath });
  }

  async ping(): Promise<void> {
    try {
      await this.api.ping();
    } catch (err) {
      throw wrap(err, "the Docker engine does not answer (is dockerd running?)");
    }
  }

  // ---- images ----

  async imageInfo(ref: string): Promise<ImageInfo | undefined> {
    try {
      const i = await this.api.getImage(ref).inspect();
      return {
        id: i.Id,
        repoDigests: i.RepoDigests ?? [],
        layers: i.RootFS?.Layers?.length ?? 0,
        size: i.Size,
        user: i.Config?.User ?? "",
        workingDir: i.Config?.WorkingDir ?? "",
        env: i.Config?.Env ?? [],
        cmd: (i.Config?.Cmd as string[] | null) ?? null,
        entrypoint: (i.Config?.Entrypoint as string[] | null) ?? null,
      };
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return undefined;
      throw wrap(err, `inspect image ${ref}`);
    }
  }

  /** Builds from a tar of the context; resolves with the image id, rejects with the build log's error. */
  async build(
    context: Readable,
    opts: {
      tag: string;
      dockerfile: string;
      args: Record<string, string>;
      target?: string;
      labels: Record<string, string>;
    },
    onLog?: (line: string) => void,
  ): Promise<string> {
    let stream: NodeJS.ReadableStream;
    try {
      stream = await this.api.buildImage(context, {
        t: opts.tag,
        dockerfile: opts.dockerfile,
        buildargs: opts.args,
        ...(opts.target ? { target: opts.target } : {}),
        labels: opts.labels,
        rm: true,
        forcerm: true,
      });
    } catch (err) {
      throw wrap(err, `build ${opts.tag}`);
    }
    const tail: string[] = [];
    await new Promise<void>((resolve, reject) => {
      this.api.modem.followProgress(
        stream,
        (err: Error | null, output: Array<{ error?: string }>) => {
          const failed = err ?? output.find((o) => o.error);
          if (failed) {
            const msg = failed instanceof Error ? failed.message : (failed.error ?? "build failed");
            reject(new DenvError("docker", `build ${opts.tag} failed: ${msg.trim()}\n${tail.join("")}`));
          } else resolve();
        },
        (ev: { stream?: string }) => {
          if (ev.stream) {
            tail.push(ev.stream);
            if (tail.length > 20) tail.shift();
            onLog?.(ev.stream);
          }
        },
      );
    });
    const info = await this.imageInfo(opts.tag);
    if (!info) throw new DenvError("docker", `build ${opts.tag} finished but the image is missing`);
    return info.id;
  }

  async tagImage(id: string, repo: string, tag: string): Promise<void> {
    try {
      await this.api.getImage(id).tag({ repo, tag });
    } catch (err) {
      throw wrap(err, `tag ${id}`);
    }
  }

  async removeImage(ref: string): Promise<void> {
    try {
      await this.api.getImage(ref).remove({ force: true });
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return;
      // An image still used by another version's container is kept; gc retries later.
      if ((err as { statusCode?: number }).statusCode === 409) return;
      throw wrap(err, `remove image ${ref}`);
    }
  }

  async listImages(labels: Record<string, string>): Promise<ManagedObject[]> {
    const list = await this.api.listImages({ filters: { label: labelFilter(labels) } });
    return list.map((i) => ({ id: i.Id, name: i.RepoTags?.[0] ?? i.Id, labels: i.Labels ?? {} }));
  }

  /** Commits a container's writable layer. `pause: false` because the caller froze it already. */
  async commit(
    containerId: string,
    opts: { repo: string; tag: string; labels: Record<string, string> },
  ): Promise<string> {
    try {
      const res = (await this.api.getContainer(containerId).commit({
        repo: opts.repo,
        tag: opts.tag,
        pause: false,
        changes: Object.entries(opts.labels).map(([k, v]) => `LABEL ${k}=${JSON.stringify(v)}`),
      })) as { Id: string };
      return res.Id;
    } catch (err) {
      throw wrap(err, `commit ${containerId}`);
    }
  }

  /** Flattens an image into one layer (export of a created container + import), keeping its config. */
  async squash(image: string, target: { repo: string; tag: string }, info: ImageInfo): Promise<string> {
    const tmp = await this.api.createContainer({
      Image: image,
      Cmd: ["true"],
      Labels: { "ai.denv.managed": "true" },
    });
    try {
      const exported = await tmp.export();
      const changes: string[] = [];
      for (const e of info.env) changes.push(`ENV ${e.replace("=", " ")}`);
      if (info.user) changes.push(`USER ${info.user}`);
      if (info.workingDir) changes.push(`WORKDIR ${info.workingDir}`);
      if (info.entrypoint) changes.push(`ENTRYPOINT ${JSON.stringify(info.entrypoint)}`);
      if (info.cmd) changes.push(`CMD ${JSON.stringify(info.cmd)}`);
      const stream = await this.api.importImage(
        exported as unknown as string,
        {
          repo: target.repo,
          tag: target.tag,
          changes,
        } as unknown as Record<string, unknown>,
      );
      await new Promise<void>((resolve, reject) =>
        this.api.modem.followProgress(stream, (err: Error | null) => (err ? reject(err) : resolve())),
      );
    } catch (err) {
      throw wrap(err, `squash ${image}`);
    } finally {
      await tmp.remove({ force: true }).catch(() => undefined);
    }
    const squashed = await this.imageInfo(`${target.repo}:${target.tag}`);
    if (!squashed) throw new DenvError("docker", `squash of ${image} produced no image`);
    return squashed.id;
  }

  // ---- networks ----

  async createNetwork(opts: {
    name: string;
    internal: boolean;
    subnet: string;
    gateway: string;
    labels: Record<string, string>;
  }): Promise<NetworkInfo> {
    try {
      const net = await this.api.createNetwork({
        Name: opts.name,
        Driver: "bridge",
        Internal: opts.internal,
        CheckDuplicate: true,
        Labels: opts.labels,
        IPAM: { Driver: "default", Config: [{ Subnet: opts.subnet, Gateway: opts.gateway }] },
      });
      const info = await this.networkInfo(net.id);
      if (!info) throw new DenvError("docker", `network ${opts.name} vanished after create`);
      return info;
    } catch (err) {
      throw err instanceof DenvError ? err : wrap(err, `create network ${opts.name}`);
    }
  }

  async networkInfo(idOrName: string): Promise<NetworkInfo | undefined> {
    try {
      const n = await this.api.getNetwork(idOrName).inspect();
      const cfg = n.IPAM?.Config?.[0] ?? {};
      return {
        id: n.Id,
        name: n.Name,
        internal: Boolean(n.Internal),
        subnet: cfg.Subnet ?? "",
        gateway: cfg.Gateway ?? "",
        labels: n.Labels ?? {},
        containers: Object.keys(n.Containers ?? {}),
      };
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return undefined;
      throw wrap(err, `inspect network ${idOrName}`);
    }
  }

  async listNetworks(labels: Record<string, string>): Promise<ManagedObject[]> {
    const list = await this.api.listNetworks({ filters: { label: labelFilter(labels) } });
    return list.map((n) => ({ id: n.Id, name: n.Name, labels: n.Labels ?? {} }));
  }

  /** Subnets of every network on the engine (to allocate non-overlapping ones). */
  async usedSubnets(): Promise<string[]> {
    const list = await this.api.listNetworks();
    return list.flatMap((n) => (n.IPAM?.Config ?? []).map((c) => c.Subnet ?? "")).filter(Boolean);
  }

  async removeNetwork(id: string): Promise<void> {
    try {
      await this.api.getNetwork(id).remove();
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return;
      throw wrap(err, `remove network ${id}`);
    }
  }

  async connectNetwork(network: string, container: string): Promise<void> {
    try {
      await this.api.getNetwork(network).connect({ Container: container });
    } catch (err) {
      throw wrap(err, `connect ${container} to ${network}`);
    }
  }

  // ---- volumes ----

  /** A named volume whose data lives at `device` on the host (a subvolume of denvd's store). */
  async createBoundVolume(name: string, device: string, labels: Record<string, string>): Promise<void> {
    try {
      await this.api.createVolume({
        Name: name,
        Driver: "local",
        DriverOpts: { type: "none", o: "bind", device },
        Labels: labels,
      });
    } catch (err) {
      throw wrap(err, `create volume ${name}`);
    }
  }

  async listVolumes(labels: Record<string, string>): Promise<ManagedObject[]> {
    const res = await this.api.listVolumes({ filters: { label: labelFilter(labels) } });
    return (res.Volumes ?? []).map((v) => ({ id: v.Name, name: v.Name, labels: v.Labels ?? {} }));
  }

  async removeVolume(name: string): Promise<void> {
    try {
      await this.api.getVolume(name).remove({ force: true });
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return;
      throw wrap(err, `remove volume ${name}`);
    }
  }

  // ---- containers ----

  async createContainer(spec: Docker.ContainerCreateOptions): Promise<string> {
    try {
      const c = await this.api.createContainer(spec);
      return c.id;
    } catch (err) {
      throw wrap(err, `create container ${spec.name ?? ""}`);
    }
  }

  async start(id: string): Promise<void> {
    try {
      await this.api.getContainer(id).start();
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 304) return;
      throw wrap(err, `start ${id}`);
    }
  }

  async stop(id: string, graceSec: number): Promise<void> {
    try {
      await this.api.getContainer(id).stop({ t: graceSec });
    } catch (err) {
      const code = (err as { statusCode?: number }).statusCode;
      if (code === 304 || code === 404) return;
      throw wrap(err, `stop ${id}`);
    }
  }

  async pause(id: string): Promise<void> {
    try {
      await this.api.getContainer(id).pause();
    } catch (err) {
      throw wrap(err, `pause ${id}`);
    }
  }

  async unpause(id: string): Promise<void> {
    try {
      await this.api.getContainer(id).unpause();
    } catch (err) {
      throw wrap(err, `unpause ${id}`);
    }
  }

  async wait(id: string): Promise<number> {
    try {
      const res = (await this.api.getContainer(id).wait()) as { StatusCode: number };
      return res.StatusCode;
    } catch (err) {
      throw wrap(err, `wait ${id}`);
    }
  }

  async kill(id: string): Promise<void> {
    try {
      await this.api.getContainer(id).kill();
    } catch (err) {
      const code = (err as { statusCode?: number }).statusCode;
      if (code === 404 || code === 409) return;
      throw wrap(err, `kill ${id}`);
    }
  }

  async removeContainer(id: string): Promise<void> {
    try {
      await this.api.getContainer(id).remove({ force: true, v: false });
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return;
      throw wrap(err, `remove container ${id}`);
    }
  }

  async inspect(id: string): Promise<ContainerState | undefined> {
    let c: Docker.ContainerInspectInfo;
    try {
      c = await this.api.getContainer(id).inspect();
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return undefined;
      throw wrap(err, `inspect ${id}`);
    }
    const nets: ContainerState["networks"] = {};
    for (const [name, n] of Object.entries(c.NetworkSettings?.Networks ?? {})) {
      nets[name] = { ip: n.IPAddress, gateway: n.Gateway };
    }
    const hc = c.HostConfig ?? {};
    return {
      id: c.Id,
      name: c.Name.replace(/^\//, ""),
      running: c.State.Running,
      paused: c.State.Paused,
      pid: c.State.Pid,
      exitCode: c.State.ExitCode,
      health: (c.State.Health?.Status as ContainerState["health"] | undefined) ?? "none",
      image: c.Image,
      labels: c.Config.Labels ?? {},
      networks: nets,
      hostConfig: {
        memory: hc.Memory ?? 0,
        nanoCpus: hc.NanoCpus ?? 0,
        pidsLimit: hc.PidsLimit ?? 0,
        capDrop: hc.CapDrop ?? [],
        capAdd: hc.CapAdd ?? [],
        securityOpt: hc.SecurityOpt ?? [],
        networkMode: hc.NetworkMode ?? "",
      },
      user: c.Config.User ?? "",
    };
  }

  async listContainers(labels: Record<string, string>): Promise<ManagedObject[]> {
    const list = await this.api.listContainers({ all: true, filters: { label: labelFilter(labels) } });
    return list.map((c) => ({
      id: c.Id,
      name: (c.Names[0] ?? c.Id).replace(/^\//, ""),
      labels: c.Labels ?? {},
    }));
  }

  /** Host pids of every process in the container. */
  async processes(id: string): Promise<number[]> {
    try {
      const top = (await this.api.getContainer(id).top({ ps_args: "-o pid" })) as {
        Titles: string[];
        Processes: string[][] | null;
      };
      const col = top.Titles.indexOf("PID");
      return (top.Processes ?? []).map((p) => Number(p[Math.max(col, 0)])).filter((n) => n > 0);
    } catch (err) {
      const code = (err as { statusCode?: number }).statusCode;
      if (code === 409 || code === 404) return [];
      throw wrap(err, `list processes of ${id}`);
    }
  }

  async logs(id: string, tail: number): Promise<{ stdout: Buffer; stderr: Buffer }> {
    try {
      const raw = (await this.api
        .getContainer(id)
        .logs({ stdout: true, stderr: true, tail, follow: false })) as unknown as Buffer;
      return demuxBuffer(raw);
    } catch (err) {
      throw wrap(err, `logs of ${id}`);
    }
  }

  async getArchive(id: string, path: string): Promise<Readable> {
    try {
      return (await this.api.getContainer(id).getArchive({ path })) as unknown as Readable;
    } catch (err) {
      throw wrap(err, `read ${path}`);
    }
  }

  async putArchive(id: string, path: string, tar: Readable | Buffer): Promise<void> {
    try {
      await this.api.getContainer(id).putArchive(tar as unknown as string, { path });
    } catch (err) {
      throw wrap(err, `write ${path}`);
    }
  }

  // ---- exec ----

  async exec(containerId: string, spec: ExecSpec): Promise<ExecHandle> {
    let exec: Docker.Exec;
    try {
      exec = await this.api.getContainer(containerId).exec({
        Cmd: spec.cmd,
        AttachStdin: spec.stdin,
        AttachStdout: true,
        AttachStderr: true,
        Tty: spec.tty ?? false,
        ...(spec.user !== undefined ? { User: spec.user } : {}),
        ...(spec.cwd !== undefined ? { WorkingDir: spec.cwd } : {}),
        ...(spec.env !== undefined ? { Env: spec.env } : {}),
      });
    } catch (err) {
      throw wrap(err, `exec in ${containerId}`);
    }
    const stream = (await exec.start({
      hijack: true,
      stdin: spec.stdin,
      Tty: spec.tty ?? false,
    })) as unknown as NodeJS.ReadWriteStream;
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    if (spec.tty) {
      stream.pipe(stdout);
      stream.on("end", () => stderr.end());
    } else {
      this.api.modem.demuxStream(stream, stdout, stderr);
      stream.on("end", () => {
        stdout.end();
        stderr.end();
      });
    }
    return {
      stream,
      stdout,
      stderr,
      pid: async () => (await exec.inspect()).Pid ?? 0,
      exitCode: async () => (await exec.inspect()).ExitCode ?? null,
    };
  }
}

function labelFilter(labels: Record<string, string>): string[] {
  return Object.entries(labels).map(([k, v]) => `${k}=${v}`);
}

/** Splits Docker's multiplexed stream format (8-byte headers) held whole in a buffer. */
export function demuxBuffer(raw: Buffer): { stdout: Buffer; stderr: Buffer } {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let i = 0;
  while (i + 8 <= raw.length) {
    const kind = raw[i];
    const len = raw.readUInt32BE(i + 4);
    const chunk = raw.subarray(i + 8, i + 8 + len);
    (kind === 2 ? err : out).push(chunk);
    i += 8 + len;
  }
  return { stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
}
