import { describe, expect, it } from "vitest";
import { parseEventStream } from "./sse.js";

async function parse(chunks: string[]) {
  const out = [];
  const bytes = (async function* () {
    for (const c of chunks) yield new TextEncoder().encode(c);
  })();
  for await (const e of parseEventStream(bytes)) out.push(e);
  return out;
}

describe("parseEventStream", () => {
  it("parses events, multi-line data and comments, split anywhere", async () => {
    const text = ': hello\n\nevent: phase\ndata: {"a":1}\n\ndata: one\ndata: two\n\nevent:done\ndata:x\n\n';
    const expected = [
      { event: "phase", data: '{"a":1}' },
      { event: "message", data: "one\ntwo" },
      { event: "done", data: "x" },
    ];
    expect(await parse([text])).toEqual(expected);
    expect(await parse(text.split(""))).toEqual(expected);
    expect(await parse([text.replaceAll("\n", "\r\n")])).toEqual(expected);
    expect(await parse(text.replaceAll("\n", "\r\n").split(""))).toEqual(expected);
  });
});
