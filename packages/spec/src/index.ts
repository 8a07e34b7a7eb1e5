export * from "./compose/index.js";
export * from "./errors.js";
export * from "./exec.js";
export * from "./labels.js";
export * from "./messages.js";
export * from "./names.js";
export * from "./plan.js";
export * from "./shell-words.js";
