import type { Readable } from "node:stream";
import { DenvError } from "@denv/spec/errors";
import { Labels } from "@denv/spec/labels";
import type Docker from "dockerode";
import { engineError, labelFilter, statusOf } from "./engine-error.js";
import type { EngineHttp, LazyDocker } from "./engine-http.js";
import type { ImageInfo, ManagedObject } from "./engine-types.js";

/** An image as a list of labelled ones gives it: untagged ones (a build that lost its tag) say so. */
export interface ManagedImage extends ManagedObject {
  tagged: boolean;
  /** Seconds since the epoch. */
  created: number;
}

/** Images: inspect, build, commit, squash, tag, list, remove. */
export class ImageClient {
  constructor(
    private readonly api: LazyDocker,
    private readonly http: EngineHttp,
  ) {}

  async info(ref: string): Promise<ImageInfo | undefined> {
    try {
      const i = await this.api().getImage(ref).inspect();
      return {
        id: i.Id,
        repoDigests: i.RepoDigests ?? [],
        layers: i.RootFS?.Layers?.length ?? 0,
        diffIds: i.RootFS?.Layers ?? [],
        size: i.Size,
        user: i.Config?.User ?? "",
        workingDir: i.Config?.WorkingDir ?? "",
        env: i.Config?.Env ?? [],
        cmd: (i.Config?.Cmd as string[] | null) ?? null,
        entrypoint: (i.Config?.Entrypoint as string[] | null) ?? null,
        labels: i.Config?.Labels ?? {},
      };
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw engineError(err, `inspect image ${ref}`);
    }
  }

