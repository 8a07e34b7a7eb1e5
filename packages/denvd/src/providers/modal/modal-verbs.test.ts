import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { Protection, ProviderMessages, SpecialFileReasons } from "@denv/spec";
import type { ModalClient, Sandbox } from "modal";
import tar from "tar-stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packEntries } from "../../files/tar-pack.js";
import { execInModal, type ModalUser, modalUser } from "./modal-exec.js";
import { getModalFiles, putModalFiles } from "./modal-files.js";
import { buildModalImage } from "./modal-images.js";
import { type ModalDouble, startModalDouble } from "./testing/modal-double.js";

/**
 * Exec and files in a Modal sandbox through the official `modal` SDK (0.11.1), as the Modal double
 * serves them: a sandbox of an image built through Modal's image API (a user `user`, uid 1000, in
 * a group `extra`), commands as that user through setpriv run by the sandbox's root.
 */
const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();

let double: ModalDouble;
let home: string;
let client: ModalClient;
let sb: Sandbox;
let user: ModalUser;
const saved = { ...process.env };

beforeAll(async () => {
  home = await mkdtemp(join(tmpdir(), "denv-modal-verbs-"));
  await mkdir(join(home, "project"));
  await writeFile(
    join(home, "project", "Dockerfile"),
    "FROM debian:bookworm-slim\nRUN groupadd --gid 2000 extra && useradd --uid 1000 --create-home --groups extra user\n",
  );
  double = await startModalDouble();
  for (const k of Object.keys(process.env)) if (k.startsWith("MODAL_")) delete process.env[k];
  Object.assign(process.env, { HOME: home, MODAL_CONFIG_PATH: join(home, ".modal.toml"), ...double.sdkEnv });
  const modal = await import("modal");
  client = new modal.ModalClient();
  const app = await client.apps.fromName("denv-modal-verbs", { createIfMissing: true });
  const { imageId } = await buildModalImage(client, app, {
    projectDir: join(home, "project"),
    service: { name: "app", build: { context: ".", dockerfile: "Dockerfile" } },
  });
  sb = await client.sandboxes.create(app, await client.images.fromId(imageId), { timeoutMs: 600_000 });
  user = modalUser(await sb.filesystem.readText("/etc/passwd"), "user");
}, 120_000);

afterAll(async () => {
  await sb?.terminate().catch(() => undefined);
  client?.close();
  process.env = saved;
  try {
    await double?.close();
  } finally {
    await rm(home, { recursive: true, force: true });
  }
  expect(double.leftovers()).toEqual([]);
  expect(docker("ps", "-a", "-q", "--filter", `label=ai.denv.modal.server=${double.server.id}`)).toBe("");
}, 120_000);

/** The command lines of the sandbox's processes, read as root. */
async function processes(): Promise<string> {
  const p = await sb.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]);
  return p.stdout.readText();
}

