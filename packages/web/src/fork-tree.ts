import type { Deployment, Environment, Version } from "@denv/spec";

/**
 * The fork tree of a project: an environment holds the versions snapshotted from it, a version
 * the environments forked from it. Environments nobody forked (a deployed `alpha`) are the
 * roots. Each node appears once: an edge back to a node already placed (alpha rolled back to its
 * own v1) is kept as a reference, so a cycle cannot loop.
 */
export type TreeNode =
  | { kind: "environment"; env: Environment; forkedBy?: Deployment; children: TreeNode[] }
  | { kind: "version"; version: Version; children: TreeNode[] }
  | { kind: "ref"; id: string; what: "environment" | "version" };

export function forkTree(envs: Environment[], versions: Version[], deployments: Deployment[]): TreeNode[] {
  const byCreated = <T extends { created_at: string }>(a: T, b: T) =>
    a.created_at.localeCompare(b.created_at);
  const envList = [...envs].sort(byCreated);
  const versionList = [...versions].sort(byCreated);
  const seen = new Set<string>();
  // The deployment that made a fork: the first fork (or sandbox) deployment of that environment.
  const forkOf = new Map<string, Deployment>();
  for (const d of [...deployments].sort(byCreated))
    if (d.kind === "fork" && !forkOf.has(d.environment)) forkOf.set(d.environment, d);

  const envNode = (env: Environment): TreeNode => {
    const key = `e:${env.id}`;
    if (seen.has(key)) return { kind: "ref", id: env.id, what: "environment" };
    seen.add(key);
    const children = versionList.filter((v) => v.source_environment === env.id).map(versionNode);
    const forkedBy = forkOf.get(env.id);
    return { kind: "environment", env, ...(forkedBy === undefined ? {} : { forkedBy }), children };
  };
  const versionNode = (version: Version): TreeNode => {
    const key = `v:${version.id}`;
    if (seen.has(key)) return { kind: "ref", id: version.id, what: "version" };
    seen.add(key);
    const children = envList.filter((e) => e.parent_version === version.id).map(envNode);
    return { kind: "version", version, children };
  };

  const roots: TreeNode[] = envList.filter((e) => e.parent_version === undefined).map(envNode);
  // What no root reaches: versions whose environment is gone, environments in a cycle.
  for (const v of versionList)
    if (!seen.has(`v:${v.id}`) && v.parent_version === undefined) roots.push(versionNode(v));
  for (const v of versionList) if (!seen.has(`v:${v.id}`)) roots.push(versionNode(v));
  for (const e of envList) if (!seen.has(`e:${e.id}`)) roots.push(envNode(e));
  return roots;
}
