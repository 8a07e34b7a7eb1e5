import { median } from "../../runtime/dist/stats.js";

/** Percentiles of latency samples (nearest rank), on top of bench/runtime's median. */

export function quantile(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const rank = Math.ceil(q * s.length) - 1;
  return s[Math.min(s.length - 1, Math.max(0, rank))] as number;
}

export interface Latency {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

export function latency(ms: number[]): Latency {
  const mean = ms.length === 0 ? Number.NaN : ms.reduce((a, b) => a + b, 0) / ms.length;
  return {
    n: ms.length,
    p50: median(ms),
    p90: quantile(ms, 0.9),
    p99: quantile(ms, 0.99),
    max: ms.length === 0 ? Number.NaN : Math.max(...ms),
    mean,
  };
}

/** Runs `fn` over `items` with at most `concurrency` calls in flight; results in input order. */
export async function pool<T, R>(
  items: readonly T[],
  concurrency: number,
  fn: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      out[i] = await fn(items[i] as T, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  return out;
}

export const MiB = 1024 ** 2;
