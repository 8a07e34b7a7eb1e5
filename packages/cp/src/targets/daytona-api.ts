import { z } from "zod";

/**
 * The Daytona API routes the daytona-docker driver uses (https://www.daytona.io/docs/en/tools/api/,
 * as @daytonaio/sdk calls them): POST /sandbox, GET /sandbox (labels, paginated), GET and DELETE
 * /sandbox/{id}, and one toolbox route, POST <toolboxProxyUrl>/<id>/process/execute. Bearer
 * API key; the base URL is the target's `base_url` setting (tests point it at a server on loopback).
 */

export const DaytonaSandbox = z.object({
  id: z.string(),
  name: z.string().optional(),
  state: z.string().optional(),
  errorReason: z.string().nullish(),
  labels: z.record(z.string(), z.string()).default({}),
  toolboxProxyUrl: z.string().optional(),
});
export type DaytonaSandbox = z.infer<typeof DaytonaSandbox>;

const Page = z.union([
  z.array(DaytonaSandbox),
  z.object({ items: z.array(DaytonaSandbox), nextCursor: z.string().nullish() }),
]);
const Executed = z.object({ exitCode: z.number().int(), result: z.string().default("") });
const ErrorBody = z.object({ message: z.union([z.string(), z.array(z.string())]) });

export interface CreateSandbox {
  name: string;
  snapshot: string;
  labels: Record<string, string>;
  cpu: number;
  memory: number;
  disk: number;
  /** Outbound CIDRs; empty: the organization's default. */
  networkAllowList?: string;
}

/** A failed call: the status and the API's message, never the key. */
export class DaytonaError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The states from which a sandbox never becomes `started`. */
const DEAD = new Set(["error", "build_failed", "destroyed", "destroying", "archived"]);

export class DaytonaApi {
  constructor(
    private readonly baseUrl: string,
    private readonly key: string,
  ) {}

  /** Creates a sandbox that never stops by itself (a machine: denv deletes it). */
  async createSandbox(req: CreateSandbox): Promise<DaytonaSandbox> {
    const { networkAllowList, ...rest } = req;
    const body = await this.call("POST", `${this.baseUrl}/sandbox`, {
      ...rest,
      ...(networkAllowList ? { networkAllowList } : {}),
      autoStopInterval: 0,
      autoArchiveInterval: 0,
    });
    return DaytonaSandbox.parse(body);
  }

  /** Every sandbox carrying all of `labels` that is not gone (follows the pages). */
  async listSandboxes(labels: Record<string, string>): Promise<DaytonaSandbox[]> {
    const out: DaytonaSandbox[] = [];
    let cursor: string | undefined;
    do {
      const q = new URLSearchParams({ labels: JSON.stringify(labels), limit: "100" });
      if (cursor) q.set("cursor", cursor);
      const page = Page.parse(await this.call("GET", `${this.baseUrl}/sandbox?${q}`));
      const items = Array.isArray(page) ? page : page.items;
      out.push(...items.filter((sb) => sb.state !== "destroyed" && sb.state !== "destroying"));
      cursor = Array.isArray(page) ? undefined : (page.nextCursor ?? undefined);
    } while (cursor);
    return out;
  }

  /** Polls until the sandbox is started; a state it cannot leave is an error naming it. */
  async waitStarted(id: string, timeoutMs: number): Promise<DaytonaSandbox> {
    for (const until = Date.now() + timeoutMs; ; ) {
      const sb = DaytonaSandbox.parse(
        await this.call("GET", `${this.baseUrl}/sandbox/${encodeURIComponent(id)}`),
      );
      if (sb.state === "started") return sb;
      if (sb.state && DEAD.has(sb.state)) {
        throw new DaytonaError(
          0,
          `Daytona sandbox ${id} is ${sb.state}${sb.errorReason ? `: ${sb.errorReason}` : ""}`,
        );
      }
      if (Date.now() > until)
        throw new DaytonaError(0, `Daytona sandbox ${id} did not start within ${timeoutMs / 1000} s`);
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  /** Runs `command` with `envs` in the sandbox as its user (the toolbox's execute: output of both streams). */
  async execute(
    sb: DaytonaSandbox,
    command: string,
    o: { envs: Record<string, string>; timeoutS: number },
  ): Promise<{ exitCode: number; result: string }> {
    if (!sb.toolboxProxyUrl) throw new DaytonaError(0, `Daytona sandbox ${sb.id} has no toolboxProxyUrl`);
    const url = `${sb.toolboxProxyUrl.replace(/\/$/, "")}/${encodeURIComponent(sb.id)}/process/execute`;
    const body = await this.call(
      "POST",
      url,
      { command, envs: o.envs, timeout: o.timeoutS },
      o.timeoutS * 1000 + 30_000,
    );
    return Executed.parse(body);
  }

  /** Deletes a sandbox; one already gone is not an error. */
  async deleteSandbox(id: string): Promise<void> {
    try {
      await this.call("DELETE", `${this.baseUrl}/sandbox/${encodeURIComponent(id)}`);
    } catch (err) {
      if (err instanceof DaytonaError && err.status === 404) return;
      throw err;
    }
  }

  private async call(method: string, url: string, json?: unknown, timeoutMs = 30_000): Promise<unknown> {
    const route = `${method} ${new URL(url).pathname}`;
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        headers: {
          authorization: `Bearer ${this.key}`,
          ...(json === undefined ? {} : { "content-type": "application/json" }),
        },
        body: json === undefined ? undefined : JSON.stringify(json),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err);
      throw new DaytonaError(0, `Daytona at ${new URL(url).origin} cannot be reached: ${cause}`);
    }
    const text = await res.text();
    let body: unknown;
    try {
      body = text ? JSON.parse(text) : {};
    } catch {
      throw new DaytonaError(
        res.status,
        `Daytona ${route} answered ${res.status} with a body that is not JSON`,
      );
    }
    if (!res.ok) {
      const e = ErrorBody.safeParse(body);
      const msg = e.success ? [e.data.message].flat().join("; ") : "error";
      throw new DaytonaError(res.status, `Daytona ${route}: ${res.status} ${msg}`);
    }
    return body;
  }
}
