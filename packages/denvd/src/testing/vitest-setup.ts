import { afterAll } from "vitest";
import { removeWrittenProjects } from "./written-projects.js";

// Loaded before every test file (vitest.config.ts): what writeProject made goes with the file.
afterAll(removeWrittenProjects);
