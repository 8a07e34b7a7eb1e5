export * from "./labels.js";
export * from "./errors.js";
export * from "./messages.js";
export * from "./plan.js";
export * from "./exec.js";
export * from "./compose/index.js";
