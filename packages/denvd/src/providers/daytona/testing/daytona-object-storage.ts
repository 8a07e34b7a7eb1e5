import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const REPO = fileURLToPath(new URL("../../../../../../", import.meta.url));
const BUCKET = "daytona-volume-builds";
const REGION = "us-east-1";
const ACCESS_KEY = "AKIADAYTONADOUBLE";
/**
 * moto refuses anonymous reads of a private bucket but checks no signature: a request that
 * names a key is enough.
 */
const AUTHORIZATION = `AWS4-HMAC-SHA256 Credential=${ACCESS_KEY}/20240101/${REGION}/s3/aws4_request, SignedHeaders=host, Signature=0`;

/**
 * Daytona's object storage for build contexts: moto's S3 (server mode, from python/.venv, as
 * scripts/setup-python installs it) on 127.0.0.1. The SDK gets its address and throwaway keys
 * from GET /object-storage/push-access and uploads `<org>/<hash>/context.tar` with the AWS SDK;
 * the double reads the tarballs back with plain GETs (see AUTHORIZATION).
 */
export class ObjectStorage {
  url = "";
  private child?: ChildProcess;

  static readonly binary = join(REPO, "python", ".venv", "bin", "moto_server");

  async start(): Promise<this> {
    if (!existsSync(ObjectStorage.binary))
      throw new Error(
        `${ObjectStorage.binary} is missing: run scripts/setup-python (it installs moto[server])`,
      );
    const child = spawn(ObjectStorage.binary, ["-H", "127.0.0.1", "-p", "0"], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, NO_COLOR: "1" },
    });
    this.child = child;
    this.url = await new Promise<string>((resolve, reject) => {
      let seen = "";
      const timer = setTimeout(() => reject(new Error(`moto_server did not start: ${seen}`)), 30_000);
      const onData = (b: Buffer) => {
        seen += b.toString();
        const m = /Running on (http:\/\/127\.0\.0\.1:\d+)/.exec(seen);
        if (m?.[1]) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      };
      child.stdout?.on("data", onData);
      child.stderr?.on("data", onData);
      child.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`moto_server exited (${code}): ${seen}`));
      });
    });
    const made = await fetch(`${this.url}/${BUCKET}`, {
      method: "PUT",
      headers: { authorization: AUTHORIZATION },
    });
    if (!made.ok) throw new Error(`moto: cannot create bucket ${BUCKET}: ${made.status}`);
    return this;
  }

  /** The answer of GET /object-storage/push-access (StorageAccessDto). */
  pushAccess(organizationId: string): object {
    return {
      accessKey: ACCESS_KEY,
      secret: "daytona-double",
      sessionToken: "daytona-double",
      storageUrl: this.url,
      organizationId,
      bucket: BUCKET,
      region: REGION,
    };
  }

  /** The context tarball the SDK uploaded for a hash; an error when there is none. */
  async context(organizationId: string, hash: string): Promise<Buffer> {
    const res = await fetch(`${this.url}/${BUCKET}/${organizationId}/${hash}/context.tar`, {
      headers: { authorization: AUTHORIZATION },
    });
    if (!res.ok) throw new Error(`build context ${hash} is not in object storage (${res.status})`);
    return Buffer.from(await res.arrayBuffer());
  }

  async close(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    child.kill("SIGTERM");
    await exited;
  }
}
