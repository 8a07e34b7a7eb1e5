import { describe, expect, it } from "vitest";
import { ComposeNotes, ComposeReasons, Refusal } from "../messages.js";
import { accept, refusals, service } from "./compose-fixture.js";

const svc = Refusal.serviceKey;
const R = ComposeReasons;

describe("networks", () => {
  it("maps networks onto one and notes when services were on different ones", () => {
    const plan = accept(`
services:
  main: {image: x, networks: {front: {aliases: [web]}, back: }}
  db: {image: x, networks: [back]}
networks:
  front:
  back: {driver: bridge, internal: true}
`);
    expect(service(plan, "main").aliases).toEqual(["main", "web"]);
    expect(plan.notes).toEqual([ComposeNotes.networksMerged(["front", "back"])]);
  });

  it("refuses address options", () => {
    expect(
      refusals("services:\n  main: {image: x, networks: {n: {ipv4_address: 10.0.0.2}}}\nnetworks: {n: }\n"),
    ).toEqual([svc("main", "networks.n.ipv4_address", R.networkOption("ipv4_address"))]);
  });
});
