import { describe, expect, it } from "vitest";
import { ComposeReasons } from "../messages.js";
import { projectPath } from "./project-path.js";

const R = ComposeReasons;

describe("project paths", () => {
  it("keeps paths inside the project", () => {
    expect(projectPath("./a/b/../c/")).toEqual({ ok: true, path: "a/c" });
    expect(projectPath(".")).toEqual({ ok: true, path: "." });
    expect(projectPath("../Dockerfile", "app")).toEqual({ ok: true, path: "Dockerfile" });
    expect(projectPath("a/../../b")).toEqual({ ok: false, reason: R.climbsOut("a/../../b") });
    expect(projectPath("..\\..\\etc")).toEqual({ ok: false, reason: R.climbsOut("..\\..\\etc") });
    expect(projectPath("~/x")).toEqual({ ok: false, reason: R.absolutePath("~/x") });
  });
});
