import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { EC2Client } from "@aws-sdk/client-ec2";

const REPO = fileURLToPath(new URL("../../../../", import.meta.url));

/**
 * moto's server mode (the PyPI package moto[server], installed into python/.venv by
 * scripts/setup-python) on 127.0.0.1: a local AWS that speaks EC2's query API, for the aws
 * driver's tests. One process per test file; it holds its state in memory and goes with it.
 */
export class MotoServer {
  url = "";
  private child?: ChildProcess;

  static readonly binary = join(REPO, "python", ".venv", "bin", "moto_server");

  async start(): Promise<this> {
    if (!existsSync(MotoServer.binary)) {
      throw new Error(`${MotoServer.binary} is missing: run scripts/setup-python (it installs moto[server])`);
    }
    const child = spawn(MotoServer.binary, ["-H", "127.0.0.1", "-p", "0"], {
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
    return this;
  }

  /** An EC2 client of this server, as a test looks at what the driver made. */
  ec2(region: string): EC2Client {
    return new EC2Client({
      region,
      endpoint: this.url,
      credentials: { accessKeyId: "AKIATESTREADER", secretAccessKey: "reader" },
    });
  }

  async close(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    child.kill("SIGTERM");
    await exited;
  }
}
