import { setImmediate as yieldToLoop } from "node:timers/promises";
import { type SpecialFileReason, SpecialFileReasons } from "@denv/spec";

/** Linux gives up on a path after this many symlinks (MAXSYMLINKS); so do we. */
const MAX_SYMLINK_HOPS = 40;
/** Bounds the work one link costs, so a crafted chain cannot make the guard slow. */
const MAX_RESOLVE_STEPS = 1024;
/**
 * Symlink targets are kept until the archive ends; this bounds the memory they take (a
 * hundred thousand links of 300 bytes each) independently of the caller's limits.
 */
const MAX_TARGET_BYTES = 32 * 1024 * 1024;
/** The final pass yields to the event loop this often, so heartbeats keep flowing. */
const LINKS_PER_TURN = 1000;

type Kind = "directory" | "file" | "symlink";

interface PathNode {
  readonly parent: PathNode | undefined;
  /** undefined: the path has no entry of its own; a deeper entry implies it as a directory. */
  kind: Kind | undefined;
  children: Map<string, PathNode> | undefined;
  /** A symlink's target, relative (absolute targets never get into the tree). */
  target: string | undefined;
}

/**
 * Where a path lands: `below` counts components under `node` that the archive does not hold;
 * nothing in the archive can redirect those, so they resolve lexically.
 */
interface Position {
  node: PathNode;
  below: number;
}

interface Budget {
  hops: number;
  steps: number;
}

/**
 * The tree an archive makes when extracted, built entry by entry, so that links can be
 * resolved the way the kernel will resolve them once the archive is on disk: through the
 * symlinks the archive itself plants, not just lexically.
 *
 * Two invariants keep that resolution honest: nothing is written through or onto a symlink
 * (an extractor that follows links would write outside), and a symlink never replaces a
 * directory that already has entries under it (extractors disagree on what happens then).
 * Components given to this class are already normalised: no "", "." or "..".
 */
export class ArchiveTree {
  private readonly root: PathNode = {
    parent: undefined,
    kind: "directory",
    children: undefined,
    target: undefined,
  };
  private readonly symlinks: Array<{ node: PathNode; name: string }> = [];
  private paths = 0;
  private targetBytes = 0;

  /** @param maxPaths bounds the memory the tree takes, implied parents included. */
  constructor(private readonly maxPaths: number) {}

  addDirectory(path: readonly string[]): SpecialFileReason | undefined {
    const node = this.place(path);
    if (!isNode(node)) return node;
    node.kind = "directory";
    return undefined;
  }

  addFile(path: readonly string[]): SpecialFileReason | undefined {
    const node = this.place(path);
    if (!isNode(node)) return node;
    node.kind = "file";
    return undefined;
  }

  /**
   * A hard link must name a regular file placed earlier: a link to a symlink would become a
   * symlink resolved from a different directory, and a link to anything not in the archive
   * reaches whatever the destination happens to hold.
   */
  addHardLink(path: readonly string[], target: readonly string[]): SpecialFileReason | undefined {
    if (this.lookup(target)?.kind !== "file") return SpecialFileReasons.hardlinkEscapes;
    return this.addFile(path);
  }

  /**
   * `target` is relative; `name` is the entry's name as the archive gives it, kept to name the
   * link if it escapes later.
   */
  addSymlink(path: readonly string[], target: string, name: string): SpecialFileReason | undefined {
    const node = this.place(path);
    if (!isNode(node)) return node;
    const replacesTree = node.children !== undefined && node.children.size > 0;
    if (replacesTree || node.parent === undefined || this.escapes(node.parent, target)) {
      return SpecialFileReasons.symlinkEscapes;
    }
    this.targetBytes += Buffer.byteLength(target);
    if (this.targetBytes > MAX_TARGET_BYTES) return SpecialFileReasons.tooLarge;
    node.kind = "symlink";
    node.target = target;
    this.symlinks.push({ node, name });
    return undefined;
  }

  /**
   * A symlink that stays inside when it is placed can escape once a later entry turns one of
   * the paths its target walks through into another symlink; only the whole tree tells.
   * Returns the name of the first such link in archive order.
   */
  async firstEscapingSymlink(): Promise<string | undefined> {
    for (const [index, { node, name }] of this.symlinks.entries()) {
      if (index > 0 && index % LINKS_PER_TURN === 0) await yieldToLoop();
      if (node.parent === undefined || node.target === undefined || this.escapes(node.parent, node.target)) {
        return name;
      }
    }
    return undefined;
  }

  private escapes(from: PathNode, target: string): boolean {
    const start = { node: from, below: 0 };
    return this.resolve(start, components(target), false, { hops: 0, steps: 0 }) === undefined;
  }

  /**
   * Walks `path` from `start` as the kernel would, following the archive's own symlinks where
   * they are used as directories. A symlink in last place is not followed: it is checked on
   * its own, from its own directory. undefined means the walk climbed above the root, or
   * could not be shown to stay inside (a loop, or a chain too long to follow).
   */
  private resolve(
    start: Position,
    path: readonly string[],
    followLast: boolean,
    budget: Budget,
  ): Position | undefined {
    let at = start;
    for (const [index, name] of path.entries()) {
      budget.steps += 1;
      if (budget.steps > MAX_RESOLVE_STEPS) return undefined;
      if (name === "..") {
        if (at.below > 0) at = { node: at.node, below: at.below - 1 };
        else if (at.node.parent !== undefined) at = { node: at.node.parent, below: 0 };
        else return undefined;
        continue;
      }
      if (at.below > 0) {
        at = { node: at.node, below: at.below + 1 };
        continue;
      }
      const child = at.node.children?.get(name);
      if (child === undefined) {
        at = { node: at.node, below: 1 };
        continue;
      }
      const last = index === path.length - 1;
      if (child.kind === "symlink" && (followLast || !last)) {
        budget.hops += 1;
        if (budget.hops > MAX_SYMLINK_HOPS || child.parent === undefined || child.target === undefined) {
          return undefined;
        }
        const landed = this.resolve({ node: child.parent, below: 0 }, components(child.target), true, budget);
        if (landed === undefined) return undefined;
        at = landed;
        continue;
      }
      at = { node: child, below: 0 };
    }
    return at;
  }

  private lookup(path: readonly string[]): PathNode | undefined {
    let node: PathNode | undefined = this.root;
    for (const name of path) {
      if (node === undefined || node.kind === "symlink") return undefined;
      node = node.children?.get(name);
    }
    return node;
  }

  /** The node for an entry's path, creating implied parents; refuses paths through or onto a symlink. */
  private place(path: readonly string[]): PathNode | SpecialFileReason {
    let node = this.root;
    for (const name of path) {
      if (node.kind === "symlink") return SpecialFileReasons.symlinkEscapes;
      let child = node.children?.get(name);
      if (child === undefined) {
        this.paths += 1;
        if (this.paths > this.maxPaths) return SpecialFileReasons.tooLarge;
        child = { parent: node, kind: undefined, children: undefined, target: undefined };
        node.children ??= new Map();
        node.children.set(name, child);
      }
      node = child;
    }
    if (node.kind === "symlink") return SpecialFileReasons.symlinkEscapes;
    return node;
  }
}

/** A path's components; "" and "." name nothing, ".." is left for the caller to judge. */
export function components(path: string): string[] {
  return path.split("/").filter((part) => part !== "" && part !== ".");
}

function isNode(placed: PathNode | SpecialFileReason): placed is PathNode {
  return typeof placed !== "string";
}
