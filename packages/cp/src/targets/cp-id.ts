import { randomBytes } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";

/**
 * This control plane's id (`<data-dir>/cp-id`, written at the first start): the machines it
 * creates carry it as a label, so control planes sharing a cloud project never count or delete
 * each other's machines.
 */
export async function readCpId(file: string): Promise<string> {
  const had = (await readFile(file, "utf8").catch(() => "")).trim();
  if (/^[a-z0-9]{12}$/.test(had)) return had;
  const id = randomBytes(6).toString("hex");
  await writeFile(file, `${id}\n`, { mode: 0o600 });
  return id;
}
