import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INITIAL_WINDOW, PROTOCOL_VERSION, Protection, SpecialFileReasons } from "@denv/spec";
import tar from "tar-stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO, startTestHost, type TestHost, tarOf } from "./testing/agent-harness.js";

/** Exec, files and tunnels over data streams, on the quickstart environment (app + Redis). */

const env = "quickstart/alpha";
const sid = () => `s-${randomBytes(4).toString("hex")}`;

async function tarEntries(archive: Buffer): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const extract = tar.extract();
  extract.on("entry", (header, stream, next) => {
    const chunks: Buffer[] = [];
    stream.on("data", (c: unknown) => chunks.push(c as Buffer));
    stream.on("end", () => {
      out[header.name] = Buffer.concat(chunks).toString();
      next();
    });
  });
  const done = new Promise<void>((r) => extract.on("finish", () => r()));
  extract.end(archive);
  await done;
  return out;
}

/** Counts processes in the app service whose command line starts with `prefix`. */
async function count(host: TestHost, prefix: string): Promise<number> {
  const r = await host.rt.exec(env, {
    shell: `for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^${prefix}' || true`,
  });
  return Number(r.stdout.toString().trim());
}

describe("stream commands", () => {
  let host: TestHost;

  beforeAll(async () => {
    host = await startTestHost();
    const id = host.cp.command("env.deploy", {
      project: "quickstart",
      environment: "alpha",
      source_stream: "src",
    });
    await host.cp.write("src", await tarOf(join(REPO, "examples/quickstart"), false), "file");
    const r = await host.cp.result(id, 600_000);
    if (!r.ok) throw new Error(`deploy failed: ${JSON.stringify(r.error)}`);
  });
  afterAll(async () => {
    await host?.[Symbol.asyncDispose]();
  });

  it("streams exec stdin in and output out, and a slow reader slows the process, not memory", async () => {
    const stream = sid();
    const stdin = randomBytes(1024 * 1024);
    const total = 4 * 1024 * 1024;
    // The reader takes 64 KiB every 25 ms (~2.5 MiB/s): far slower than the process writes.
    const reader = host.cp.read(stream, { grantBytes: 64 * 1024, everyMs: 25 });
    const id = host.cp.command("env.exec", {
      environment: env,
      stream,
      exec: { shell: `sha256sum | cut -c1-64; head -c ${total} /dev/zero | tr '\\0' a; echo done >&2` },
    });
    await host.cp.write(stream, stdin, "stdin");
    const r = await host.cp.result(id);
    expect(r.error).toBeUndefined();
    expect(await reader.ended).toBeUndefined();
    const stdout = reader.bytes("stdout").toString();
    expect(stdout.slice(0, 65)).toBe(`${createHash("sha256").update(stdin).digest("hex")}\n`);
    expect(stdout.length).toBe(65 + total);
    expect(/^a+$/.test(stdout.slice(65))).toBe(true);
    expect(reader.bytes("stderr").toString()).toBe("done\n");
    // The host never sent beyond the credit it was granted...
    expect(reader.overrun).toBe(0);
    expect(reader.maxUnacked).toBeLessThanOrEqual(INITIAL_WINDOW);
    // ...held little while it waited (Docker's stream was paused, not buffered)...
    const result = r.result as { streamed: Record<string, number>; duration_ms: number; stdout: string };
    expect(result.streamed).toMatchObject({
      stdin_bytes: stdin.length,
      stdout_bytes: 65 + total,
      stderr_bytes: 5,
    });
    expect(result.streamed.max_buffered_bytes).toBeLessThanOrEqual(INITIAL_WINDOW);
    // ...and the process itself waited for the reader (4 MiB at ~2.5 MiB/s).
    expect(result.duration_ms).toBeGreaterThan(1000);
    expect(result.stdout).toBe("");
  });

  it("cancel kills a long exec's whole process tree, even while its output waits for credit", async () => {
    const stream = sid();
    const reader = host.cp.read(stream, { grantBytes: 0, everyMs: 1000 });
    const id = host.cp.command("env.exec", {
      environment: env,
      stream,
      exec: { shell: "sleep 301 & yes" },
    });
    host.cp.send({ v: PROTOCOL_VERSION, type: "end", stream });
    await host.cp.waitFor((f) => f.type === "data" && f.stream === stream);
    await new Promise((r) => setTimeout(r, 300));
    expect(await count(host, "sleep 301")).toBe(1);
    host.cp.send({ v: PROTOCOL_VERSION, type: "cancel", id });
    const r = await host.cp.result(id, 20_000);
    expect(r.ok).toBe(false);
    expect(r.error?.code).toBe("cancelled");
    expect(await reader.ended).toBe("cancelled");
    expect(reader.overrun).toBe(0);
    expect(await count(host, "sleep 301")).toBe(0);
    expect(await count(host, "yes")).toBe(0);
  });

  it("puts files from a tar stream and gets them back as one", async () => {
    const dir = await mkdtemp(join(tmpdir(), "denvd-put-"));
    await writeFile(join(dir, "hello.txt"), "hello from the control plane\n");
    const stream = sid();
    const put = host.cp.command("env.files.put", { environment: env, path: "/workspace/up", stream });
    await host.cp.write(stream, await tarOf(dir, false), "file");
    await rm(dir, { recursive: true, force: true });
    const r = await host.cp.result(put);
    expect(r.result).toMatchObject({ path: "/workspace/up", bytes: 29 });
    const cat = await host.cp.result(
      host.cp.command("env.exec", {
        environment: env,
        exec: { shell: "stat -c %u up/hello.txt; cat up/hello.txt" },
      }),
    );
    expect(cat.result).toMatchObject({ stdout: "1000\nhello from the control plane\n" });

    const out = sid();
    const reader = host.cp.read(out);
    const get = await host.cp.result(
      host.cp.command("env.files.get", { environment: env, path: "/workspace/up", stream: out }),
    );
    expect(await reader.ended).toBeUndefined();
    expect(get.result).toMatchObject({ path: "/workspace/up", bytes: reader.bytes().length });
    expect((await tarEntries(reader.bytes()))["up/hello.txt"]).toBe("hello from the control plane\n");
  });

  it("refuses an upload with a link that escapes, writing nothing", async () => {
    const pack = tar.pack();
    pack.entry({ name: "evil", type: "symlink", linkname: "../../../etc/passwd" });
    pack.finalize();
    const chunks: Buffer[] = [];
    for await (const c of pack) chunks.push(c as Buffer);
    const stream = sid();
    const id = host.cp.command("env.files.put", { environment: env, path: "/workspace/evil", stream });
    await host.cp.write(stream, Buffer.concat(chunks), "file");
    const r = await host.cp.result(id);
    expect(r.error?.code).toBe("special_file");
    expect(r.error?.message).toBe(Protection.specialFile("evil", SpecialFileReasons.symlinkEscapes));
  });

  it("tunnels TCP from the host to a service port", async () => {
    const stream = sid();
    const reader = host.cp.read(stream);
    const id = host.cp.command("env.connect", { environment: env, service: "app", port: 8080, stream });
    const connected = await host.cp.waitFor(
      (f) => f.type === "progress" && f.id === id && f.phase === "connected",
    );
    expect(connected).toMatchObject({
      evidence: { address: expect.stringMatching(/^10\.213\.\d+\.\d+:8080$/) },
    });
    await host.cp.write(stream, Buffer.from("GET /health HTTP/1.0\r\nHost: app\r\n\r\n"), "tunnel");
    expect(await reader.ended).toBeUndefined();
    const response = reader.bytes("tunnel").toString();
    expect(response).toMatch(/^HTTP\/1\.[01] 200/);
    const r = await host.cp.result(id);
    expect(r.result).toMatchObject({ service: "app", port: 8080, bytes_from_service: response.length });
  });

  it("says why a tunnel cannot connect", async () => {
    const r = await host.cp.result(
      host.cp.command("env.connect", { environment: env, service: "app", port: 9, stream: sid() }),
    );
    expect(r.error?.code).toBe("not_found");
    expect(r.error?.message).toMatch(
      /^cannot connect to app:9 in quickstart\/alpha \(10\.213\.[\d.]+:9\): connect ECONNREFUSED/,
    );
  });
});
