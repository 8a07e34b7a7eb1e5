import { mkdir, readdir, readFile, rm } from "node:fs/promises";
import { basename, join } from "node:path";
import { DenvError } from "@denv/spec";
import { writeFileAtomic } from "../agent/atomic-file.js";

/**
 * What a provider runtime keeps of its environments and versions, one JSON file each under
 * `<stateDir>/<provider>/`, written atomically: the provider holds the sandboxes and snapshots,
 * these records say which of them are denv's and what they are. Each record names the tests
 * archive (kept on this host only, never in a sandbox) its verifier copies in.
 */
export class SandboxRecords<
  E extends { id: string; testsTar?: string },
  V extends { id: string; project: string; number: number; testsTar?: string },
> {
  protected constructor(protected readonly dir: string) {}

  /** The provider's folder under the state folder, with the kinds every runtime keeps and `extra`. */
  protected static async prepare(stateDir: string, provider: string, extra: string[] = []): Promise<string> {
    const dir = join(stateDir, provider);
    for (const kind of ["environments", "versions", "tests", ...extra]) {
      await mkdir(join(dir, kind), { recursive: true, mode: 0o700 });
    }
    return dir;
  }

  /** Where the verifiers' tests are kept, one archive per deploy (named after its command). */
  get testsDir(): string {
    return join(this.dir, "tests");
  }

  /** The tests archives no environment or version names. */
  async unreferencedTests(): Promise<string[]> {
    const used = new Set([...(await this.environments()), ...(await this.versions())].map((r) => r.testsTar));
    return (await readdir(this.testsDir)).map((f) => join(this.testsDir, f)).filter((f) => !used.has(f));
  }

  /** Removes the tests archives no record names, but a command's that is still running; their names. */
  async sweepTests(inFlight: ReadonlySet<string>): Promise<string[]> {
    const removed: string[] = [];
    for (const file of await this.unreferencedTests()) {
      if (inFlight.has(basename(file, ".tar"))) continue;
      await rm(file, { force: true });
      removed.push(`tests ${basename(file)}`);
    }
    return removed;
  }

  /**
   * Every recorded environment destroyed and version deleted, through the runtime's own verbs
   * (records with them), for `denvd release`: what each was, as `describe` says it.
   */
  async releaseRecorded(
    runtime: { destroy(envId: string): Promise<void>; deleteVersion(versionId: string): Promise<void> },
    describe: { environment(rec: E): string; version(v: V): string },
  ): Promise<string[]> {
    const removed: string[] = [];
    for (const rec of await this.environments()) {
      await runtime.destroy(rec.id);
      removed.push(`environment ${rec.id} (${describe.environment(rec)})`);
    }
    for (const v of await this.versions()) {
      await runtime.deleteVersion(v.id);
      removed.push(`version ${v.id} (${describe.version(v)})`);
    }
    return removed;
  }

  environments(): Promise<E[]> {
    return this.all<E>("environments");
  }
  versions(): Promise<V[]> {
    return this.all<V>("versions");
  }
  getEnvironment(id: string): Promise<E | undefined> {
    return this.get<E>("environments", id);
  }
  getVersion(id: string): Promise<V | undefined> {
    return this.get<V>("versions", id);
  }
  putEnvironment(rec: E): Promise<void> {
    return writeFileAtomic(this.file("environments", rec.id), JSON.stringify(rec, null, 2));
  }
  putVersion(rec: V): Promise<void> {
    return writeFileAtomic(this.file("versions", rec.id), JSON.stringify(rec, null, 2));
  }
  deleteEnvironment(id: string): Promise<void> {
    return rm(this.file("environments", id), { force: true });
  }
  deleteVersion(id: string): Promise<void> {
    return rm(this.file("versions", id), { force: true });
  }

  /** The environment's record, or `not_found` naming the host. */
  async requireEnvironment(id: string, hostId: string): Promise<E> {
    const rec = await this.getEnvironment(id);
    if (!rec) throw new DenvError("not_found", `environment ${id} not found on host ${hostId}`);
    return rec;
  }

  /** The version's record, or `not_found` naming the host. */
  async requireVersion(id: string, hostId: string): Promise<V> {
    const v = await this.getVersion(id);
    if (!v) throw new DenvError("not_found", `version ${id} not found on host ${hostId}`);
    return v;
  }

  /** The number a project's next version takes: one more than its highest. */
  async nextVersionNumber(project: string): Promise<number> {
    const numbers = (await this.versions()).filter((v) => v.project === project).map((v) => v.number);
    return 1 + Math.max(0, ...numbers);
  }

  /** Every environment and version as the protocol reports them, versions by number. */
  async report<HE, HV>(
    environment: (rec: E) => HE,
    version: (v: V) => HV,
  ): Promise<{ environments: HE[]; versions: HV[] }> {
    const environments = (await this.environments()).map(environment);
    const versions = (await this.versions()).sort((a, b) => a.number - b.number).map(version);
    return { environments, versions };
  }

  /** Ids hold `/` and `@`: the file name is the id, percent-encoded. */
  protected file(kind: string, id: string): string {
    return join(this.dir, kind, `${encodeURIComponent(id)}.json`);
  }

  protected async get<T>(kind: string, id: string): Promise<T | undefined> {
    try {
      return JSON.parse(await readFile(this.file(kind, id), "utf8")) as T;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
  }

  protected async all<T>(kind: string): Promise<T[]> {
    const out: T[] = [];
    for (const name of (await readdir(join(this.dir, kind))).sort()) {
      if (!name.endsWith(".json")) continue;
      const rec = await this.get<T>(kind, decodeURIComponent(name.slice(0, -".json".length)));
      if (rec) out.push(rec);
    }
    return out;
  }
}
