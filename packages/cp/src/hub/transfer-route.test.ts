import { TransferMessages } from "@denv/spec";
import { describe, expect, it } from "vitest";
import { choosePath, directRoute } from "./transfer-route.js";

describe("direct transfer routes", () => {
  it("takes a host's listener only at the address its connection comes from", () => {
    expect(directRoute("b", undefined, "10.0.0.2")).toBeUndefined();
    expect(directRoute("b", "10.0.0.2:7421", "::ffff:10.0.0.2")).toEqual({ address: "10.0.0.2:7421" });
    // "Any address": the connection's own.
    expect(directRoute("b", "0.0.0.0:7421", "10.0.0.2")).toEqual({ address: "10.0.0.2:7421" });
    expect(directRoute("b", "[::]:7421", "fd00::2")).toEqual({ address: "[fd00::2]:7421" });
    // Another machine's address (the cp's own, a database's): never.
    expect(directRoute("b", "127.0.0.1:5432", "10.0.0.2")).toEqual({
      refused: TransferMessages.directAddressRefused("b", "127.0.0.1:5432", "10.0.0.2"),
    });
    expect(directRoute("b", "10.0.0.9:7421", "10.0.0.2")).toEqual({
      refused: TransferMessages.directAddressRefused("b", "10.0.0.9:7421", "10.0.0.2"),
    });
    expect(directRoute("b", "db.internal:7421", "10.0.0.2")).toEqual({
      refused: "host b advertises transfer address 'db.internal:7421', which is not IP:PORT",
    });
    expect(directRoute("b", "10.0.0.2:0", "10.0.0.2")).toMatchObject({ refused: expect.any(String) });
  });

  it("chooses relay, direct or auto's fallback, saying why", () => {
    const route = { address: "10.0.0.2:7421" };
    expect(choosePath("relay", "b", route)).toEqual({
      path: "relay",
      reason: "the control plane's transfer path is relay",
    });
    expect(choosePath("auto", "b", route)).toEqual({
      path: "direct",
      address: "10.0.0.2:7421",
      reason: "auto: b takes direct transfers at 10.0.0.2:7421",
    });
    expect(choosePath("auto", "b", undefined)).toEqual({
      path: "relay",
      reason: "auto: host b has no transfer listener (denvd --transfer-listen); relay",
    });
    expect(choosePath("auto", "b", { refused: "host b advertises ..." })).toEqual({
      path: "relay",
      reason: "auto: host b advertises ...; relay",
    });
    expect(choosePath("auto", "b", route, "connection refused")).toEqual({
      path: "relay",
      reason: "auto: a direct attempt failed (connection refused); relay",
    });
    expect(choosePath("direct", "b", undefined)).toEqual({
      path: "none",
      reason: "host b has no transfer listener (denvd --transfer-listen)",
    });
    expect(choosePath("direct", "b", route, "connection refused")).toMatchObject({ path: "direct" });
  });
});
