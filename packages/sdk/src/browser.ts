/**
 * @denv/sdk/browser: the part of the client a web page can run (the dashboard, packages/web).
 * No node: modules and no WebSocket library: the read routes and the deployment log (SSE over
 * fetch, since EventSource cannot send an Authorization header). Answers are parsed with the same
 * @denv/spec schemas as DenvClient's, by the same DenvReadClient.
 */
import { HOSTS_PAGE, type Host, HostList } from "@denv/spec";
import { Transport } from "./http.js";
import { DenvReadClient } from "./read-client.js";

export type { DeploymentEvent, FollowOptions } from "./deployments.js";
export { DenvApiError, DenvUnreachableError } from "./errors.js";

export interface BrowserClientOptions {
  /** The control plane's URL: the page's own origin when the control plane serves it. */
  url: string;
  token: string;
}

/** A read-only client of the control plane for a page, holding one user's token. */
export class DenvBrowserClient extends DenvReadClient {
  constructor(options: BrowserClientOptions) {
    // The global fetch must be called unbound: a browser's throws "Illegal invocation" otherwise.
    super(new Transport(options.url, options.token, (input, init) => fetch(input, init)));
  }

  /** Every host the token may list, page by page. */
  async listHosts(): Promise<Host[]> {
    const hosts: Host[] = [];
    let after: string | undefined;
    do {
      const page = await this.http.json("GET", "/v1/hosts", HostList, {
        query: { limit: HOSTS_PAGE.max, after },
      });
      hosts.push(...page.hosts);
      if (page.next !== undefined && after !== undefined && page.next <= after) break;
      after = page.next;
    } while (after !== undefined);
    return hosts;
  }
}
