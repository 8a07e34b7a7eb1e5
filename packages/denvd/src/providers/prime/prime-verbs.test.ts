import { buffer } from "node:stream/consumers";
import { Protection, ProviderMessages, SpecialFileReasons } from "@denv/spec";
import tar from "tar-stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packEntries } from "../../files/tar-pack.js";
import { PrimeApi } from "./prime-api.js";
import { execInPrime } from "./prime-exec.js";
import { getPrimeFiles, putPrimeFiles } from "./prime-files.js";
import { type PrimeDouble, startPrimeDouble } from "./testing/prime-double.js";

/**
 * The exec and files verbs of denv's Prime target (prime-exec.ts, prime-files.ts) against the
 * Prime double: one sandbox of debian:bookworm-slim (local, never pulled), everything as
 * `nobody` (uid 65534), the non-root user the image has.
 */
let double: PrimeDouble;
let api: PrimeApi;
let sbx = "";
const USER = "nobody";

/**
 * The processes of the sandbox whose command line starts with `pattern` (a regex), counted as
 * root from /proc (the counting processes' own command lines start otherwise).
 */
async function countProcesses(pattern: string): Promise<number> {
  const script = `n=0; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < "$f" 2>/dev/null | grep -q -- "^$1" && n=$((n+1)); done; echo $n`;
  const r = await api.runCommand(sbx, ["/bin/sh", "-c", script, "sh", pattern], { user: "root" });
  return Number(r.stdout.toString().trim());
}

beforeAll(async () => {
  double = await startPrimeDouble();
  api = new PrimeApi(double.connection);
  sbx = (await api.createSandbox({ name: "verbs", dockerImage: "debian:bookworm-slim" })).id;
  await api.waitRunning(sbx);
}, 90_000);

afterAll(async () => {
  await double?.close();
  expect(double.leftovers()).toEqual([]);
}, 60_000);

describe("exec in a Prime sandbox", { timeout: 90_000 }, () => {
  it("runs argv as the user, in the cwd, with env and stdin, streaming, with the exit code", async () => {
    const streamed: Buffer[] = [];
    const r = await execInPrime(api, sbx, USER, "/tmp", {
      cmd: ["sh", "-c", 'id -u; pwd; echo "$GREETING"; cat; echo oops >&2; exit 3'],
      env: { GREETING: "hello" },
      stdin: Buffer.from("from stdin\n"),
      onStdout: (b) => streamed.push(b),
    });
    expect(r.stdout.toString()).toBe("65534\n/tmp\nhello\nfrom stdin\n");
    expect(Buffer.concat(streamed).toString()).toBe(r.stdout.toString());
    expect(r.stderr.toString()).toBe("oops\n");
    expect(r).toMatchObject({ exitCode: 3, timedOut: false, cancelled: false, truncated: false });
    const shell = await execInPrime(api, sbx, USER, undefined, { shell: "echo $((6 * 7))", outputLimit: 1 });
    expect(shell).toMatchObject({ exitCode: 0, truncated: true });
    expect(shell.stdout.toString()).toBe("4");
  });

  it("a timeout kills the command and what it forked, setsid or not: exit 124", async () => {
    const r = await execInPrime(api, sbx, USER, undefined, {
      shell: "sleep 301 & setsid sleep 302 & sleep 303",
      timeout: 1,
    });
    expect(r).toMatchObject({ exitCode: 124, timedOut: true, cancelled: false });
    expect(await countProcesses("sleep 30[123]")).toBe(0);
  });

  it("a cancel kills it too: exit 137", async () => {
    const stop = new AbortController();
    setTimeout(() => stop.abort(), 500);
    const r = await execInPrime(api, sbx, USER, undefined, { shell: "sleep 304", signal: stop.signal });
    expect(r).toMatchObject({ exitCode: 137, cancelled: true, timedOut: false });
    expect(await countProcesses("sleep 30[4]")).toBe(0);
  });

  it("refuses a tty and a request with both or neither of cmd and shell, in one line", async () => {
    await expect(execInPrime(api, sbx, USER, undefined, { shell: "true", tty: true })).rejects.toThrow(
      ProviderMessages.unsupportedOption("Prime", "tty", "the runtime does not open Prime PTYs yet"),
    );
    await expect(execInPrime(api, sbx, USER, undefined, {})).rejects.toThrow(
      "give exactly one of 'cmd' (argv) and 'shell' (a string for sh -c)",
    );
  });
});

describe("files in a Prime sandbox", { timeout: 90_000 }, () => {
  it("puts an archive as the user and gets it back, checked", async () => {
    const put = await putPrimeFiles(
      api,
      sbx,
      USER,
      "/tmp/up",
      await packEntries([
        { name: "d", type: "directory" },
        { name: "d/a.txt", content: "uploaded\n", mode: 0o640 },
      ]),
    );
    expect(put).toEqual({ entries: 2, bytes: 9 });
    const check = await execInPrime(api, sbx, USER, undefined, { shell: "stat -c '%u %a' /tmp/up/d/a.txt" });
    expect(check.stdout.toString()).toBe("65534 640\n");
    const names: string[] = [];
    const extract = tar.extract();
    extract.on("entry", (h, s, next) => {
      names.push(h.name);
      s.resume();
      s.on("end", next);
    });
    const got = await buffer(await getPrimeFiles(api, sbx, USER, "/tmp/up"));
    await new Promise<void>((resolve, reject) => {
      extract.on("finish", resolve);
      extract.on("error", reject);
      extract.end(got);
    });
    expect(names.sort()).toEqual(["up/", "up/d/", "up/d/a.txt"]);
  });

  it("refuses a FIFO planted in a download, a relative path, and says what is missing", async () => {
    await execInPrime(api, sbx, USER, undefined, { shell: "mkfifo /tmp/up/pipe" });
    await expect(getPrimeFiles(api, sbx, USER, "/tmp/up")).rejects.toThrow(
      Protection.specialFile("/tmp/up/pipe", SpecialFileReasons.fifo),
    );
    await expect(getPrimeFiles(api, sbx, USER, "tmp/up")).rejects.toThrow("path 'tmp/up' must be absolute");
    await expect(getPrimeFiles(api, sbx, USER, "/tmp/none")).rejects.toThrow(
      "/tmp/none: no such file or directory",
    );
    // A path the user cannot write is refused as such, and nothing is half-written.
    await expect(
      putPrimeFiles(api, sbx, USER, "/etc/denv", await packEntries([{ name: "x", content: "x" }])),
    ).rejects.toThrow("/etc/denv: permission denied");
    const r = await api.runCommand(sbx, ["ls", "/etc/denv"], { user: "root" });
    expect(r.exitCode).not.toBe(0);
  });
});
