import type { DenvBrowserClient } from "@denv/sdk/browser";
import type { WhoAmI } from "@denv/spec";
import { createContext, useContext } from "react";

export interface Session {
  client: DenvBrowserClient;
  who: WhoAmI;
}

export const SessionContext = createContext<Session | undefined>(undefined);

export function useSession(): Session {
  const s = useContext(SessionContext);
  if (s === undefined) throw new Error("useSession outside a signed-in page");
  return s;
}
