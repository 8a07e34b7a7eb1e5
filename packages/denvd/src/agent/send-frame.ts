import type { RawFrame } from "@denv/spec/protocol/frames";

/**
 * Sends a frame on the current connection (false: there is none). `sent`, when given, is called
 * once the frame's bytes have left this process or will never leave: a writer may then reuse
 * the buffer they were in.
 */
export type SendFrame = (frame: RawFrame, sent?: () => void) => boolean;
