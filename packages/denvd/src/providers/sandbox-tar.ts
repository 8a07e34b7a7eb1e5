import { posix } from "node:path";
import { DenvError } from "@denv/spec";
import { DEFAULT_LIMITS } from "../files/tar-guard.js";

/**
 * The files verbs' `tar` in a provider's sandbox, as the runtimes that run it through a command
 * of the sandbox (Prime, Modal) share it: the commands, run as the asked user, and what their
 * failures and oversized downloads say.
 */

/** Bytes a packed download may hold beyond the check's content limit (tar's headers and padding). */
export const TAR_OVERHEAD = 64 * 1024 ** 2;

/** The most a packed download may hold before the check refuses it. */
export const MAX_PACKED = DEFAULT_LIMITS.maxBytes + TAR_OVERHEAD;

/** The path, normalised; refused unless absolute. */
export function checkAbsolute(path: string): string {
  if (!path.startsWith("/")) throw new DenvError("invalid_request", `path '${path}' must be absolute`);
  return posix.normalize(path);
}

/** Extracts the archive on stdin into `dir` (created when missing); tar's words on stdout. */
export function untarArgv(dir: string): string[] {
  return ["/bin/sh", "-c", 'mkdir -p -- "$1" && tar -xf - -C "$1" --no-same-owner 2>&1', "sh", dir];
}

/** Packs `abs` (a file or a directory, under its own base name) to stdout; its parent is the archive's root. */
export function tarArgv(abs: string): { argv: string[]; parent: string } {
  const parent = posix.dirname(abs);
  const base = abs === "/" ? "." : posix.basename(abs);
  return { argv: ["tar", "-cf", "-", "-C", parent, "--", base], parent };
}

/** A failed `tar` or `mkdir` in the sandbox as denv's error, naming the path (tar's own words last). */
export function filesError(path: string, output: string): DenvError {
  const lines = output.trim().split("\n");
  if (lines.some((l) => /No such file or directory/.test(l)))
    return new DenvError("not_found", `${path}: no such file or directory`);
  if (lines.some((l) => /Permission denied|Operation not permitted/.test(l)))
    return new DenvError("forbidden", `${path}: permission denied`);
  return new DenvError("docker", `${path}: ${lines[0] ?? ""}`);
}

/** A download larger than the check takes. */
export function tooBigError(path: string): DenvError {
  return new DenvError(
    "invalid_request",
    `${path}: more than a download may hold (${DEFAULT_LIMITS.maxBytes} bytes of content)`,
  );
}
