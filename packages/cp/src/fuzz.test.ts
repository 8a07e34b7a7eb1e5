import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ErrorResponse } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deployed, startTestCp, type TestCp } from "./testing/harness.js";

/**
 * Schemathesis (python/.venv, installed by scripts/setup-python) fuzzes every route of
 * /v1/openapi.json against a real control plane on 127.0.0.1 (SQLite, a fake host, a deployed
 * project) with the admin token: no answer may be a 5xx, and every answer must match what the
 * document declares for it, so each 4xx is the API's error shape `{error: {code, message}}`.
 * Bounded in examples per route and in time. A missing venv or schemathesis fails the test.
 */

const repo = fileURLToPath(new URL("../../../", import.meta.url));
const schemathesis = join(repo, "python/.venv/bin/schemathesis");
const hooks = fileURLToPath(new URL("./testing/schemathesis_hooks.py", import.meta.url));
const config = fileURLToPath(new URL("./testing/schemathesis.toml", import.meta.url));

/** Seconds of fuzzing; examples per route. */
const MAX_TIME_S = 45;
const MAX_EXAMPLES = 30;

interface Run {
  code: number;
  output: string;
}

function run(cmd: string, args: string[], cwd: string, env: Record<string, string>): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd,
      env: { ...process.env, ...env, NO_COLOR: "1", SCHEMATHESIS_HOOKS: hooks },
    });
    let output = "";
    child.stdout.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.on("error", reject);
    child.on("close", (code) => resolve({ code: code ?? 1, output }));
  });
}

interface Exchange {
  status: number;
  url: string;
  method: string;
  body: string;
}

/** Every response of the run, from its HAR report. */
async function exchanges(file: string): Promise<Exchange[]> {
  const har = JSON.parse(await readFile(file, "utf8")) as {
    log: {
      entries: Array<{
        request: { method: string; url: string };
        response: { status: number; content?: { text?: string; encoding?: string } };
      }>;
    };
  };
  return har.log.entries.map((e) => {
    const c = e.response.content;
    const text = c?.text ?? "";
    return {
      status: e.response.status,
      url: e.request.url,
      method: e.request.method,
      body: c?.encoding === "base64" ? Buffer.from(text, "base64").toString("utf8") : text,
    };
  });
}

describe("API fuzzing (schemathesis)", () => {
  let t: TestCp;
  let dir: string;
  let token: { id: string; secret: string };
  beforeAll(async () => {
    t = await startTestCp();
    await t.host({ name: "h1" });
    await deployed(t, "shop");
    const fuzzer = (await t.admin.post("/v1/tokens", { name: "fuzzer", role: "admin" })).body;
    token = { id: fuzzer.id, secret: fuzzer.token };
    dir = await mkdtemp(join(tmpdir(), "denv-fuzz-"));
  });
  afterAll(async () => {
    await t?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it(
    "finds no 5xx and no answer outside the document, every 4xx in the error shape",
    async () => {
      expect(existsSync(schemathesis), `${schemathesis} is missing: run scripts/setup-python`).toBe(true);
      const har = join(dir, "run.har");
      const r = await run(
        schemathesis,
        [
          "--config-file",
          config,
          "run",
          `${t.url}/v1/openapi.json`,
          "--header",
          `Authorization: Bearer ${token.secret}`,
          "--checks",
          "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
          "--max-examples",
          String(MAX_EXAMPLES),
          "--max-time",
          String(MAX_TIME_S),
          "--seed",
          "8",
          // One worker: hypothesis parses lambda sources with ast, which is not thread-safe on
          // CPython 3.11 ("AST constructor recursion depth mismatch").
          "--workers",
          "1",
          "--request-timeout",
          "10",
          "--generation-database",
          "none",
          "--report",
          "har",
          "--report-har-path",
          har,
          "--no-color",
        ],
        dir,
        { DENV_FUZZ_TOKEN_ID: token.id },
      );
      const all = await exchanges(har).catch(() => [] as Exchange[]);
      const fiveXx = all.filter((e) => e.status >= 500);
      const malformed = all.filter((e) => {
        if (e.status < 400 || e.status >= 500) return false;
        try {
          return !ErrorResponse.safeParse(JSON.parse(e.body)).success;
        } catch {
          return true;
        }
      });
      const show = (list: Exchange[]) =>
        list.slice(0, 10).map((e) => `${e.method} ${e.url} -> ${e.status} ${e.body.slice(0, 200)}`);
      expect(r.code, r.output.slice(-6000)).toBe(0);
      expect(show(fiveXx)).toEqual([]);
      expect(show(malformed)).toEqual([]);
      // It did fuzz: many requests, and 4xx among them (bad input was tried).
      expect(all.length).toBeGreaterThan(500);
      expect(all.some((e) => e.status >= 400 && e.status < 500)).toBe(true);
      const statuses: Record<number, number> = {};
      for (const e of all) statuses[e.status] = (statuses[e.status] ?? 0) + 1;
      console.log(`schemathesis: ${all.length} requests, by status ${JSON.stringify(statuses)}`);
    },
    (MAX_TIME_S + 60) * 1000,
  );
});
