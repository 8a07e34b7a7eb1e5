import { useCallback, useEffect, useRef, useState } from "react";

export interface Loaded<T> {
  data: T | undefined;
  error: Error | undefined;
  loading: boolean;
  reload: () => void;
}

/**
 * Loads `fn` and, with `everyMs`, again while the page shows it (the live status of
 * environments, hosts and sandboxes). `key` changes restart it.
 */
export function useData<T>(fn: () => Promise<T>, key: string, everyMs?: number): Loaded<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<Error>();
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const fnRef = useRef(fn);
  fnRef.current = fn;
  const reload = useCallback(() => setTick((t) => t + 1), []);

  // biome-ignore lint/correctness/useExhaustiveDependencies: key and tick are what restart the load
  useEffect(() => {
    let live = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      try {
        const value = await fnRef.current();
        if (!live) return;
        setData(value);
        setError(undefined);
      } catch (err) {
        if (!live) return;
        setError(err instanceof Error ? err : new Error(String(err)));
      } finally {
        if (live) setLoading(false);
      }
      if (live && everyMs !== undefined) timer = setTimeout(run, everyMs);
    };
    setLoading(true);
    void run();
    return () => {
      live = false;
      if (timer !== undefined) clearTimeout(timer);
    };
  }, [key, tick, everyMs]);

  return { data, error, loading, reload };
}
