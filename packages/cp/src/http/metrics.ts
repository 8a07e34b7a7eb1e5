import type { FastifyInstance } from "fastify";

const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

interface Series {
  count: number;
  sum: number;
  buckets: number[];
}

export interface Gauges {
  hostsOnline(): number;
  deploymentsByStatus(): Promise<Record<string, number>>;
}

function escapeLabel(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/**
 * Prometheus metrics in the text format: requests by route and status (count and duration
 * histogram), hosts online, deployments by status, process memory.
 */
export class Metrics {
  private requests = new Map<string, Series>();
  private started = new WeakMap<object, bigint>();

  install(app: FastifyInstance): void {
    app.addHook("onRequest", async (req) => {
      this.started.set(req, process.hrtime.bigint());
    });
    app.addHook("onResponse", async (req, reply) => {
      const start = this.started.get(req);
      if (start === undefined) return;
      const seconds = Number(process.hrtime.bigint() - start) / 1e9;
      this.observe(req.method, req.routeOptions.url ?? "unmatched", reply.statusCode, seconds);
    });
  }

  observe(method: string, route: string, status: number, seconds: number): void {
    const key = `method="${escapeLabel(method)}",route="${escapeLabel(route)}",status="${status}"`;
    let s = this.requests.get(key);
    if (!s) {
      s = { count: 0, sum: 0, buckets: BUCKETS.map(() => 0) };
      this.requests.set(key, s);
    }
    s.count++;
    s.sum += seconds;
    for (const [i, b] of BUCKETS.entries()) {
      if (seconds <= b) s.buckets[i] = (s.buckets[i] ?? 0) + 1;
    }
  }

  async render(gauges: Gauges): Promise<string> {
    const out: string[] = [
      "# HELP denv_http_requests_total HTTP requests by method, route and status.",
      "# TYPE denv_http_requests_total counter",
    ];
    for (const [k, s] of this.requests) out.push(`denv_http_requests_total{${k}} ${s.count}`);
    out.push(
      "# HELP denv_http_request_duration_seconds HTTP request durations.",
      "# TYPE denv_http_request_duration_seconds histogram",
    );
    for (const [k, s] of this.requests) {
      for (const [i, b] of BUCKETS.entries()) {
        out.push(`denv_http_request_duration_seconds_bucket{${k},le="${b}"} ${s.buckets[i]}`);
      }
      out.push(`denv_http_request_duration_seconds_bucket{${k},le="+Inf"} ${s.count}`);
      out.push(`denv_http_request_duration_seconds_sum{${k}} ${s.sum}`);
      out.push(`denv_http_request_duration_seconds_count{${k}} ${s.count}`);
    }
    out.push("# HELP denv_hosts_online Hosts with an open stream.", "# TYPE denv_hosts_online gauge");
    out.push(`denv_hosts_online ${gauges.hostsOnline()}`);
    out.push("# HELP denv_deployments Deployments by status.", "# TYPE denv_deployments gauge");
    const byStatus = await gauges.deploymentsByStatus();
    for (const status of ["queued", "running", "succeeded", "failed"]) {
      out.push(`denv_deployments{status="${status}"} ${byStatus[status] ?? 0}`);
    }
    const mem = process.memoryUsage();
    out.push(
      "# HELP denv_process_memory_bytes Process memory by kind.",
      "# TYPE denv_process_memory_bytes gauge",
    );
    for (const [kind, v] of Object.entries(mem)) out.push(`denv_process_memory_bytes{kind="${kind}"} ${v}`);
    return `${out.join("\n")}\n`;
  }
}
