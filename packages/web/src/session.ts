import { DenvBrowserClient } from "@denv/sdk/browser";

/**
 * The API token lives in sessionStorage: it survives a reload of the tab and is gone when the tab
 * is closed; it is never put in a URL, a cookie or localStorage. Every request of the page goes
 * through the client made from it, to this page's own origin (the control plane that served it).
 */
const KEY = "denv.token";

export function savedToken(): string | undefined {
  return sessionStorage.getItem(KEY) ?? undefined;
}

export function saveToken(token: string): void {
  sessionStorage.setItem(KEY, token);
}

export function forgetToken(): void {
  sessionStorage.removeItem(KEY);
}

export function clientFor(token: string): DenvBrowserClient {
  return new DenvBrowserClient({ url: window.location.origin, token });
}
