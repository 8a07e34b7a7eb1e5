/**
 * Tags denv gives images it builds from a `build:` without `image:`:
 * `denv-local/<project>-<service>:latest`, lowercase, valid Docker reference characters,
 * unique within the file.
 */
export class ImageTags {
  private readonly taken = new Set<string>();

  constructor(private readonly project: string) {}

  /** Records an image the file names itself, so a derived tag never collides with it. */
  reserve(image: string): void {
    this.taken.add(image);
  }

  derive(name: string): string {
    const base = `denv-local/${pathComponent(this.project)}-${pathComponent(name)}`;
    let tag = `${base}:latest`;
    for (let n = 2; this.taken.has(tag); n += 1) tag = `${base}-${n}:latest`;
    this.taken.add(tag);
    return tag;
  }
}

/** A Docker repository path component: [a-z0-9]+ joined by ".", "_", "__" or runs of "-". */
function pathComponent(text: string): string {
  const cleaned = text
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, "-")
    .replace(/[._-]{2,}/g, (run) => (run === "__" || /^-+$/.test(run) ? run : "-"))
    .replace(/^[._-]+|[._-]+$/g, "");
  return cleaned === "" ? "x" : cleaned;
}
