/**
 * The cp's one logger: JSON lines on stderr (stdout carries only what `main` prints for people).
 * Fastify's own logger is off; the request hook logs through this one.
 */
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

export type Fields = Record<string, unknown>;

export interface Log {
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
}

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export function jsonLog(
  level: LogLevel,
  write: (line: string) => void = (l) => process.stderr.write(l),
): Log {
  const at =
    (lvl: Exclude<LogLevel, "silent">) =>
    (msg: string, fields?: Fields): void => {
      if (RANK[lvl] < RANK[level]) return;
      write(`${JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...fields })}\n`);
    };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
