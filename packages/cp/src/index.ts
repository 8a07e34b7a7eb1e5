export { CpConfig, type CpConfigInput, parseConfig } from "./config.js";
export { type ControlPlane, type ControlPlaneOptions, startControlPlane } from "./control-plane.js";
export type { Log, LogLevel } from "./log.js";
