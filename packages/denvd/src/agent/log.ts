/**
 * denvd's log: one line per event on stderr (journald adds its own timestamps; the ISO time
 * is there for runs outside systemd). Fields are key=value, quoted when they hold spaces.
 * Callers never pass secrets (the credential, join tokens); config is logged through redact().
 */
export type Log = (event: string, fields?: Record<string, unknown>) => void;

function formatValue(v: unknown): string {
  const text = typeof v === "string" ? v : v instanceof Error ? v.message : JSON.stringify(v);
  return /[\s"=]/.test(text ?? "") ? JSON.stringify(text) : String(text);
}

function formatLine(event: string, fields: Record<string, unknown> = {}, now = new Date()): string {
  const parts = Object.entries(fields)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}=${formatValue(v)}`);
  return [now.toISOString(), event, ...parts].join(" ");
}

export function streamLog(out: NodeJS.WritableStream): Log {
  return (event, fields) => {
    out.write(`${formatLine(event, fields)}\n`);
  };
}

/** For tests and library use: drops everything. */
export const silentLog: Log = () => undefined;
