import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";
import { writeFileAtomic } from "./atomic-file.js";

/**
 * `<state-dir>/host.json`: what `denvd join` got from the control plane and `denvd run` dials
 * with. Mode 0600, owned by root: the credential is the host's identity.
 */
export const HostFile = z.object({
  url: z.string(),
  host_id: z.string(),
  credential: z.string(),
  target: z.string(),
});
export type HostFile = z.infer<typeof HostFile>;

class NotJoinedError extends Error {
  override name = "NotJoinedError";
}

export function hostFilePath(stateDir: string): string {
  return join(stateDir, "host.json");
}

export async function readHostFile(stateDir: string): Promise<HostFile> {
  const path = hostFilePath(stateDir);
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") {
      throw new NotJoinedError(
        `this host has not joined a target (no ${path}): run denvd join --url URL --token JOIN_TOKEN`,
      );
    }
    throw err;
  }
  const parsed = HostFile.safeParse(JSON.parse(text));
  if (!parsed.success) {
    throw new NotJoinedError(
      `${path} is damaged: join again with denvd join --force --url URL --token TOKEN`,
    );
  }
  return parsed.data;
}

export async function writeHostFile(stateDir: string, host: HostFile): Promise<string> {
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const path = hostFilePath(stateDir);
  await writeFileAtomic(path, `${JSON.stringify(host, null, 2)}\n`, 0o600);
  return path;
}
