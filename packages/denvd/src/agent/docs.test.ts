import { readFileSync } from "node:fs";
import {
  CommandKind,
  CommandPayloads,
  CommandResults,
  decodeBinaryData,
  ExecResponse,
  encodeBinaryData,
  Frame,
  HostPhaseName,
  HostPhases,
  PhaseEvidence,
  parseFrame,
  Version,
} from "@denv/spec";
import { describe, expect, it } from "vitest";
import type { z } from "zod";
import { USAGE } from "../commands/usage.js";

/** docs/reference/denvd.md and protocol.md, checked against the code they describe. */

const read = (rel: string) => readFileSync(new URL(`../../../../${rel}`, import.meta.url), "utf8");
const denvdDoc = read("docs/reference/denvd.md");
const protocolDoc = read("docs/reference/protocol.md");

interface Block {
  h2: string;
  h3: string;
  /** The paragraph line just before the block ("Payload:", "Result:", ...). */
  label: string;
  lang: string;
  text: string;
}

function blocks(markdown: string): Block[] {
  const out: Block[] = [];
  let h2 = "";
  let h3 = "";
  let label = "";
  const lines = markdown.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    if (line.startsWith("## ")) [h2, h3] = [line.slice(3), ""];
    else if (line.startsWith("### ")) h3 = line.slice(4);
    else if (line.startsWith("```")) {
      const body: string[] = [];
      for (i++; i < lines.length && !(lines[i] as string).startsWith("```"); i++)
        body.push(lines[i] as string);
      out.push({ h2, h3, label, lang: line.slice(3), text: body.join("\n") });
    } else if (line.trim() && !line.trim().startsWith("<!--")) label = line.trim(); // a block's marker is no label
  }
  return out;
}

/** "`env.stop`, `env.start`" -> ["env.stop", "env.start"] */
const names = (heading: string) => [...heading.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);

describe("docs/reference/denvd.md", () => {
  it("shows denvd --help verbatim", () => {
    expect(denvdDoc).toContain(`\`\`\`text\n${USAGE}\`\`\``);
  });

  it("lists every variable the configuration reads", () => {
    const config = read("packages/denvd/src/config.ts");
    const vars = new Set(config.match(/DENVD_[A-Z_]+/g));
    expect(vars.size).toBeGreaterThanOrEqual(7);
    for (const v of vars) expect(denvdDoc).toContain(`| \`${v}\``);
  });

  it("shows the unit's settings as deploy/denvd.service has them", () => {
    const unit = read("deploy/denvd.service");
    for (const line of [
      "ExecStart=/usr/bin/env node --max-semi-space-size=1 /usr/local/bin/denvd run",
      "KillMode=mixed",
      "Restart=always",
      "After=docker.service",
    ]) {
      expect(unit).toContain(line);
      expect(denvdDoc).toContain(line.split(" ")[0]?.split("=")[0] as string);
    }
  });
});

