import { posix } from "node:path";
import { DenvError } from "@denv/spec";
import type { DockerClient } from "../docker/docker-client.js";
import { guardTar } from "../files/tar-guard.js";

export const SUBMISSION_DIR = "/submission";

export type SubmissionEntry =
  | { path: string; entries: number; bytes: number }
  | { path: string; missing: true };

/** The submission paths copied out of the fork, checked, each held in a temporary tar on the host. */
export interface Submission {
  entries: SubmissionEntry[];
  archives: Array<{ dir: string; path: string }>;
  /** Removes the temporary tars. */
  cleanup(): Promise<void>;
}

/**
 * Copies each submission path out of the fork's agent container (the agent's disk state) and
 * checks it (protection 3) before the verifier sees a byte of it. A special file anywhere throws
 * `special_file`; what was copied so far is removed.
 */
export async function collectSubmission(
  docker: DockerClient,
  containerId: string,
  paths: readonly string[],
  timeoutMs: number,
): Promise<Submission> {
  const entries: SubmissionEntry[] = [];
  const held: Array<{ dir: string; path: string; cleanup: () => Promise<void> }> = [];
  const cleanup = async () => {
    for (const a of held) await a.cleanup();
  };
  try {
    for (const path of paths) {
      let raw: NodeJS.ReadableStream;
      try {
        raw = await docker.containers.getArchive(containerId, path);
      } catch (err) {
        if (err instanceof DenvError && err.code === "not_found") {
          entries.push({ path, missing: true });
          continue;
        }
        throw err;
      }
      // A stream that stalls (an engine that stops answering mid-copy) must not hang the episode.
      const stall = setTimeout(() => {
        (raw as NodeJS.ReadableStream & { destroy(err: Error): void }).destroy(
          new DenvError(
            "timeout",
            `copying the submission path ${path} out of the fork took over ${timeoutMs} ms`,
          ),
        );
      }, timeoutMs);
      const guarded = await guardTar(raw, { displayRoot: posix.dirname(path) }).finally(() =>
        clearTimeout(stall),
      );
      held.push({
        dir: posix.join(SUBMISSION_DIR, posix.dirname(path)),
        path: guarded.path,
        cleanup: guarded.cleanup,
      });
      entries.push({ path, entries: guarded.entries, bytes: guarded.bytes });
    }
  } catch (err) {
    await cleanup();
    throw err;
  }
  return { entries, archives: held.map(({ dir, path }) => ({ dir, path })), cleanup };
}
