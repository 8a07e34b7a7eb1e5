import { cp, mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseDocument } from "yaml";

/** The stacks the benchmark deploys, written to temporary project directories. */

export const BULK_MOUNT = "/bulk";

/**
 * The quickstart (examples/quickstart) copied as is, plus one volume `bulk` mounted in the app
 * service at /bulk: the 1 GB / 10k-file data set of the snapshot benchmark lives there.
 */
export async function quickstartWithBulk(repoRoot: string, into: string): Promise<string> {
  const dir = join(into, "quickstart");
  await cp(join(repoRoot, "examples", "quickstart"), dir, { recursive: true });
  const file = join(dir, "compose.yaml");
  const doc = parseDocument(await readFile(file, "utf8"));
  const volumes = doc.getIn(["services", "app", "volumes"]);
  if (volumes !== undefined)
    throw new Error("examples/quickstart: the app service has volumes now; adapt the bench");
  doc.setIn(["services", "app", "volumes"], doc.createNode([`bulk:${BULK_MOUNT}`]));
  doc.setIn(["volumes", "bulk"], doc.createNode({}));
  await writeFile(file, doc.toString());
  return dir;
}

/**
 * Two services without healthchecks (debian `sleep infinity`), one volume: a fork of it costs
 * what denv itself adds to container starts, not what a healthcheck interval adds.
 */
export const SMALL_COMPOSE = `# bench: two services without healthchecks and one volume
services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    volumes: [data:/data]
  side:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
volumes:
  data: {}
x-denv:
  agent: main
`;

export async function smallStack(into: string): Promise<string> {
  const dir = join(into, "small");
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "compose.yaml"), SMALL_COMPOSE);
  return dir;
}

export function newTempDir(): Promise<string> {
  return mkdtemp(join(tmpdir(), "denv-bench-"));
}
