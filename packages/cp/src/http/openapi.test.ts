import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestCp, type TestCp } from "../testing/harness.js";

type Json = Record<string, unknown>;

/** Every $ref in `node`, with the path to it. */
function refs(node: unknown, path = "#"): Array<[string, string]> {
  if (Array.isArray(node)) return node.flatMap((n, i) => refs(n, `${path}/${i}`));
  if (node && typeof node === "object") {
    return Object.entries(node as Json).flatMap(([k, v]) =>
      k === "$ref" && typeof v === "string" ? [[path, v] as [string, string]] : refs(v, `${path}/${k}`),
    );
  }
  return [];
}

function resolve(doc: Json, ref: string): unknown {
  return ref
    .replace(/^#\//, "")
    .split("/")
    .reduce<unknown>((n, k) => (n && typeof n === "object" ? (n as Json)[k] : undefined), doc);
}

describe("/v1/openapi.json", () => {
  let t: TestCp;
  let doc: Json;
  beforeAll(async () => {
    t = await startTestCp();
    doc = (await t.anon.get("/v1/openapi.json")).body;
  });
  afterAll(() => t.close());

  it("is an OpenAPI 3.1 document whose every $ref resolves", () => {
    expect(doc.openapi).toBe("3.1.0");
    expect((doc.servers as Json[])[0]?.url).toBe(t.url);
    const all = refs(doc);
    expect(all.length).toBeGreaterThan(50);
    const broken = all.filter(([, ref]) => resolve(doc, ref) === undefined);
    expect(broken).toEqual([]);
  });

  it("lists every route of contracts/routes.md with its parameters, bodies and responses", () => {
    const paths = doc.paths as Record<string, Record<string, Json>>;
    const contract = [
      "GET /healthz",
      "GET /metrics",
      "GET /v1/openapi.json",
      "GET /v1/whoami",
      "POST /v1/tokens",
      "GET /v1/tokens",
      "DELETE /v1/tokens/{id}",
      "POST /v1/projects",
      "GET /v1/projects",
      "GET /v1/projects/{project}",
      "DELETE /v1/projects/{project}",
      "POST /v1/projects/{project}/deploy",
      "GET /v1/projects/{project}/deployments",
      "GET /v1/deployments/{id}",
      "GET /v1/deployments/{id}/log",
      "GET /v1/projects/{project}/environments",
      "GET /v1/environments/{project}/{env}",
      "POST /v1/environments/{project}/{env}/fork",
      "POST /v1/environments/{project}/{env}/snapshot",
      "POST /v1/environments/{project}/{env}/rollback",
      "POST /v1/environments/{project}/{env}/stop",
      "POST /v1/environments/{project}/{env}/start",
      "DELETE /v1/environments/{project}/{env}",
      "POST /v1/environments/{project}/{env}/verify",
      "POST /v1/environments/{project}/{env}/exec",
      "GET /v1/environments/{project}/{env}/exec/stream",
      "PUT /v1/environments/{project}/{env}/files",
      "GET /v1/environments/{project}/{env}/files",
      "GET /v1/environments/{project}/{env}/episode",
      "POST /v1/environments/{project}/{env}/replay",
      "GET /v1/environments/{project}/{env}/replays",
      "GET /v1/environments/{project}/{env}/connect",
      "GET /v1/environments/{project}/{env}/logs",
      "GET /v1/environments/{project}/{env}/probe",
      "GET /v1/projects/{project}/versions",
      "GET /v1/versions/{project}/{number}",
      "DELETE /v1/versions/{project}/{number}",
      "POST /v1/sandboxes",
      "GET /v1/sandboxes",
      "DELETE /v1/sandboxes/{project}/{env}",
      "GET /v1/pools",
      "GET /v1/projects/{project}/pool",
      "PUT /v1/projects/{project}/pool",
      "POST /v1/projects/{project}/github",
      "GET /v1/projects/{project}/github",
      "POST /v1/github/webhook",
      "POST /v1/targets",
      "GET /v1/targets",
      "GET /v1/targets/kinds",
      "GET /v1/targets/{target}",
      "DELETE /v1/targets/{target}",
      "GET /v1/targets/{target}/machines",
      "POST /v1/targets/{target}/reconcile",
      "POST /v1/targets/{target}/join-tokens",
      "GET /v1/targets/{target}/join-tokens",
      "DELETE /v1/targets/{target}/join-tokens/{id}",
      "GET /v1/install/install.sh",
      "GET /v1/install/denvd.mjs",
      "POST /v1/hosts/join",
      "GET /v1/hosts",
      "POST /v1/hosts/{id}/drain",
      "DELETE /v1/hosts/{id}",
      "GET /v1/hosts/stream",
    ];
    const served = Object.entries(paths).flatMap(([p, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`),
    );
    expect(served.sort()).toEqual([...contract].sort());
    for (const [p, ops] of Object.entries(paths)) {
      const inPath = [...p.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
      for (const op of Object.values(ops)) {
        const params = (op.parameters as Json[]).filter((x) => x.in === "path").map((x) => x.name);
        expect(params.sort(), p).toEqual(inPath.sort());
        expect(Object.keys(op.responses as Json).length, p).toBeGreaterThanOrEqual(2);
      }
    }
    const deploy = paths["/v1/projects/{project}/deploy"]?.post as Json;
    expect(Object.keys((deploy.requestBody as { content: Json }).content)).toContain("application/x-tar");
    const fork = paths["/v1/environments/{project}/{env}/fork"]?.post as Json;
    expect((fork.responses as Json)["202"]).toMatchObject({
      content: { "application/json": { schema: { $ref: "#/components/schemas/Deployment" } } },
    });
    expect(paths["/v1/hosts/stream"]?.get).toMatchObject({
      "x-websocket": true,
      security: [{ hostCredential: [] }],
    });
  });

  it("describes request bodies as inputs (defaults optional) and responses as outputs", () => {
    const schemas = (doc.components as { schemas: Record<string, Json> }).schemas;
    expect(schemas.CreateProjectInput?.required).toEqual(["name"]);
    expect(schemas.Project?.required).toEqual(
      expect.arrayContaining(["name", "kind", "compose_path", "created_at"]),
    );
    expect(schemas.ExecRequest).toBeDefined();
    expect((schemas.ProjectList?.properties as Json | undefined)?.projects).toEqual({
      type: "array",
      items: { $ref: "#/components/schemas/Project" },
    });
  });
});