describe("docs/reference/protocol.md", () => {
  const all = blocks(protocolDoc).filter((b) => b.lang === "json");

  it("has an example of every frame, each a valid frame of its heading's type", () => {
    const frames = all.filter((b) => b.h2 === "Frames");
    const types = Frame.options.map((o) => o.shape.type.value);
    for (const type of types) expect(frames.some((b) => b.h3 === `\`${type}\``)).toBe(true);
    for (const b of frames) expect(parseFrame(JSON.stringify(JSON.parse(b.text))).type).toBe(names(b.h3)[0]);
  });

  it("shows the data frame example as the binary frame the codec makes of it", () => {
    const hex = blocks(protocolDoc).find((b) => b.h2 === "Binary data frames" && b.lang === "text");
    const json = all.find((b) => b.h2 === "Frames" && b.h3 === "`data`");
    const frame = parseFrame(JSON.stringify(JSON.parse(json?.text ?? "")));
    if (frame.type !== "data") throw new Error("the data example is not a data frame");
    const raw = { ...frame, data: Buffer.from(frame.data, "base64") };
    const bytes = Buffer.from((hex?.text ?? "").replace(/\s+/g, ""), "hex");
    expect(Buffer.from(encodeBinaryData(raw) ?? []).toString("hex")).toBe(bytes.toString("hex"));
    expect({ ...decodeBinaryData(bytes), data: "" }).toEqual({ ...raw, data: "" });
    expect(protocolDoc).toContain(
      "protocol: binary data frame of 3 bytes: shorter than the 13-byte minimum header",
    );
    expect(() => decodeBinaryData(new Uint8Array([0xd1, 4, 0]))).toThrow(
      "protocol: binary data frame of 3 bytes: shorter than the 13-byte minimum header",
    );
  });

  it("documents every command kind with a payload its schema accepts", () => {
    const commands = all.filter((b) => b.h2 === "Commands");
    for (const kind of CommandKind.options) {
      const own = commands.filter((b) => names(b.h3).includes(kind));
      expect(own.length, kind).toBeGreaterThan(0);
      const payload = own.find((b) => b.label !== "Result:") as Block;
      expect(CommandPayloads[kind].safeParse(JSON.parse(payload.text)).error, kind).toBeUndefined();
    }
  });

  it("shows results in the shapes the host sends", () => {
    const result = (kind: string) =>
      JSON.parse(
        (
          all.find(
            (b) => b.h2 === "Commands" && names(b.h3).includes(kind) && b.label.startsWith("Result"),
          ) as Block
        ).text,
      ) as Record<string, unknown>;
    expect(Version.safeParse(result("env.snapshot")).error).toBeUndefined();
    expect(ExecResponse.safeParse(result("env.exec")).error).toBeUndefined();
    const results = all.filter((b) => b.h2 === "Commands" && b.label.startsWith("Result"));
    expect(results.length).toBeGreaterThanOrEqual(10);
    for (const b of results) {
      const kind = names(b.h3)[0] as CommandKind;
      expect(CommandResults[kind].safeParse(JSON.parse(b.text)).error, kind).toBeUndefined();
    }
    expect(Object.keys(result("env.deploy"))).toEqual([
      "id",
      "project",
      "name",
      "status",
      "agent",
      "services",
      "network",
      "evidence",
    ]);
  });

  it("lists every phase a host reports, the kinds that report it and its evidence", () => {
    const rows = new Map(
      [...protocolDoc.matchAll(/^\| `([a-z ]+)` +\| (.+?) +\| (.+?) +\|$/gm)].map((m) => [
        m[1] as string,
        { kinds: names(m[2] as string), evidence: names(m[3] as string) },
      ]),
    );
    const topKeys = (schema: z.ZodType): string[] => {
      const def = schema._zod.def as { shape?: object; options?: z.ZodType[] };
      return def.shape ? Object.keys(def.shape) : (def.options ?? []).flatMap(topKeys);
    };
    for (const phase of HostPhaseName.options) {
      const row = rows.get(phase);
      expect(row, phase).toBeDefined();
      const reporting = CommandKind.options.filter((k) =>
        (HostPhases[k] as readonly string[]).includes(phase),
      );
      expect(row?.kinds, phase).toEqual(reporting);
      for (const key of topKeys(PhaseEvidence[phase])) expect(row?.evidence, phase).toContain(key);
    }
  });

  it("quotes the journal's interrupted messages and the version refusal as the code says them", () => {
    const reconcile = read("packages/denvd/src/agent/reconcile.ts");
    for (const m of reconcile.matchAll(/const (?:ROLLED_BACK|STOPPED) = "([^"]+)"/g)) {
      expect(protocolDoc.replace(/\n/g, " ")).toContain(m[1] as string);
    }
    expect(protocolDoc).toContain("protocol: frame version N is not 1; upgrade the older side");
    expect(() => parseFrame('{"v":2,"type":"heartbeat","ts":1}')).toThrow(
      "protocol: frame version 2 is not 1; upgrade the older side",
    );
  });
});
