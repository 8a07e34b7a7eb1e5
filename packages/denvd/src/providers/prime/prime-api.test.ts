import { execFileSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PrimeApi, PrimeApiError } from "./prime-api.js";
import { PrimeImages } from "./prime-images.js";
import { type PrimeDouble, startPrimeDouble } from "./testing/prime-double.js";

/**
 * PrimeApi against the Prime double: real containers of debian:bookworm-slim (local; never
 * pulled). One sandbox carries the flow, a second is restored from its checkpoint with egress
 * shut; the cases run in order and share them. One image is built from a Dockerfile folder
 * through Prime's image API (a `docker build` on the local engine) and starts a third sandbox.
 */
const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();

let double: PrimeDouble;
let api: PrimeApi;
let a = "";
let b = "";
let checkpoint = "";
let folder = "";

beforeAll(async () => {
  double = await startPrimeDouble();
  api = new PrimeApi(double.connection);
  folder = await mkdtemp(join(tmpdir(), "denv-prime-image-"));
}, 60_000);

afterAll(async () => {
  await rm(folder, { recursive: true, force: true });
  await double?.close();
  expect(double.leftovers()).toEqual([]);
  expect(docker("ps", "-a", "-q", "--filter", "label=ai.denv.test=prime-server")).toBe("");
  expect(docker("images", "-q", "--filter", "label=ai.denv.test=prime-server")).toBe("");
}, 60_000);

