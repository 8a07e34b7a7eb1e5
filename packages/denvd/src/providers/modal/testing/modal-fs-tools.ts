/**
 * The double's stand-in for `modal-sandbox-fs-tools`, the program Modal puts in every sandbox
 * and that the SDK's `sandbox.filesystem` execs with one JSON command (`{"ReadFile": {"path"}}`
 * …): its output on stdout, and on failure exit 1 with `{"error_kind", "message"}` on stderr,
 * which the SDK turns into its SandboxFilesystem*Error classes. The double runs the command as a
 * POSIX shell script in the container instead, as the exec's user. Served: ReadFile, WriteFile
 * (stdin, renamed into place once complete), Stat, ListFiles, MakeDirectory, Remove; Watch
 * answers NotSupported.
 */
export const FS_TOOLS_PATH = "/__modal/.bin/modal-sandbox-fs-tools";

const PRELUDE = `
fail() { printf '{"error_kind":"%s","message":"%s"}\\n' "$1" "$2" >&2; exit 1; }
json() { printf '%s' "$1" | sed 's/\\\\/\\\\\\\\/g; s/"/\\\\"/g'; }
entry() {
  case "$(stat -c %F -- "$1")" in
    directory) t=directory ;; "symbolic link") t=symlink ;; *) t=file ;;
  esac
  target=null
  [ "$t" = symlink ] && target="\\"$(json "$(readlink -- "$1")")\\""
  printf '{"name":"%s","path":"%s","type":"%s","size":%s,"mode":%s,"permissions":"%s","owner":"%s","group":"%s","modified_time":%s,"symlink_target":%s}' \\
    "$(json "$(basename -- "$1")")" "$(json "$1")" "$t" "$(stat -c %s -- "$1")" "$((0x$(stat -c %f -- "$1")))" \\
    "$(stat -c %A -- "$1" | cut -c2-)" "$(stat -c %U -- "$1")" "$(stat -c %G -- "$1")" "$(stat -c %Y -- "$1")" "$target"
}
exists() { [ -e "$1" ] || [ -L "$1" ] || fail NotFound "No such file or directory"; }
`;

const SCRIPTS: Record<string, string> = {
  ReadFile: `exists "$1"; [ -d "$1" ] && fail IsDirectory "Is a directory"
[ -r "$1" ] || fail PermissionDenied "Permission denied"; exec cat -- "$1"`,
  WriteFile: `[ -d "$1" ] && fail IsDirectory "Is a directory"
mkdir -p -- "$(dirname -- "$1")" 2>/dev/null || fail NotDirectory "Not a directory"
tmp="$1.modal-fs-tools.$$"
cat > "$tmp" 2>/dev/null || { rm -f -- "$tmp"; fail PermissionDenied "Permission denied"; }
mv -f -- "$tmp" "$1"`,
  Stat: `exists "$1"; entry "$1"`,
  ListFiles: `exists "$1"; [ -d "$1" ] || fail NotDirectory "Not a directory"
[ -r "$1" ] || fail PermissionDenied "Permission denied"
sep=""; printf '['
for f in "$1"/* "$1"/.[!.]* "$1"/..?*; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  printf '%s' "$sep"; entry "$f"; sep=","
done
printf ']'`,
  MakeDirectory: `[ -e "$1" ] && fail PathAlreadyExists "File exists"
if [ "$2" = true ]; then mkdir -p -- "$1" 2>/dev/null || fail NotDirectory "Not a directory"
else [ -d "$(dirname -- "$1")" ] || fail NotFound "No such file or directory"; mkdir -- "$1" 2>/dev/null || fail PermissionDenied "Permission denied"; fi`,
  Remove: `exists "$1"
if [ -d "$1" ] && [ ! -L "$1" ]; then
  if [ "$2" = true ]; then rm -rf -- "$1"; else rmdir -- "$1" 2>/dev/null || fail DirectoryNotEmpty "Directory not empty"; fi
else rm -f -- "$1" 2>/dev/null || fail PermissionDenied "Permission denied"; fi`,
};

/** The argv that carries out one fs-tools command in the container. */
export function fsToolsArgv(command: string): string[] {
  const [[op, args]] = Object.entries(JSON.parse(command) as Record<string, Record<string, unknown>>) as [
    [string, Record<string, unknown>],
  ];
  const script = SCRIPTS[op] ?? `fail NotSupported "the Modal double does not serve ${op}"`;
  const flag = String(args.parents ?? args.recursive ?? false);
  return ["sh", "-c", `${PRELUDE}\n${script}`, "modal-sandbox-fs-tools", String(args.path), flag];
}
