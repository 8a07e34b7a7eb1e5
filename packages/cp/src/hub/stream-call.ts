import type { CommandKind, CommandResult } from "@denv/spec";
import type { InboundStream, OutboundStream } from "./streams.js";

/** An interactive streamed command: both directions of one stream id, and its result. */
export interface StreamCall<K extends CommandKind> {
  commandId: string;
  streamId: string;
  inbound: InboundStream;
  outbound: OutboundStream;
  result: Promise<CommandResult<K>>;
  /** Forgets the stream; call when the consumer is done with the inbound bytes. */
  close(): void;
}

/**
 * Why a streamed call broke: the host's own error (with its code) when the command failed,
 * else the stream's. A stream fails a moment before its command's result is handled.
 */
export async function callFailure<K extends CommandKind>(
  call: StreamCall<K>,
  streamErr: unknown,
): Promise<unknown> {
  const outcome = await Promise.race([
    call.result.then(
      () => undefined,
      (err: unknown) => err,
    ),
    new Promise<undefined>((r) => setTimeout(() => r(undefined), 200).unref()),
  ]);
  return outcome ?? streamErr;
}
