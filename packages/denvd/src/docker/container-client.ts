import { PassThrough, type Readable } from "node:stream";
import type Docker from "dockerode";
import { demuxBuffer, engineError, labelFilter, statusOf } from "./engine-error.js";
import type { EngineHttp, LazyDocker } from "./engine-http.js";
import type { ContainerState, ExecHandle, ExecSpec, ManagedObject, PathStat } from "./engine-types.js";

/** Containers: create, lifecycle, inspect, processes, logs, archives and execs. */
export class ContainerClient {
  constructor(
    private readonly api: LazyDocker,
    private readonly http: EngineHttp,
  ) {}

  async create(spec: Docker.ContainerCreateOptions): Promise<string> {
    try {
      const c = await this.api().createContainer(spec);
      return c.id;
    } catch (err) {
      throw engineError(err, `create container ${spec.name ?? ""}`);
    }
  }

  async start(id: string): Promise<void> {
    try {
      await this.api().getContainer(id).start();
    } catch (err) {
      if (statusOf(err) === 304) return;
      throw engineError(err, `start ${id}`);
    }
  }

  async stop(id: string, graceSec: number): Promise<void> {
    try {
      await this.api().getContainer(id).stop({ t: graceSec });
    } catch (err) {
      if (statusOf(err) === 304 || statusOf(err) === 404) return;
      throw engineError(err, `stop ${id}`);
    }
  }

  async restart(id: string, graceSec: number): Promise<void> {
    try {
      await this.api().getContainer(id).restart({ t: graceSec });
    } catch (err) {
      throw engineError(err, `restart ${id}`);
    }
  }

  async pause(id: string): Promise<void> {
    try {
      await this.api().getContainer(id).pause();
    } catch (err) {
      throw engineError(err, `pause ${id}`);
    }
  }

  async unpause(id: string): Promise<void> {
    try {
      await this.api().getContainer(id).unpause();
    } catch (err) {
      throw engineError(err, `unpause ${id}`);
    }
  }

  async wait(id: string): Promise<number> {
    try {
      const res = (await this.api().getContainer(id).wait()) as { StatusCode: number };
      return res.StatusCode;
    } catch (err) {
      throw engineError(err, `wait ${id}`);
    }
  }

  async kill(id: string): Promise<void> {
    try {
      await this.api().getContainer(id).kill();
    } catch (err) {
      if (statusOf(err) === 404 || statusOf(err) === 409) return;
      throw engineError(err, `kill ${id}`);
    }
  }

  async remove(id: string): Promise<void> {
    try {
      await this.api().getContainer(id).remove({ force: true, v: false });
    } catch (err) {
      if (statusOf(err) === 404) return;
      throw engineError(err, `remove container ${id}`);
    }
  }

  async inspect(id: string): Promise<ContainerState | undefined> {
    let c: Docker.ContainerInspectInfo;
    try {
      c = await this.api().getContainer(id).inspect();
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw engineError(err, `inspect ${id}`);
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
        runtime: (hc as { Runtime?: string }).Runtime ?? "",
      },
      user: c.Config.User ?? "",
      resolvConfPath: (c as { ResolvConfPath?: string }).ResolvConfPath ?? "",
    };
  }

  async list(labels: Record<string, string>): Promise<ManagedObject[]> {
    const list = await this.http.get<Docker.ContainerInfo[]>("/containers/json", {
      all: true,
      filters: { label: labelFilter(labels) },
    });
    return list.map((c) => ({
      id: c.Id,
      name: (c.Names[0] ?? c.Id).replace(/^\//, ""),
      labels: c.Labels ?? {},
    }));
  }

  /** Host pids of every process in the container. */
  async processes(id: string): Promise<number[]> {
    try {
      const top = (await this.api().getContainer(id).top({ ps_args: "-o pid" })) as {
        Titles: string[];
        Processes: string[][] | null;
      };
      const col = top.Titles.indexOf("PID");
      return (top.Processes ?? []).map((p) => Number(p[Math.max(col, 0)])).filter((n) => n > 0);
    } catch (err) {
      if (statusOf(err) === 409 || statusOf(err) === 404) return [];
      throw engineError(err, `list processes of ${id}`);
    }
  }

  async logs(id: string, tail: number): Promise<{ stdout: Buffer; stderr: Buffer }> {
    try {
      const raw = (await this.api()
        .getContainer(id)
        .logs({ stdout: true, stderr: true, tail, follow: false })) as unknown as Buffer;
      return demuxBuffer(raw);
    } catch (err) {
      throw engineError(err, `logs of ${id}`);
    }
  }

  /** A tar of `path`, resolved by the engine inside the container's own root. */
  async getArchive(id: string, path: string): Promise<Readable> {
    try {
      return (await this.api().getContainer(id).getArchive({ path })) as unknown as Readable;
    } catch (err) {
      throw engineError(err, `read ${path}`);
    }
  }

  /** What is at `path` in the container (resolved by the engine in its root), or undefined. */
  async statPath(id: string, path: string): Promise<PathStat | undefined> {
    let res: { headers?: Record<string, string | undefined>; resume?: () => void };
    try {
      res = (await this.api().getContainer(id).infoArchive({ path })) as typeof res;
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw engineError(err, `stat ${path}`);
    }
    res.resume?.();
    const raw = res.headers?.["x-docker-container-path-stat"];
    if (!raw) return undefined;
    const st = JSON.parse(Buffer.from(raw, "base64").toString("utf8")) as {
      name: string;
      size: number;
      mode: number;
      linkTarget?: string;
    };
    // Go's os.FileMode: the type bits sit above the permission bits.
    const isDir = (st.mode & (2 ** 31)) !== 0;
    const isLink = (st.mode & (2 ** 27)) !== 0;
    return {
      name: st.name,
      size: st.size,
      type: isDir ? "directory" : isLink ? "symlink" : "other",
      linkTarget: st.linkTarget ?? "",
    };
  }

  async putArchive(id: string, path: string, tar: Readable | Buffer): Promise<void> {
    try {
      await this.api()
        .getContainer(id)
        .putArchive(tar as unknown as string, { path });
    } catch (err) {
      throw engineError(err, `write ${path}`);
    }
  }

  async exec(containerId: string, spec: ExecSpec): Promise<ExecHandle> {
    let exec: Docker.Exec;
    try {
      exec = await this.api()
        .getContainer(containerId)
        .exec({
          Cmd: spec.cmd,
          AttachStdin: spec.stdin,
          AttachStdout: true,
          AttachStderr: true,
          Tty: spec.tty ?? false,
          User: spec.user,
          WorkingDir: spec.cwd,
          Env: spec.env,
        });
    } catch (err) {
      throw engineError(err, `exec in ${containerId}`);
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
      this.api().modem.demuxStream(stream, stdout, stderr);
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
