/**
 * The `@daytonaio/sdk` SDK, loaded at the first call that needs it: denvd in Docker mode never
 * loads it (101 MB with its dependencies; packages/denvd/README.md "Memory"), and a Daytona
 * runtime loads it once.
 */
type DaytonaSdk = typeof import("@daytonaio/sdk");
export type DaytonaClient = import("@daytonaio/sdk").Daytona;
export type DaytonaSandbox = import("@daytonaio/sdk").Sandbox;

let loading: Promise<DaytonaSdk> | undefined;

export function loadDaytona(): Promise<DaytonaSdk> {
  loading ??= import("@daytonaio/sdk");
  return loading;
}

/** How the SDK reaches Daytona: the user's API key, the API's URL and the target (region). */
export interface DaytonaConnection {
  apiKey: string;
  /** Daytona's API (default: the SDK's, https://app.daytona.io/api). */
  apiUrl?: string | undefined;
  /** The region sandboxes are made in (default: the organization's). */
  target?: string | undefined;
}

/** A client of Daytona's API for the connection (keys left undefined are not passed: the SDK reads a present key as set). */
export async function openClient(c: DaytonaConnection): Promise<DaytonaClient> {
  const { Daytona } = await loadDaytona();
  return new Daytona({
    apiKey: c.apiKey,
    ...(c.apiUrl !== undefined ? { apiUrl: c.apiUrl } : {}),
    ...(c.target !== undefined ? { target: c.target } : {}),
  });
}
