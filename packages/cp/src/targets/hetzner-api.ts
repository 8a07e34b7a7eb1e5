import { z } from "zod";

/**
 * The Hetzner Cloud API routes the hetzner driver uses (https://docs.hetzner.cloud/reference/cloud):
 * POST /servers, GET /servers (label_selector, paginated), DELETE /servers/{id}. Bearer token
 * auth; the base URL is the target's `base_url` setting (tests point it at a server on loopback).
 */

export const HetznerServer = z.object({
  id: z.number().int(),
  name: z.string(),
  status: z.string(),
  labels: z.record(z.string(), z.string()).default({}),
  server_type: z
    .object({
      name: z.string(),
      prices: z
        .array(z.object({ location: z.string(), price_hourly: z.object({ gross: z.string() }) }))
        .default([]),
    })
    .optional(),
  created: z.string().optional(),
});
export type HetznerServer = z.infer<typeof HetznerServer>;

const ServerPage = z.object({
  servers: z.array(HetznerServer),
  meta: z.object({ pagination: z.object({ next_page: z.number().int().nullable() }) }).optional(),
});
const Created = z.object({ server: HetznerServer });
const ErrorBody = z.object({ error: z.object({ code: z.string(), message: z.string() }) });

export interface CreateServer {
  name: string;
  server_type: string;
  image: string;
  location: string;
  labels: Record<string, string>;
  user_data: string;
}

/** A failed call: the API's own code and message, never the token. */
export class HetznerError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export class HetznerApi {
  constructor(
    private readonly baseUrl: string,
    private readonly token: string,
  ) {}

  async createServer(req: CreateServer): Promise<HetznerServer> {
    const body = await this.call("POST", "/servers", { ...req, start_after_create: true });
    return Created.parse(body).server;
  }

  /** Every server carrying all of `labels` (follows the pages). */
  async listServers(labels: Record<string, string>): Promise<HetznerServer[]> {
    const selector = Object.entries(labels)
      .map(([k, v]) => `${k}==${v}`)
      .join(",");
    const out: HetznerServer[] = [];
    let page: number | null = 1;
    while (page !== null) {
      const q = new URLSearchParams({ label_selector: selector, page: String(page), per_page: "50" });
      const parsed = ServerPage.parse(await this.call("GET", `/servers?${q}`));
      out.push(...parsed.servers);
      page = parsed.meta?.pagination.next_page ?? null;
    }
    return out;
  }

  /** Deletes a server; one already gone is not an error. */
  async deleteServer(id: number): Promise<void> {
    try {
      await this.call("DELETE", `/servers/${id}`);
    } catch (err) {
      if (err instanceof HetznerError && err.status === 404) return;
      throw err;
    }
  }

  private async call(method: string, path: string, json?: unknown): Promise<unknown> {
    const res = await this.fetch(method, path, json);
    const text = await res.text();
    let body: unknown;
    try {
      body = text ? JSON.parse(text) : {};
    } catch {
      throw new HetznerError(
        res.status,
        "invalid_response",
        `Hetzner answered ${res.status} with a body that is not JSON`,
      );
    }
    if (!res.ok) {
      const e = ErrorBody.safeParse(body);
      throw new HetznerError(
        res.status,
        e.success ? e.data.error.code : "unknown",
        `Hetzner Cloud ${method} ${path.split("?")[0]}: ${res.status} ${e.success ? `${e.data.error.code}: ${e.data.error.message}` : "error"}`,
      );
    }
    return body;
  }

  /** The request; a provider that cannot be reached is a HetznerError naming the URL. */
  private async fetch(method: string, path: string, json?: unknown): Promise<Response> {
    try {
      return await fetch(`${this.baseUrl}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${this.token}`,
          ...(json === undefined ? {} : { "content-type": "application/json" }),
        },
        body: json === undefined ? undefined : JSON.stringify(json),
        signal: AbortSignal.timeout(30_000),
      });
    } catch (err) {
      const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err);
      throw new HetznerError(
        0,
        "unreachable",
        `Hetzner Cloud at ${this.baseUrl} cannot be reached: ${cause}`,
      );
    }
  }
}