  /** Builds from a tar of the context; resolves with the image id, rejects with the build log's error. */
  async build(
    context: Readable,
    opts: {
      tag: string;
      dockerfile: string;
      args: Record<string, string>;
      target?: string | undefined;
      labels: Record<string, string>;
      /** The network RUN steps join (default: the engine's bridge). */
      network?: string | undefined;
    },
    onLog?: (line: string) => void,
  ): Promise<string> {
    let stream: NodeJS.ReadableStream;
    try {
      stream = await this.api().buildImage(context, {
        t: opts.tag,
        dockerfile: opts.dockerfile,
        buildargs: opts.args,
        ...(opts.target ? { target: opts.target } : {}),
        ...(opts.network ? { networkmode: opts.network } : {}),
        labels: opts.labels,
        rm: true,
        forcerm: true,
      });
    } catch (err) {
      throw engineError(err, `build ${opts.tag}`);
    }
    const tail: string[] = [];
    const stages = new StageResults();
    await new Promise<void>((resolve, reject) => {
      this.api().modem.followProgress(
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
            stages.read(ev.stream);
            onLog?.(ev.stream);
          }
        },
      );
    });
    const info = await this.info(opts.tag);
    if (!info) throw new DenvError("docker", `build ${opts.tag} finished but the image is missing`);
    await this.removeStages(stages.ended(), onLog);
    return info.id;
  }

  /**
   * The images the earlier stages of a multi-stage build ended with: untagged, unlabelled (the
   * build's labels go on its last stage) and parent of nothing the build kept, the engine would
   * keep them for ever. Each is removed, with its untagged parents, unless the engine refuses
   * (an image or container still uses it): nothing is forced.
   */
  private async removeStages(ids: string[], onLog?: (line: string) => void): Promise<void> {
    for (const id of ids) {
      try {
        const image = await this.api().getImage(id).inspect();
        if ((image.RepoTags ?? []).length > 0) continue;
        await this.api().getImage(id).remove();
      } catch (err) {
        onLog?.(`kept the image of an earlier stage, ${id}: ${(err as Error).message}\n`);
      }
    }
  }

  /** `docker save` of one image: a tar stream (the engine writes the layers as it reads them). */
  async save(ref: string): Promise<Readable> {
    try {
      return (await this.api().getImage(ref).get()) as unknown as Readable;
    } catch (err) {
      throw engineError(err, `save ${ref}`);
    }
  }

  /** `docker load` of a tar stream; resolves once the engine has loaded it, with its report. */
  async load(tar: Readable): Promise<string> {
    try {
      const res = (await this.api().loadImage(tar, { quiet: true })) as unknown as Readable;
      const out: Buffer[] = [];
      for await (const chunk of res) out.push(chunk as Buffer);
      const text = Buffer.concat(out).toString("utf8");
      const failed = text
        .split("\n")
        .map((l) => (l.trim() ? (JSON.parse(l) as { error?: string }) : {}))
        .find((l) => l.error);
      if (failed?.error) throw new DenvError("docker", `load: ${failed.error}`);
      return text;
    } catch (err) {
      if (err instanceof DenvError) throw err;
      throw engineError(err, "load an image");
    }
  }

  /** Ids of every image on the engine. */
  async allIds(): Promise<string[]> {
    try {
      return (await this.http.get<Docker.ImageInfo[]>("/images/json")).map((i) => i.Id);
    } catch (err) {
      throw engineError(err, "list images");
    }
  }

  async tag(id: string, repo: string, tag: string): Promise<void> {
    try {
      await this.api().getImage(id).tag({ repo, tag });
    } catch (err) {
      throw engineError(err, `tag ${id}`);
    }
  }

  async remove(ref: string): Promise<void> {
    try {
      await this.api().getImage(ref).remove({ force: true });
    } catch (err) {
      // An image still used by another version's container is kept (409); gc retries later.
      if (statusOf(err) === 404 || statusOf(err) === 409) return;
      throw engineError(err, `remove image ${ref}`);
    }
  }

  async list(labels: Record<string, string>): Promise<ManagedImage[]> {
    const list = await this.http.get<Docker.ImageInfo[]>("/images/json", {
      filters: { label: labelFilter(labels) },
    });
    return list.map((i) => {
      const tags = (i.RepoTags ?? []).filter((t) => t !== "<none>:<none>");
      return {
        id: i.Id,
        name: tags[0] ?? i.Id,
        labels: i.Labels ?? {},
        tagged: tags.length > 0,
        created: i.Created,
      };
    });
  }

  /**
   * Removes an image that nothing uses: the engine keeps one a container (running or not) was
   * made from (409), and so does this call, without force. True when it was removed or was gone.
   */
  async removeUnused(id: string): Promise<boolean> {
    try {
      await this.api().getImage(id).remove({ force: false, noprune: false });
      return true;
    } catch (err) {
      if (statusOf(err) === 404) return true;
      if (statusOf(err) === 409) return false;
      throw engineError(err, `remove image ${id}`);
    }
  }

  /** Commits a container's writable layer. `pause: false` because the caller froze it already. */
  async commit(
    containerId: string,
    opts: { repo: string; tag: string; labels: Record<string, string> },
  ): Promise<string> {
    try {
      const res = (await this.api()
        .getContainer(containerId)
        .commit({
          repo: opts.repo,
          tag: opts.tag,
          pause: false,
          changes: Object.entries(opts.labels).map(([k, v]) => `LABEL ${k}=${JSON.stringify(v)}`),
        })) as { Id: string };
      return res.Id;
    } catch (err) {
      throw engineError(err, `commit ${containerId}`);
    }
  }

  /** Flattens an image into one layer (export of a created container + import), keeping its config. */
  async squash(image: string, target: { repo: string; tag: string }, info: ImageInfo): Promise<string> {
    // Never started: it exists only to be exported.
    const tmp = await this.api().createContainer({
      Image: image,
      Cmd: ["true"],
      Labels: { [Labels.managed]: "true" },
    });
    try {
      const exported = await tmp.export();
      const changes: string[] = [];
      for (const e of info.env) changes.push(`ENV ${e.replace("=", " ")}`);
      if (info.user) changes.push(`USER ${info.user}`);
      if (info.workingDir) changes.push(`WORKDIR ${info.workingDir}`);
      if (info.entrypoint) changes.push(`ENTRYPOINT ${JSON.stringify(info.entrypoint)}`);
      if (info.cmd) changes.push(`CMD ${JSON.stringify(info.cmd)}`);
      for (const [k, v] of Object.entries(info.labels)) changes.push(`LABEL ${k}=${JSON.stringify(v)}`);
      const stream = await this.api().importImage(
        exported as unknown as string,
        { repo: target.repo, tag: target.tag, changes } as unknown as Record<string, unknown>,
      );
      await new Promise<void>((resolve, reject) =>
        this.api().modem.followProgress(stream, (err: Error | null) => (err ? reject(err) : resolve())),
      );
    } catch (err) {
      throw engineError(err, `squash ${image}`);
    } finally {
      await tmp.remove({ force: true }).catch(() => undefined);
    }
    const squashed = await this.info(`${target.repo}:${target.tag}`);
    if (!squashed) throw new DenvError("docker", `squash of ${image} produced no image`);
    return squashed.id;
  }
}

/**
 * Reads the classic builder's output for the image each stage but the last ended with: the last
 * ` ---> <id>` before each `FROM` step after the first.
 */
class StageResults {
  private readonly ids: string[] = [];
  private last: string | undefined;
  private partial = "";

  read(chunk: string): void {
    const lines = (this.partial + chunk).split("\n");
    this.partial = lines.pop() ?? "";
    for (const line of lines) {
      if (/^Step \d+\/\d+ : FROM /i.test(line)) {
        if (this.last !== undefined) this.ids.push(this.last);
        this.last = undefined;
        continue;
      }
      const id = /^ ---> ([0-9a-f]{12})\s*$/.exec(line)?.[1];
      if (id !== undefined) this.last = id;
    }
  }

  ended(): string[] {
    return [...this.ids];
  }
}
