import { describe, expect, it } from "vitest";
import { parseBytes, parseDuration } from "./units.js";

describe("units", () => {
  it("reads compose durations and sizes", () => {
    expect(parseDuration("1m30s")).toBe(90_000);
    expect(parseDuration("1h2m3.5s")).toBe(3_723_500);
    expect(parseDuration("500ms")).toBe(500);
    expect(parseDuration("250us")).toBe(0);
    expect(parseDuration(0)).toBe(0);
    expect(parseDuration("10")).toBeUndefined();
    expect(parseDuration(10)).toBeUndefined();
    expect(parseDuration("1d")).toBeUndefined();
    expect(parseBytes("512m")).toBe(512 * 1024 ** 2);
    expect(parseBytes("1g")).toBe(1024 ** 3);
    expect(parseBytes("1.5GiB")).toBe(1.5 * 1024 ** 3);
    expect(parseBytes("2kb")).toBe(2048);
    expect(parseBytes("1024")).toBe(1024);
    expect(parseBytes(4096)).toBe(4096);
    expect(parseBytes("lots")).toBeUndefined();
  });
});
