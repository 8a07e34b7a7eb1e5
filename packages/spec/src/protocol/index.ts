export * from "./commands.js";
export * from "./frames.js";
