import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import { DenvError } from "@denv/spec";

/**
 * Target credentials at rest: AES-256-GCM (node:crypto) with the cp's credential key, the target's
 * name as associated data (a sealed value copied to another target's row does not open), a fresh
 * 12-byte IV per seal. `denvc1.<key id>.<iv>.<tag>.<ciphertext>` (base64url); the key id is the
 * first 8 hex digits of the key's SHA-256, so a rotation knows which key opens a value.
 */
const PREFIX = "denvc1";

interface Key {
  id: string;
  bytes: Buffer;
}

function keyOf(base64: string): Key {
  const bytes = Buffer.from(base64.trim(), "base64");
  if (bytes.length !== 32)
    throw new Error("a credential key is 32 bytes in base64 (openssl rand -base64 32)");
  return { id: createHash("sha256").update(bytes).digest("hex").slice(0, 8), bytes };
}

export class SecretBox {
  private readonly current: Key;
  private readonly all: Map<string, Key>;

  /** `current` seals; it and `previous` open. */
  constructor(current: string, previous: readonly string[] = []) {
    this.current = keyOf(current);
    this.all = new Map([this.current, ...previous.map(keyOf)].map((k) => [k.id, k]));
  }

  /** The configured key, else the one in `file`, else a new one written there (mode 0600). */
  static async open(options: {
    key?: string;
    previous?: readonly string[];
    file: string;
  }): Promise<SecretBox> {
    let key = options.key;
    if (!key) {
      key = await readFile(options.file, "utf8").catch(() => undefined);
      if (!key) {
        key = randomBytes(32).toString("base64");
        await writeFile(options.file, `${key}\n`, { mode: 0o600, flag: "wx" }).catch(async () => {
          key = await readFile(options.file, "utf8");
        });
      }
    }
    return new SecretBox(key, options.previous ?? []);
  }

  seal(context: string, secrets: Record<string, string>): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.current.bytes, iv);
    cipher.setAAD(Buffer.from(context));
    const ct = Buffer.concat([cipher.update(JSON.stringify(secrets), "utf8"), cipher.final()]);
    return [PREFIX, this.current.id, iv, cipher.getAuthTag(), ct]
      .map((p) => (typeof p === "string" ? p : p.toString("base64url")))
      .join(".");
  }

  open(context: string, sealed: string): Record<string, string> {
    const [prefix, id = "", iv = "", tag = "", ct = ""] = sealed.split(".");
    const key = this.all.get(id);
    if (prefix !== PREFIX || !key) {
      throw new DenvError(
        "internal",
        `the credentials of target ${context} are sealed with a key this control plane does not have (key id ${id}): give it with --credential-keys-previous`,
      );
    }
    try {
      const decipher = createDecipheriv("aes-256-gcm", key.bytes, Buffer.from(iv, "base64url"));
      decipher.setAAD(Buffer.from(context));
      decipher.setAuthTag(Buffer.from(tag, "base64url"));
      const text = Buffer.concat([decipher.update(Buffer.from(ct, "base64url")), decipher.final()]).toString(
        "utf8",
      );
      return JSON.parse(text) as Record<string, string>;
    } catch {
      throw new DenvError("internal", `the credentials of target ${context} do not open: they were altered`);
    }
  }

  /** Whether `sealed` was sealed with an older key (a start reseals it with the current one). */
  isStale(sealed: string): boolean {
    return sealed.split(".")[1] !== this.current.id;
  }
}
