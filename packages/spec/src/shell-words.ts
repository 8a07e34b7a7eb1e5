/**
 * Splits a compose command string into argv as Docker Compose does (POSIX shell-word rules:
 * quotes and backslash escapes; no expansion).
 */
export function splitShellWords(input: string): string[] {
  const out: string[] = [];
  let cur = "";
  let inWord = false;
  let quote: '"' | "'" | undefined;
  for (let i = 0; i < input.length; i++) {
    const ch = input[i] as string;
    if (quote === "'") {
      if (ch === "'") quote = undefined;
      else cur += ch;
    } else if (quote === '"') {
      if (ch === '"') quote = undefined;
      else if (ch === "\\" && i + 1 < input.length && '"\\$`'.includes(input[i + 1] as string))
        cur += input[++i];
      else cur += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      inWord = true;
    } else if (ch === "\\" && i + 1 < input.length) {
      cur += input[++i];
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) out.push(cur);
      cur = "";
      inWord = false;
    } else {
      cur += ch;
      inWord = true;
    }
  }
  if (quote) throw new Error(`unterminated ${quote} quote in: ${input}`);
  if (inWord) out.push(cur);
  return out;
}

/** Compose's command/entrypoint: a list is argv, a string is split into shell words. */
export function toArgv(value: string[] | string | undefined): string[] | undefined {
  if (value === undefined) return undefined;
  return typeof value === "string" ? splitShellWords(value) : value;
}
