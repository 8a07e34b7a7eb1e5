import type { Route } from "../http/route.js";
import type { Services } from "../services/container.js";
import { deploymentRoutes } from "./deployments.js";
import { environmentRoutes } from "./environments.js";
import { episodeRoutes } from "./episodes.js";
import { execRoutes } from "./exec.js";
import { fileRoutes } from "./files.js";
import { githubRoutes } from "./github.js";
import { hostRoutes } from "./hosts.js";
import { poolRoutes } from "./pools.js";
import { projectRoutes } from "./projects.js";
import { sandboxRoutes } from "./sandboxes.js";
import { systemRoutes } from "./system.js";
import { targetRoutes } from "./targets.js";
import { tokenRoutes } from "./tokens.js";
import { versionRoutes } from "./versions.js";

/** The whole route table, in the order docs/reference/api.md lists it. */
export function allRoutes(s: Services, openapi: () => unknown): Route[] {
  return [
    ...systemRoutes(s, openapi),
    ...tokenRoutes(s),
    ...projectRoutes(s),
    ...deploymentRoutes(s),
    ...githubRoutes(s),
    ...environmentRoutes(s),
    ...execRoutes(s),
    ...fileRoutes(s),
    ...episodeRoutes(s),
    ...versionRoutes(s),
    ...sandboxRoutes(s),
    ...poolRoutes(s),
    ...targetRoutes(s),
    ...hostRoutes(s),
  ];
}
