/**
 * What the runtime's verbs run, in one module that Runtime (runtime.ts) imports at its first
 * verb rather than at open: an idle host holds none of it (README, "Memory").
 */
export { buildImages } from "../build/build-images.js";
export { openMirrorEgress } from "../build/mirror-egress.js";
export { probeEgress } from "../probe.js";
export { deployPlan, loadPlan } from "../project-loader.js";
export { discardTransfer } from "../transfer/staging.js";
export { stopAgent } from "./agent-processes.js";
export { decideDiskCaps } from "./disk-caps.js";
export { tarDirectory } from "./ensure-image.js";
export { execInEnvironment } from "./environment-exec.js";
export { getFiles, putFiles, readFile, writeFile } from "./environment-files.js";
export { deleteVersion, removeEnvironment, startEnvironment, stopEnvironment } from "./lifecycle.js";
export { materialize, sandboxRuntime } from "./materialize.js";
export { snapshotEnvironment } from "./snapshot-environment.js";
export { undoable } from "./undo.js";
export { verifyEnvironment } from "./verify-environment.js";
