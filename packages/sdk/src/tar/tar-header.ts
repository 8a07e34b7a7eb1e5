/**
 * The tar format (POSIX ustar with pax extended headers, reading GNU long names too), enough
 * for the files API: Docker's archives and GNU tar's read; what we write, both read.
 */

export const BLOCK = 512;

export type EntryType = "file" | "directory" | "symlink" | "link" | "other";

export interface TarEntry {
  /** The entry's path inside the archive (directories without the trailing slash). */
  name: string;
  type: EntryType;
  mode: number;
  size: number;
  /** Seconds since the epoch. */
  mtime: number;
  /** Symlink target, or the archive path a hard link points to. */
  linkname: string;
}

const TYPEFLAGS: Record<EntryType, string> = {
  file: "0",
  directory: "5",
  symlink: "2",
  link: "1",
  other: "0",
};
const MAX_OCTAL_11 = 0o77777777777;

export function typeOf(flag: string): EntryType | "pax" | "pax-global" | "gnu-longname" | "gnu-longlink" {
  switch (flag) {
    case "0":
    case "\0":
    case "":
    case "7":
      return "file";
    case "5":
      return "directory";
    case "2":
      return "symlink";
    case "1":
      return "link";
    case "x":
      return "pax";
    case "g":
      return "pax-global";
    case "L":
      return "gnu-longname";
    case "K":
      return "gnu-longlink";
    default:
      return "other";
  }
}

/** The blocks that describe one entry: a pax header first when a field does not fit ustar. */
export function encodeHeader(entry: TarEntry): Buffer {
  const name = entry.type === "directory" ? `${entry.name}/` : entry.name;
  const pax: Record<string, string> = {};
  const fitsName = Buffer.byteLength(name) <= 100 && isAscii(name);
  if (!fitsName) pax.path = name;
  if (Buffer.byteLength(entry.linkname) > 100 || !isAscii(entry.linkname)) pax.linkpath = entry.linkname;
  if (entry.size > MAX_OCTAL_11) pax.size = String(entry.size);
  const main = ustar({
    name: fitsName ? name : asciiStub(name),
    typeflag: TYPEFLAGS[entry.type],
    mode: entry.mode,
    size: entry.size > MAX_OCTAL_11 ? 0 : entry.size,
    mtime: entry.mtime,
    linkname: pax.linkpath === undefined ? entry.linkname : asciiStub(entry.linkname),
  });
  if (Object.keys(pax).length === 0) return main;
  const body = Buffer.from(
    Object.entries(pax)
      .map(([k, v]) => paxRecord(k, v))
      .join(""),
  );
  const header = ustar({
    name: asciiStub(`PaxHeaders/${name}`),
    typeflag: "x",
    mode: 0o644,
    size: body.length,
    mtime: entry.mtime,
    linkname: "",
  });
  return Buffer.concat([header, body, padding(body.length), main]);
}

interface UstarFields {
  name: string;
  typeflag: string;
  mode: number;
  size: number;
  mtime: number;
  linkname: string;
}

function ustar(f: UstarFields): Buffer {
  const block = Buffer.alloc(BLOCK);
  block.write(f.name, 0, 100, "utf8");
  block.write(octal(f.mode & 0o7777, 7), 100, "ascii");
  block.write(octal(0, 7), 108, "ascii"); // uid: owners are the receiver's business
  block.write(octal(0, 7), 116, "ascii"); // gid
  block.write(octal(f.size, 11), 124, "ascii");
  block.write(octal(Math.max(0, Math.min(Math.floor(f.mtime), MAX_OCTAL_11)), 11), 136, "ascii");
  block.write(f.typeflag, 156, "ascii");
  block.write(f.linkname, 157, 100, "utf8");
  block.write("ustar\u000000", 257, "ascii");
  block.fill(" ", 148, 156);
  let sum = 0;
  for (const byte of block) sum += byte;
  block.write(`${sum.toString(8).padStart(6, "0")}\u0000 `, 148, "ascii");
  return block;
}

function octal(value: number, digits: number): string {
  return `${value.toString(8).padStart(digits, "0")}\u0000`;
}

/** `"%d key=value\n"` where %d counts the whole record, itself included. */
function paxRecord(key: string, value: string): string {
  const rest = ` ${key}=${value}\n`;
  const restBytes = Buffer.byteLength(rest);
  let length = restBytes + 1;
  while (String(length).length + restBytes !== length) length = String(length).length + restBytes;
  return `${length}${rest}`;
}

export function parsePax(body: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let offset = 0;
  while (offset < body.length) {
    const space = body.indexOf(0x20, offset);
    if (space === -1) break;
    const length = Number.parseInt(body.toString("ascii", offset, space), 10);
    if (!Number.isFinite(length) || length <= 0) break;
    const record = body.toString("utf8", space + 1, offset + length - 1);
    const eq = record.indexOf("=");
    if (eq !== -1) out[record.slice(0, eq)] = record.slice(eq + 1);
    offset += length;
  }
  return out;
}

export interface RawHeader {
  name: string;
  typeflag: string;
  mode: number;
  size: number;
  mtime: number;
  linkname: string;
}

/** Decodes a header block; null for the zero blocks that end an archive. */
export function decodeHeader(block: Buffer): RawHeader | null {
  if (block.every((b) => b === 0)) return null;
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : (block[i] ?? 0);
  if (numeric(block, 148, 8) !== sum) throw new Error("a tar header's checksum does not match");
  const magic = block.toString("ascii", 257, 262);
  const prefix = magic === "ustar" ? cString(block, 345, 155) : "";
  const name = cString(block, 0, 100);
  return {
    name: prefix === "" ? name : `${prefix}/${name}`,
    typeflag: block.toString("ascii", 156, 157),
    mode: numeric(block, 100, 8),
    size: numeric(block, 124, 12),
    mtime: numeric(block, 136, 12),
    linkname: cString(block, 157, 100),
  };
}

function cString(block: Buffer, offset: number, length: number): string {
  const end = block.indexOf(0, offset);
  return block.toString("utf8", offset, end === -1 || end > offset + length ? offset + length : end);
}

/** Octal, or GNU base-256 (high bit set) for values that do not fit. */
function numeric(block: Buffer, offset: number, length: number): number {
  const first = block[offset] ?? 0;
  if (first & 0x80) {
    let value = first & 0x7f;
    for (let i = 1; i < length; i++) value = value * 256 + (block[offset + i] ?? 0);
    return value;
  }
  const text = block
    .toString("ascii", offset, offset + length)
    .replace(/[\0 ]+$/, "")
    .trim();
  return text === "" ? 0 : Number.parseInt(text, 8);
}

export function padding(size: number): Buffer {
  const rest = size % BLOCK;
  return Buffer.alloc(rest === 0 ? 0 : BLOCK - rest);
}

function isAscii(text: string): boolean {
  return /^[\x20-\x7e]*$/.test(text);
}

/** The ustar field of a name carried by a pax record: ASCII, cut to fit, for old readers. */
function asciiStub(name: string): string {
  return name.replace(/[^\x20-\x7e]/g, "_").slice(-100);
}
