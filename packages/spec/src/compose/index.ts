export type { ComposeContext } from "./compose-context.js";
export { parseEnvFile } from "./env-file.js";
export { type ValidateResult, validateCompose } from "./validate-compose.js";
