import { ImportMessages } from "./import.js";

/**
 * `denv import karotte`: what cannot be mapped from a Karotte environment folder to a denv project
 * folder. One line naming the file and the key (python/src/denv/messages.py mirrors them).
 */
export const KarotteMessages = {
  missingFile: (file: string) => `${file}: missing; a Karotte environment needs it`,
  ...ImportMessages,
} as const;
