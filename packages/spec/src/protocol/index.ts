export * from "./commands.js";
export * from "./evidence.js";
export * from "./frames.js";
export * from "./results.js";
export * from "./transfer.js";