describe("exec and files in a Modal sandbox", { timeout: 60_000 }, () => {
  it("runs argv as the user with its groups, HOME, no new privileges, the cwd and env asked, stdin in, output out", async () => {
    expect(user).toEqual({ name: "user", uid: 1000, gid: 1000, home: "/home/user" });
    const r = await execInModal(sb, user, "/tmp", {
      cmd: [
        "sh",
        "-c",
        'id -un; id -Gn; echo "$HOME $(pwd) $GREETING"; grep NoNewPrivs /proc/self/status; cat; echo err >&2; exit 3',
      ],
      env: { GREETING: "hello" },
      stdin: Buffer.from("piped in\n"),
    });
    expect(r.stdout.toString()).toBe("user\nuser extra\n/home/user /tmp hello\nNoNewPrivs:\t1\npiped in\n");
    expect(r.stderr.toString()).toBe("err\n");
    expect(r).toMatchObject({ exitCode: 3, timedOut: false, cancelled: false, truncated: false });

    const streamed = await execInModal(sb, user, undefined, {
      shell: "wc -c",
      stdin: Readable.from([Buffer.alloc(300_000, 1), Buffer.alloc(200_000, 2)]),
    });
    expect(streamed.stdout.toString().trim()).toBe("500000");
  });

  it("streams output as it comes and holds each stream to the cap", async () => {
    const seen: [number, string][] = [];
    const started = Date.now();
    const r = await execInModal(sb, user, undefined, {
      shell: "echo first; sleep 2; echo second",
      onStdout: (b) => seen.push([Date.now() - started, b.toString()]),
    });
    expect(r.stdout.toString()).toBe("first\nsecond\n");
    expect(seen[0]?.[1]).toBe("first\n");
    expect(seen[0]?.[0]).toBeLessThan(r.durationMs - 1_000);

    const capped = await execInModal(sb, user, undefined, {
      shell: "head -c 100000 /dev/zero",
      outputLimit: 1000,
    });
    expect(capped.stdout.length).toBe(1000);
    expect(capped.truncated).toBe(true);
  });

  it("a timeout exits 124 and a cancel 137, killing what the command forked", async () => {
    const t = await execInModal(sb, user, undefined, {
      shell: "sleep 311 & setsid sleep 312 & wait",
      timeout: 1,
    });
    expect(t).toMatchObject({ exitCode: 124, timedOut: true, cancelled: false });
    const stop = new AbortController();
    setTimeout(() => stop.abort(), 500);
    const c = await execInModal(sb, user, undefined, {
      shell: "sleep 313 & setsid sleep 314 & wait",
      signal: stop.signal,
    });
    expect(c).toMatchObject({ exitCode: 137, timedOut: false, cancelled: true });
    expect(await processes()).not.toMatch(/sleep 31[1-4]/);
  });

  it("refuses a tty, a user without a passwd entry and a group, in one line", async () => {
    await expect(execInModal(sb, user, undefined, { cmd: ["true"], tty: true })).rejects.toThrow(
      ProviderMessages.unsupportedOption("Modal", "tty", "the runtime does not open Modal PTYs yet"),
    );
    const passwd = await sb.filesystem.readText("/etc/passwd");
    expect(() => modalUser(passwd, "4242")).toThrow(ProviderMessages.userWithoutName("Modal", "4242"));
    expect(() => modalUser(passwd, "user:extra")).toThrow(
      ProviderMessages.unsupportedOption(
        "Modal",
        "a group in user 'user:extra'",
        "Modal runs a call as a user with that user's own groups",
      ),
    );
    expect(modalUser(passwd, "0").uid).toBe(0);
  });

  it("uploads through the special-file check as the user, and downloads checked", async () => {
    const put = await putModalFiles(
      sb,
      user,
      "/tmp/up",
      await packEntries([
        { name: "d", type: "directory" },
        { name: "d/a.txt", content: "uploaded\n", mode: 0o640 },
      ]),
    );
    expect(put).toEqual({ entries: 2, bytes: 9 });
    const check = await execInModal(sb, user, undefined, {
      shell: "stat -c '%U %a' /tmp/up /tmp/up/d/a.txt",
    });
    expect(check.stdout.toString()).toBe("user 755\nuser 640\n");

    const names: string[] = [];
    const extract = tar.extract();
    extract.on("entry", (h, s, next) => {
      names.push(h.name);
      s.resume();
      s.on("end", next);
    });
    const got = await buffer(await getModalFiles(sb, user, "/tmp/up"));
    await new Promise<void>((resolve, reject) => {
      extract.on("finish", resolve);
      extract.on("error", reject);
      extract.end(got);
    });
    expect(names.sort()).toEqual(["up/", "up/d/", "up/d/a.txt"]);

    // A link out is refused before a byte is written.
    await expect(
      putModalFiles(
        sb,
        user,
        "/tmp/evil",
        await packEntries([{ name: "l", type: "symlink", linkname: "/etc/shadow" }]),
      ),
    ).rejects.toThrow(Protection.specialFile("l", SpecialFileReasons.symlinkEscapes));
    expect((await execInModal(sb, user, undefined, { shell: "ls /tmp/evil" })).exitCode).not.toBe(0);
  });

  it("refuses a FIFO planted in a download, a relative path, and says what is missing or forbidden", async () => {
    await execInModal(sb, user, undefined, { shell: "mkfifo /tmp/up/pipe" });
    await expect(getModalFiles(sb, user, "/tmp/up")).rejects.toThrow(
      Protection.specialFile("/tmp/up/pipe", SpecialFileReasons.fifo),
    );
    await expect(getModalFiles(sb, user, "tmp/up")).rejects.toThrow("path 'tmp/up' must be absolute");
    await expect(getModalFiles(sb, user, "/tmp/none")).rejects.toThrow(
      "/tmp/none: no such file or directory",
    );
    await expect(getModalFiles(sb, user, "/root")).rejects.toThrow("/root: permission denied");
    await expect(
      putModalFiles(sb, user, "/etc/denv", await packEntries([{ name: "x", content: "x" }])),
    ).rejects.toThrow("/etc/denv: permission denied");
    const r = await sb.exec(["ls", "/etc/denv"]);
    expect(await r.wait()).not.toBe(0);
  });
});
