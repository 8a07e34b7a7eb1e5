export interface StartOrder {
  /** Every service, dependencies first; ties keep file order. */
  order: string[];
  /** Each dependency cycle once, as a path that returns to its first service. */
  cycles: string[][];
}

/** Orders services by `depends_on` (only dependencies that name a defined service). */
export function startOrder(
  names: readonly string[],
  dependencies: ReadonlyMap<string, readonly string[]>,
): StartOrder {
  const placed = new Set<string>();
  const order: string[] = [];
  while (order.length < names.length) {
    const next = names.find((n) => !placed.has(n) && (dependencies.get(n) ?? []).every((d) => placed.has(d)));
    if (next === undefined) break;
    placed.add(next);
    order.push(next);
  }
  // What is left sits on or behind a cycle; it is refused, and kept in file order.
  for (const n of names) if (!placed.has(n)) order.push(n);
  return { order, cycles: findCycles(names, dependencies) };
}

function findCycles(
  names: readonly string[],
  dependencies: ReadonlyMap<string, readonly string[]>,
): string[][] {
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const cycles: string[][] = [];
  const seen = new Set<string>();

  const visit = (name: string): void => {
    state.set(name, "open");
    stack.push(name);
    for (const dep of dependencies.get(name) ?? []) {
      const s = state.get(dep);
      if (s === "open") {
        const cycle = [...stack.slice(stack.indexOf(dep)), dep];
        const key = [...new Set(cycle)].sort().join("\0");
        if (!seen.has(key)) {
          seen.add(key);
          cycles.push(cycle);
        }
      } else if (s === undefined) {
        visit(dep);
      }
    }
    stack.pop();
    state.set(name, "done");
  };

  for (const name of names) if (!state.has(name)) visit(name);
  return cycles;
}
