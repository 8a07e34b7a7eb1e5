import { DenvError } from "@denv/spec";
import type { Role } from "../store/records.js";

/** Who is calling: an API token's identity. */
export interface Principal {
  tokenId: string;
  name: string;
  role: Role;
  /** Set for a token scoped to one project. */
  project?: string;
}

/**
 * "Not found" messages, shared by real absence and by a scoped token asking about another
 * project: both answer the same 404 with the same text, so a token cannot learn which other
 * projects (or their environments, deployments, versions) exist.
 */
export const NotFound = {
  project: (name: string) => new DenvError("not_found", `project ${name} not found`),
  environment: (id: string) => new DenvError("not_found", `environment ${id} not found`),
  deployment: (id: string) => new DenvError("not_found", `deployment ${id} not found`),
  version: (id: string) => new DenvError("not_found", `version ${id} not found`),
  token: (id: string) => new DenvError("not_found", `token ${id} not found`),
  target: (name: string) => new DenvError("not_found", `target ${name} not found`),
  sandbox: (id: string) => new DenvError("not_found", `sandbox ${id} not found`),
  host: (id: string) => new DenvError("not_found", `host ${id} not found`),
  joinToken: (id: string) => new DenvError("not_found", `join token ${id} not found`),
};

export function requireAdmin(p: Principal): void {
  if (p.role !== "admin") throw new DenvError("forbidden", "this route needs an admin token");
}

export function canSee(p: Principal, project: string): boolean {
  return p.project === undefined || p.project === project;
}

/**
 * Throws the resource's own 404 when the principal may not see `project`. The error is made only
 * then: an Error captures a stack, and every read of a resource asks this.
 */
export function assertScope(p: Principal, project: string, notFound: () => DenvError): void {
  if (!canSee(p, project)) throw notFound();
}
