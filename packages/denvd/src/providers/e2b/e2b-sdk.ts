/**
 * The `e2b` SDK, loaded at the first call that needs it: denvd in Docker mode never loads it
 * (its idle memory, packages/denvd/README.md "Memory"), and a provider runtime loads it once.
 */
/** The SDK's named exports (its `default`, the Sandbox class again, is not used). */
type E2bSdk = Omit<typeof import("e2b"), "default">;
export type E2bSandbox = import("e2b").Sandbox;

let loading: Promise<E2bSdk> | undefined;

export function loadE2b(): Promise<E2bSdk> {
  loading ??= import("e2b");
  return loading;
}

/** How the SDK reaches E2B: the user's API key, and the API and sandbox URLs or domain. */
export interface E2bConnection {
  apiKey: string;
  /** E2B's control API (default: the SDK's, https://api.<domain>). */
  apiUrl?: string | undefined;
  /** Where the SDK reaches envd in each sandbox (a local double; default: per sandbox at <domain>). */
  sandboxUrl?: string | undefined;
  domain?: string | undefined;
}

/** The connection as SDK options, without keys left undefined (the SDK reads a present key as set). */
export function sdkOptions(c: E2bConnection): {
  apiKey: string;
  apiUrl?: string;
  sandboxUrl?: string;
  domain?: string;
} {
  return {
    apiKey: c.apiKey,
    ...(c.apiUrl !== undefined ? { apiUrl: c.apiUrl } : {}),
    ...(c.sandboxUrl !== undefined ? { sandboxUrl: c.sandboxUrl } : {}),
    ...(c.domain !== undefined ? { domain: c.domain } : {}),
  };
}
