/**
 * What the validator may know about the world. The spec package does no I/O: the caller (the
 * CLI, the control plane) builds this from the project folder and its environment.
 */
export interface ComposeContext {
  /** Variables for ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, ${VAR?err}, $$ escapes. */
  env: Record<string, string | undefined>;
  /** Reads a project-relative file (for env_file); undefined when missing. */
  readFile(relPath: string): string | undefined;
  /** Whether a project-relative path exists (build contexts, Dockerfiles, the verifier's tests folder). */
  exists(relPath: string): boolean;
  /** Default project name when the file has no top-level `name`. */
  projectName: string;
  /** The file's name in messages about the file as a whole (e.g. "compose.yaml"); default "the compose file". */
  source?: string;
}
