/**
 * How the Docker Engine reads a `user[:group]` spelling. The user part is a uid when Go's
 * `strconv.Atoi` takes it (so `0`, `00`, `+0` and `-0` are all uid 0), else a name looked up in
 * the container's passwd. Root is decided on the uid that comes out, never on the spelling.
 */

/** uids the engine accepts (runc refuses anything outside 0..2^31-1). */
const MAX_ID = 2 ** 31 - 1;

export interface UserSpec {
  /** The user part as written. */
  user: string;
  /** The group part as written, when there is one. */
  group: string | undefined;
  /** The uid when the user part is numeric (in any spelling the engine accepts); else undefined. */
  uid: number | undefined;
}

/** A numeric id as the engine parses it, or undefined for a name (or a number it refuses). */
export function numericId(part: string): number | undefined {
  if (!/^[+-]?\d+$/.test(part)) return undefined;
  const n = Number(part);
  if (!Number.isSafeInteger(n) || n < 0 || n > MAX_ID) return Object.is(n, -0) ? 0 : undefined;
  return n;
}

export function parseUser(spec: string): UserSpec {
  const colon = spec.indexOf(":");
  const user = colon < 0 ? spec : spec.slice(0, colon);
  const group = colon < 0 ? undefined : spec.slice(colon + 1);
  return { user, group, uid: numericId(user) };
}

/**
 * Root without a look at passwd: the name `root` or uid 0 in any spelling. A name can still map
 * to uid 0 in a container's passwd; the runtime checks that (see denvd's principals).
 */
export function isRootUser(spec: string): boolean {
  const { user, uid } = parseUser(spec);
  return uid === 0 || user === "root";
}

/** Whether two spellings name the same user without a passwd (same uid, or the same name). */
export function sameUser(a: string, b: string): boolean {
  const pa = parseUser(a);
  const pb = parseUser(b);
  return pa.uid !== undefined || pb.uid !== undefined ? pa.uid === pb.uid : pa.user === pb.user;
}
