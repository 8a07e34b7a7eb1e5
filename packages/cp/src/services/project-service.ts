import { ControlPlaneMessages, type CreateProject, checkName, DenvError, type Project } from "@denv/spec";
import type { z } from "zod";
import { nowIso } from "../ids.js";
import type { ProjectRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { assertScope, canSee, NotFound, type Principal, requireAdmin } from "./access.js";
import { presentProject } from "./present.js";
import type { VersionService } from "./version-service.js";

export class ProjectService {
  constructor(
    private readonly store: Store,
    private readonly versions: VersionService,
  ) {}

  async create(p: Principal, req: z.output<typeof CreateProject>): Promise<Project> {
    requireAdmin(p);
    checkName("project", req.name);
    if (await this.store.getProject(req.name)) throw new DenvError("conflict", `project ${req.name} exists`);
    const record: ProjectRecord = {
      name: req.name,
      kind: req.kind,
      repo: req.repo || undefined,
      composePath: req.compose_path,
      createdAt: nowIso(),
    };
    await this.store.createProject(record);
    return presentProject(record);
  }

  /** The project, if the principal may see it; the same 404 otherwise. */
  async require(p: Principal, name: string): Promise<ProjectRecord> {
    assertScope(p, name, () => NotFound.project(name));
    const project = await this.store.getProject(name);
    if (!project) throw NotFound.project(name);
    return project;
  }

  async get(p: Principal, name: string): Promise<Project> {
    return presentProject(await this.require(p, name));
  }

  async list(p: Principal): Promise<Project[]> {
    return (await this.store.listProjects()).filter((x) => canSee(p, x.name)).map(presentProject);
  }

  async delete(p: Principal, name: string): Promise<void> {
    requireAdmin(p);
    await this.require(p, name);
    // A pool's warm forks do not hold the project back: set its pool to 0 and they go.
    const envs = await this.store.listEnvironments({ project: name, pool: false });
    if (envs.length > 0) {
      throw new DenvError("conflict", ControlPlaneMessages.projectHasEnvironments(name, envs.length));
    }
    await this.versions.removeAll(name);
    await this.store.deleteProject(name);
  }
}