describe("PrimeApi against the Prime double", { timeout: 90_000 }, () => {
  it("creates a sandbox, waits until it runs, finds it by label", async () => {
    const created = await api.createSandbox({
      name: "api-a",
      dockerImage: "debian:bookworm-slim",
      env: { FROM_CREATE: "sandbox-wide" },
      labels: ["api-flow"],
      idempotencyKey: "api-a-once",
    });
    a = created.id;
    expect(created.status).toBe("PENDING");
    expect(
      (
        await api.createSandbox({
          name: "api-a",
          dockerImage: "debian:bookworm-slim",
          idempotencyKey: "api-a-once",
        })
      ).id,
    ).toBe(a);
    expect((await api.waitRunning(a)).status).toBe("RUNNING");
    expect((await api.listSandboxes({ labels: ["api-flow"] })).sandboxes.map((s) => s.id)).toEqual([a]);
    expect((await api.listSandboxes({ labels: ["other"] })).total).toBe(0);
  });

  it("runs commands: output, exit code, env, cwd, user, argv, stdin, streaming", async () => {
    const r = await api.runCommand(a, "echo out; echo err >&2; exit 3");
    expect([r.stdout.toString(), r.stderr.toString(), r.exitCode]).toEqual(["out\n", "err\n", 3]);
    const as = await api.runCommand(a, 'echo "$FROM_CREATE $FROM_CALL $(pwd) $(id -un)"', {
      env: { FROM_CALL: "per-call" },
      cwd: "/tmp",
      user: "nobody",
    });
    expect(as.stdout.toString()).toBe("sandbox-wide per-call /tmp nobody\n");
    expect((await api.runCommand(a, ["printf", "%s|", "no shell", "$HOME"])).stdout.toString()).toBe(
      "no shell|$HOME|",
    );
    const fed = await api.runCommand(a, ["sh", "-c", "wc -c; cat /dev/stdin | wc -c"], {
      stdin: Buffer.from("12345"),
    });
    expect(fed.stdout.toString().split("\n").slice(0, 2)).toEqual(["5", "0"]);
    const chunks: string[] = [];
    await api.runCommand(a, "echo one; sleep 0.3; echo two", {
      onStdout: (c) => void chunks.push(c.toString()),
    });
    expect(chunks.join("")).toBe("one\ntwo\n");
    const missing = await api.runCommand(a, "id", { user: "no-such-user" }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(PrimeApiError);
    expect((missing as Error).message).toMatch(
      /^Prime runCommand failed: failed_precondition: .*no-such-user/,
    );
  });

  it("kills a command at its timeout, and one whose caller aborts", async () => {
    const late = await api.runCommand(a, "sleep 30", { timeoutMs: 1_000 }).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(PrimeApiError);
    expect(String(late)).toContain("timed out after 1000 ms");
    const abort = new AbortController();
    const aborted = await api
      .runCommand(a, "echo started; sleep 2; touch /tmp/survived", {
        signal: abort.signal,
        onStdout: () => abort.abort(),
      })
      .catch((e: unknown) => e);
    expect((aborted as Error).name).toBe("AbortError");
    await new Promise((r) => setTimeout(r, 3_000));
    expect((await api.runCommand(a, "test -e /tmp/survived")).exitCode).toBe(1);
  });

  it("uploads and downloads bytes; renews a gateway token the gateway no longer takes", async () => {
    const data = Buffer.from([0, 1, 2, 255, 10, 65]);
    await api.uploadFile(a, "/srv/api/data.bin", data);
    expect(await api.downloadFile(a, "/srv/api/data.bin")).toEqual(data);
    await expect(api.downloadFile(a, "/srv/api/none")).rejects.toThrow(
      "Prime downloadFile failed: HTTP 404: File not found: /srv/api/none",
    );
    double.server.gateway.revokeTokens();
    expect((await api.runCommand(a, "cat /srv/api/data.bin")).stdout).toEqual(data);
  });

  it("checkpoints the filesystem and restores it into a sandbox with no network, then opens it", async () => {
    const c = await api.createCheckpoint(a);
    checkpoint = c.id;
    expect(c.state).toBe("PENDING");
    expect((await api.waitCheckpoint(checkpoint)).state).toBe("DURABLE");
    expect((await api.listCheckpoints(a)).map((x) => x.id)).toEqual([checkpoint]);
    const restored = await api.createSandbox({
      name: "api-b",
      checkpointId: checkpoint,
      networkAccess: false,
    });
    b = restored.id;
    expect(restored.networkAccess).toBe(false);
    await api.waitRunning(b);
    expect((await api.getSandbox(b)).dockerImage).toBe("debian:bookworm-slim");
    expect((await api.runCommand(b, "od -An -tu1 /srv/api/data.bin")).stdout.toString().trim()).toBe(
      "0   1   2 255  10  65",
    );

    await api.runCommand(
      a,
      `nohup perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(Listen => 5, LocalPort => 7777, ReuseAddr => 1) or die; while ($c = $s->accept) { close $c }' >/dev/null 2>&1 &`,
    );
    const ip = (await api.runCommand(a, "hostname -i")).stdout.toString().trim();
    const probe = `timeout 5 bash -c 'echo hi > /dev/tcp/${ip}/7777'`;
    expect((await api.runCommand(b, probe)).exitCode).not.toBe(0);
    await api.setNetworkAccess(b, true);
    expect((await api.getSandbox(b)).networkAccess).toBe(true);
    expect((await api.runCommand(b, probe)).exitCode).toBe(0);
  });

  it("makes a private network as Prime reads its bodies: rules, team, members and their tags", async () => {
    const rules = [{ from: "tag:agent", to: "tag:db", ports: [5432, 7777] }];
    const net = await api.createNetwork({ name: "api-lan", rules, teamId: "team-api" });
    expect(net).toEqual({ id: net.id, name: "api-lan", members: [], rules });
    // The double reads `team_id` only: the team went in snake_case.
    expect(double.server.networks.get(net.id).teamId).toBe("team-api");
    expect(double.server.requests).toContain("POST /api/v1/sandbox/networks");
    await api.putNetworkMember(net.id, a, ["db"]);
    await api.putNetworkMember(net.id, b, ["agent"]);
    await api.putNetworkMember(net.id, b, ["agent", "grader"]);
    const every = [{ from: "*", to: "*", ports: [7777] }];
    await api.setNetworkRules(net.id, every);
    expect(await api.getNetwork(net.id)).toEqual({
      id: net.id,
      name: "api-lan",
      members: [
        { sandboxId: a, tags: ["db"] },
        { sandboxId: b, tags: ["agent", "grader"] },
      ],
      rules: every,
    });
    // a's listener (above) by its name on the network.
    const probe = `timeout 5 bash -c 'echo hi > /dev/tcp/${a}.sandbox.internal/7777'`;
    expect((await api.runCommand(b, probe)).exitCode).toBe(0);
    await api.removeNetworkMember(net.id, b);
    expect((await api.getNetwork(net.id)).members.map((m) => m.sandboxId)).toEqual([a]);
    await api.deleteNetwork(net.id);
    await expect(api.getNetwork(net.id)).rejects.toThrow(
      `Prime getNetwork failed: HTTP 404: Network ${net.id} not found`,
    );
  });

  it("maps the network API's refusals to PrimeApiError: the call, the status, Prime's words", async () => {
    const refused = await api.deleteNetwork("nope").catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(PrimeApiError);
    expect(refused).toMatchObject({ call: "deleteNetwork", status: 404 });
    await expect(api.putNetworkMember("nope", a, [])).rejects.toThrow(
      "Prime putNetworkMember failed: HTTP 404: Network nope not found",
    );
    await expect(api.removeNetworkMember("nope", a)).rejects.toThrow(
      "Prime removeNetworkMember failed: HTTP 404: Network nope not found",
    );
    await expect(api.setNetworkRules("nope", [])).rejects.toThrow(
      "Prime setNetworkRules failed: HTTP 404: Network nope not found",
    );
    await expect(api.createNetwork({ name: "", rules: [] })).rejects.toThrow(
      "Prime createNetwork failed: HTTP 422: name is required",
    );
    await expect(
      api.createNetwork({ name: "api-bad", rules: [{ from: "agent", to: "*", ports: [80] }] }),
    ).rejects.toThrow('Prime createNetwork failed: HTTP 422: rules[0].from must be "*" or "tag:<name>"');
  });

  it("refuses to delete a running sandbox's newest checkpoint; deletes sandboxes, then it", async () => {
    await expect(api.deleteCheckpoint(checkpoint)).rejects.toThrow(
      /Prime deleteCheckpoint failed: HTTP 409: .*active tip/,
    );
    await api.deleteSandbox(b);
    await api.deleteSandbox(a);
    expect((await api.getSandbox(a)).status).toBe("TERMINATED");
    await api.deleteCheckpoint(checkpoint);
    await expect(api.getCheckpoint(checkpoint)).rejects.toThrow("Prime getCheckpoint failed: HTTP 404");
  });

  it("builds an image from a Dockerfile folder; a sandbox of it has its user and file", {
    timeout: 180_000,
  }, async () => {
    await writeFile(
      join(folder, "Dockerfile"),
      "FROM debian:bookworm-slim\nRUN useradd -m -u 1000 agent\nCOPY --chown=agent greeting.txt /home/agent/\n",
    );
    await writeFile(join(folder, "greeting.txt"), "built by Prime\n");
    const images = new PrimeImages(api);
    const ref = await images.buildImage({ name: "api-agent", tag: "v1", context: folder });
    expect(ref).toBe(`${double.server.userId}/api-agent:v1`);
    expect((await images.listImages()).map((i) => [i.reference, i.status])).toEqual([[ref, "COMPLETED"]]);
    const c = (await api.createSandbox({ name: "api-c", dockerImage: ref })).id;
    await api.waitRunning(c);
    const r = await api.runCommand(c, "id -u; cat ~/greeting.txt", { user: "agent", cwd: "/home/agent" });
    expect(r.stdout.toString()).toBe("1000\nbuilt by Prime\n");
    await api.deleteSandbox(c);
  });

  it("reports a failed build in one line: the build, and the builder's own words", {
    timeout: 120_000,
  }, async () => {
    await writeFile(join(folder, "Dockerfile"), "FROM debian:bookworm-slim\nRUN false\n");
    const failed = await new PrimeImages(api)
      .buildImage({ name: "api-broken", context: folder })
      .catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(PrimeApiError);
    expect((failed as Error).message).toMatch(
      /^Prime buildImage failed: build \w+ of api-broken:latest FAILED: .*'\/bin\/sh -c false'.* non-zero code: 1$/,
    );
  });

  it("stops waiting for a build when its caller aborts", { timeout: 120_000 }, async () => {
    await writeFile(join(folder, "Dockerfile"), "FROM debian:bookworm-slim\nRUN sleep 3\n");
    const abort = new AbortController();
    const building = new PrimeImages(api).buildImage(
      { name: "api-slow", context: folder },
      { signal: abort.signal },
    );
    setTimeout(() => abort.abort(), 500);
    expect(((await building.catch((e: unknown) => e)) as Error).name).toBe("AbortError");
  });

  it("names the call and Prime's words when the API key is wrong", async () => {
    const wrong = new PrimeApi({ ...double.connection, apiKey: "pit_wrong" });
    await expect(wrong.listSandboxes()).rejects.toThrow(
      "Prime listSandboxes failed: HTTP 401: Invalid or missing API key",
    );
  });
});
