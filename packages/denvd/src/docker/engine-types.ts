import type { Readable } from "node:stream";

/**
 * denv's own small types for what the Docker Engine reports. Docker's PascalCase inspect JSON is
 * mapped into these in the clients of this folder and nowhere else.
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
    /** The OCI runtime (runc, or runsc for a sandboxed agent). */
    runtime: string;
  };
  user: string;
  /** The host file the engine generated and bind-mounts at /etc/resolv.conf ("" when none). */
  resolvConfPath: string;
}

export interface ImageInfo {
  id: string;
  repoDigests: string[];
  layers: number;
  /** Diff ids of its layers, bottom first. */
  diffIds: string[];
  size: number;
  user: string;
  workingDir: string;
  env: string[];
  cmd: string[] | null;
  entrypoint: string[] | null;
  labels: Record<string, string>;
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

/** One event of the engine's event stream, as much of it as denvd reads. */
export interface EngineEvent {
  id: string;
  labels: Record<string, string>;
}

/** A path inside a container, as the engine's archive API reports it. */
export interface PathStat {
  name: string;
  size: number;
  type: "directory" | "symlink" | "other";
  linkTarget: string;
}
