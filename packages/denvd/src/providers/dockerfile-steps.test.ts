import { describe, expect, it } from "vitest";
import { imageDefaults } from "./dockerfile-steps.js";

describe("imageDefaults", () => {
  it("reads the last stage's ENTRYPOINT, CMD, USER and WORKDIR, exec form as an argv and shell form as a line", () => {
    const text = [
      "FROM debian:bookworm-slim",
      "WORKDIR /srv",
      "WORKDIR app",
      "USER redis",
      'ENTRYPOINT ["/usr/local/bin/db-entrypoint"]',
      "CMD --port \\",
      "  6379",
    ].join("\n");
    expect(imageDefaults(text)).toEqual({
      entrypoint: ["/usr/local/bin/db-entrypoint"],
      cmd: "--port    6379",
      user: "redis",
      workdir: "/srv/app",
    });
  });

  it("starts a stage from the stage it names, and from nothing for an image of the registry", () => {
    const text = [
      "FROM debian:bookworm-slim AS base",
      "USER 1000",
      'CMD ["sleep", "infinity"]',
      "FROM base",
      "WORKDIR /w",
      "FROM debian:bookworm-slim AS other",
    ].join("\n");
    expect(imageDefaults(text)).toEqual({});
    expect(imageDefaults(text.split("\n").slice(0, 5).join("\n"))).toEqual({
      user: "1000",
      cmd: ["sleep", "infinity"],
      workdir: "/w",
    });
  });

  it("drops a CMD the stage inherited when it sets an ENTRYPOINT, not one it set itself", () => {
    const inherited = 'FROM debian AS a\nCMD ["a"]\nFROM a\nENTRYPOINT ["e"]\n';
    expect(imageDefaults(inherited)).toEqual({ entrypoint: ["e"] });
    const own = 'FROM debian\nCMD ["c"]\nENTRYPOINT ["e"]\n';
    expect(imageDefaults(own)).toEqual({ entrypoint: ["e"], cmd: ["c"] });
  });

  it("takes a malformed exec form as a shell line, as Docker does", () => {
    expect(imageDefaults('FROM x\nCMD ["unterminated\n').cmd).toBe('["unterminated');
  });
});
