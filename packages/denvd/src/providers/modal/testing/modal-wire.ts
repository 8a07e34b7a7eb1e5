/**
 * A small protobuf codec for the Modal double: the `modal` SDK bundles its generated messages
 * without exporting them, so the double declares the fields it reads and answers itself (numbers
 * from Modal's `api.proto` and `task_command_router.proto`) and skips every other field.
 */
export type Scalar =
  | "string"
  | "bytes"
  | "bool"
  | "int32"
  | "uint32"
  | "int64"
  | "uint64"
  | "double"
  | "float";
/** A field: its number, its type (a scalar, a nested schema or a string map), repeated or not. */
export type Field = [number, Scalar | Schema | "map", ("repeated" | undefined)?];
export interface Schema {
  [name: string]: Field;
}
// biome-ignore lint/suspicious/noExplicitAny: a decoded message is as loose as its schema
export type Msg = Record<string, any>;

const WIRE = { varint: 0, i64: 1, len: 2, i32: 5 } as const;

function wireType(t: Field[1]): number {
  if (t === "double") return WIRE.i64;
  if (t === "float") return WIRE.i32;
  if (typeof t === "object" || t === "map" || t === "string" || t === "bytes") return WIRE.len;
  return WIRE.varint;
}

function varint(out: number[], v: bigint): void {
  let n = BigInt.asUintN(64, v);
  while (n > 0x7fn) {
    out.push(Number(n & 0x7fn) | 0x80);
    n >>= 7n;
  }
  out.push(Number(n));
}

function lengthDelimited(out: number[], no: number, bytes: Uint8Array): void {
  varint(out, BigInt((no << 3) | WIRE.len));
  varint(out, BigInt(bytes.length));
  for (const b of bytes) out.push(b);
}

function encodeValue(out: number[], no: number, t: Field[1], v: unknown): void {
  if (typeof t === "object") lengthDelimited(out, no, encode(t, v as Msg));
  else if (t === "string") lengthDelimited(out, no, Buffer.from(String(v)));
  else if (t === "bytes") lengthDelimited(out, no, v as Uint8Array);
  else if (t === "double" || t === "float") {
    varint(out, BigInt((no << 3) | wireType(t)));
    const b = Buffer.alloc(t === "double" ? 8 : 4);
    if (t === "double") b.writeDoubleLE(Number(v));
    else b.writeFloatLE(Number(v));
    for (const x of b) out.push(x);
  } else {
    varint(out, BigInt((no << 3) | wireType(t)));
    varint(out, t === "bool" ? (v ? 1n : 0n) : BigInt(Math.trunc(Number(v))));
  }
}

export function encode(schema: Schema, msg: Msg): Uint8Array {
  const out: number[] = [];
  for (const [name, [no, t, rep]] of Object.entries(schema)) {
    const v = msg[name];
    if (v === undefined || v === null) continue;
    if (t === "map") {
      for (const [k, val] of Object.entries(v as Record<string, string>))
        lengthDelimited(out, no, encode(MAP_ENTRY, { key: k, value: val }));
    } else if (rep) for (const item of v as unknown[]) encodeValue(out, no, t, item);
    else encodeValue(out, no, t, v);
  }
  return Uint8Array.from(out);
}

/** Reads a message; fields the schema does not name are skipped, absent ones take proto3 defaults. */
export function decode(schema: Schema, bytes: Uint8Array): Msg {
  const byNo = new Map(Object.entries(schema).map(([name, f]) => [f[0], [name, f] as const]));
  const msg: Msg = {};
  for (const [name, [, t, rep]] of Object.entries(schema))
    msg[name] = rep ? [] : t === "map" ? {} : typeof t === "object" ? undefined : defaultOf(t);
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
  let pos = 0;
  const readVarint = (): bigint => {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[pos++];
      if (b === undefined) throw new Error("truncated protobuf varint");
      v |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return v;
      shift += 7n;
    }
  };
  while (pos < buf.length) {
    const key = Number(readVarint());
    const wt = key & 7;
    const hit = byNo.get(key >>> 3);
    let raw: bigint | Buffer;
    if (wt === WIRE.varint) raw = readVarint();
    else if (wt === WIRE.i64 || wt === WIRE.i32) {
      const n = wt === WIRE.i64 ? 8 : 4;
      raw = buf.subarray(pos, pos + n);
      pos += n;
    } else if (wt === WIRE.len) {
      const n = Number(readVarint());
      raw = buf.subarray(pos, pos + n);
      pos += n;
    } else throw new Error(`unsupported protobuf wire type ${wt}`);
    if (!hit) continue;
    const [name, [, t, rep]] = hit;
    if (t === "map") {
      const e = decode(MAP_ENTRY, raw as Buffer);
      msg[name][e.key] = e.value;
      continue;
    }
    const v = decodeValue(t, raw);
    if (rep) msg[name].push(v);
    else msg[name] = v;
  }
  return msg;
}

function defaultOf(t: Scalar): unknown {
  if (t === "string") return "";
  if (t === "bytes") return new Uint8Array();
  if (t === "bool") return false;
  return 0;
}

function decodeValue(t: Scalar | Schema, raw: bigint | Buffer): unknown {
  if (typeof t === "object") return decode(t, raw as Buffer);
  if (t === "string") return (raw as Buffer).toString("utf8");
  if (t === "bytes") return Uint8Array.from(raw as Buffer);
  if (t === "double") return (raw as Buffer).readDoubleLE(0);
  if (t === "float") return (raw as Buffer).readFloatLE(0);
  if (t === "bool") return raw !== 0n;
  if (t === "int32") return Number(BigInt.asIntN(32, raw as bigint));
  return Number(raw as bigint);
}

const MAP_ENTRY: Schema = { key: [1, "string"], value: [2, "string"] };
