import { describe, expect, it } from "vitest";
import { accept, service } from "./compose-fixture.js";

describe("image tags", () => {
  it("derives image tags for built services and the verifier", () => {
    const plan = accept(
      `
name: My_Proj
services:
  Main.Svc: {build: .}
x-denv:
  verifier: {build: ./grader, command: [python, /tests/grade.py]}
`.replace("name: My_Proj\n", ""),
      { files: { Dockerfile: "", "grader/Dockerfile": "" }, projectName: "My Proj!" },
    );
    expect(plan.name).toBe("myproj");
    expect(service(plan, "Main.Svc").image).toBe("denv-local/myproj-main.svc:latest");
    expect(plan.verifier?.image).toBe("denv-local/myproj-verifier:latest");
  });

  it("derives unique, valid image tags", () => {
    const plan = accept(
      "services:\n  main: {build: .}\n  Main: {build: .}\n  'a__b--c..d': {build: .}\n  taken: {image: 'denv-local/demo-x:latest'}\n  x: {build: .}\n",
      { files: { Dockerfile: "" } },
    );
    expect(plan.services.map((s) => s.image)).toEqual([
      "denv-local/demo-main:latest",
      "denv-local/demo-main-2:latest",
      "denv-local/demo-a__b--c-d:latest",
      "denv-local/demo-x:latest",
      "denv-local/demo-x-2:latest",
    ]);
  });
});
