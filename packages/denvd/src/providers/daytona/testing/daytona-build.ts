import { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import tar from "tar-stream";
import type { DaytonaDocker } from "./daytona-docker.js";
import type { ObjectStorage } from "./daytona-object-storage.js";

/**
 * A build's log as Daytona serves it at its build-logs URL: plain text, and with `follow=true`
 * the text so far then each new line until the build ends.
 */
export class BuildLog {
  private readonly lines: string[] = [];
  private readonly followers = new Set<(line: string | null) => void>();
  done = false;

  write(text: string): void {
    for (const line of text.split("\n")) {
      if (line.trim() === "") continue;
      this.lines.push(line);
      for (const f of this.followers) f(line);
    }
  }

  end(): void {
    this.done = true;
    for (const f of this.followers) f(null);
    this.followers.clear();
  }

  text(): string {
    return this.lines.map((l) => `${l}\n`).join("");
  }

  /** Calls `on` with each line so far and each new one, then with null at the end. */
  follow(on: (line: string | null) => void): () => void {
    for (const l of this.lines) on(l);
    if (this.done) {
      on(null);
      return () => undefined;
    }
    this.followers.add(on);
    return () => this.followers.delete(on);
  }
}

/** The name of the Dockerfile in a build context: one no COPY of the SDK's would name. */
const DOCKERFILE = ".daytona-double.Dockerfile";

/**
 * `docker build` of what the SDK sent: its Dockerfile text, its context tarballs (fetched from
 * object storage by hash, merged at the context's root as the SDK's archive paths say), with
 * the local engine only: a FROM names a local image (classic builder: nothing is pulled when
 * the image is present). Resolves with the image's id; the builder's output goes to `log`.
 */
export async function buildImage(o: {
  docker: DaytonaDocker;
  storage: ObjectStorage;
  organizationId: string;
  dockerfile: string;
  contextHashes: string[];
  tag: string;
  labels: Record<string, string>;
  log: BuildLog;
}): Promise<string> {
  const pack = tar.pack();
  for (const hash of o.contextHashes) {
    const extract = tar.extract();
    const copied = new Promise<void>((resolve, reject) => {
      extract.on("entry", (header, stream, next) => {
        void buffer(stream).then((data) => {
          if (header.type === "file") pack.entry(header, data);
          else pack.entry(header, "");
          next();
        }, reject);
      });
      extract.on("finish", resolve);
      extract.on("error", reject);
    });
    extract.end(await o.storage.context(o.organizationId, hash));
    await copied;
  }
  pack.entry({ name: DOCKERFILE, mode: 0o644 }, o.dockerfile);
  pack.finalize();
  const context = await buffer(pack);
  o.log.write(`Building ${o.tag}`);
  return o.docker.docker.images.build(
    Readable.from(context),
    { tag: o.tag, dockerfile: DOCKERFILE, args: {}, labels: o.labels },
    (line) => o.log.write(line),
  );
}

/** The image a Dockerfile of only `FROM <ref>` stands for, which needs no build. */
export function plainBase(dockerfile: string): string | undefined {
  const lines = dockerfile
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"));
  const m = lines.length === 1 ? /^FROM\s+(\S+)$/i.exec(lines[0] ?? "") : null;
  return m?.[1];
}
