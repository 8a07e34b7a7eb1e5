/** One event of a `text/event-stream`. */
export interface ServerSentEvent {
  /** `message` when the event names none. */
  event: string;
  data: string;
  /** The event's `id:` (the last one seen), when the server numbers its events. */
  id?: string;
}

/**
 * Parses a text/event-stream body (the WHATWG format: `event:` and `data:` fields, a blank line
 * ends an event, `:` starts a comment). By hand, because Node has no EventSource before 22 and
 * ours needs an Authorization header.
 */
export async function* parseEventStream(body: AsyncIterable<Uint8Array>): AsyncGenerator<ServerSentEvent> {
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "";
  let data: string[] = [];
  let id: string | undefined;
  let pendingCr = false;

  function* lines(text: string): Generator<string> {
    buffer += text;
    // A \r at the very end may be the first half of \r\n split across chunks.
    let start = 0;
    for (let i = 0; i < buffer.length; i++) {
      const ch = buffer[i];
      if (ch === "\n" && pendingCr && i === start) {
        pendingCr = false;
        start = i + 1;
        continue;
      }
      pendingCr = false;
      if (ch === "\n" || ch === "\r") {
        yield buffer.slice(start, i);
        if (ch === "\r") {
          if (buffer[i + 1] === "\n") i++;
          else if (i + 1 === buffer.length) pendingCr = true;
        }
        start = i + 1;
      }
    }
    buffer = buffer.slice(start);
  }

  function* field(line: string): Generator<ServerSentEvent> {
    if (line === "") {
      if (data.length > 0) {
        yield {
          event: event === "" ? "message" : event,
          data: data.join("\n"),
          id,
        };
      }
      event = "";
      data = [];
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "event") event = value;
    else if (name === "data") data.push(value);
    else if (name === "id" && !value.includes("\0")) id = value;
    // `retry` does not matter here: the caller decides when to reconnect.
  }

  for await (const chunk of body) {
    for (const line of lines(decoder.decode(chunk, { stream: true }))) yield* field(line);
  }
  for (const line of lines(`${decoder.decode()}\n\n`)) yield* field(line);
}
