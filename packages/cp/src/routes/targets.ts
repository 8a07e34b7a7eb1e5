import {
  CreateJoinToken,
  CreateTarget,
  JoinToken,
  JoinTokenList,
  MachineList,
  Target,
  TargetKindList,
  TargetList,
} from "@denv/spec";
import { z } from "zod";
import { type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

const TargetParams = z.object({ target: z.string() });

export function targetRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "GET",
      path: "/v1/targets/kinds",
      summary:
        "The target kinds: each one's capabilities, settings and credentials, and whether this control plane has its driver",
      tag: "targets",
      auth: "token",
      responses: [{ status: 200, description: "The capability table", schema: TargetKindList }],
      handler: async () => ({ status: 200, body: { kinds: s.targets.kinds() } }),
    }),
    route({
      kind: "json",
      method: "POST",
      path: "/v1/targets",
      summary:
        "Create a target of a kind this control plane has a driver for, with its settings and credentials (stored encrypted, never returned)",
      tag: "targets",
      auth: "admin",
      body: CreateTarget,
      responses: [{ status: 201, description: "The target", schema: Target }],
      handler: async ({ principal, body }) => ({
        status: 201,
        body: await s.targets.create(principal, body),
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/targets",
      summary: "List targets: all of them for an admin, those of the hosts it may list for other tokens",
      tag: "targets",
      auth: "token",
      responses: [{ status: 200, description: "The targets", schema: TargetList }],
      handler: async ({ principal }) => ({ status: 200, body: { targets: await s.targets.list(principal) } }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/targets/:target",
      summary: "A target: its kind's capabilities, its settings and the names of its credentials",
      tag: "targets",
      auth: "admin",
      params: TargetParams,
      responses: [{ status: 200, description: "The target", schema: Target }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: await s.targets.show(principal, params.target),
      }),
    }),
    route({
      kind: "json",
      method: "DELETE",
      path: "/v1/targets/:target",
      summary:
        "Remove a target that has no hosts and no machines left (?force=true: a provisioned target's machines are deleted first)",
      tag: "targets",
      auth: "admin",
      params: TargetParams,
      query: z.object({ force: z.stringbool().optional() }),
      responses: [{ status: 204, description: "Removed" }],
      handler: async ({ principal, params, query }) => {
        await s.targets.remove(principal, params.target, query.force === true);
        return { status: 204 };
      },
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/targets/:target/machines",
      summary: "The machines a provisioned target created, with their status and cost class",
      tag: "targets",
      auth: "admin",
      params: TargetParams,
      responses: [{ status: 200, description: "The machines, oldest first", schema: MachineList }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: { machines: await s.targets.machines(principal, params.target) },
      }),
    }),
    route({
      kind: "json",
      method: "POST",
      path: "/v1/targets/:target/reconcile",
      summary:
        "Reconcile a provisioned target with its provider now (the loop does it every --provision-interval-ms)",
      tag: "targets",
      auth: "admin",
      params: TargetParams,
      responses: [{ status: 204, description: "Reconciled" }],
      handler: async ({ principal, params }) => {
        await s.targets.reconcile(principal, params.target);
        return { status: 204 };
      },
    }),
    route({
      kind: "json",
      method: "POST",
      path: "/v1/targets/:target/join-tokens",
      summary: "Create a join token for hosts of the target (its secret is shown once)",
      tag: "targets",
      auth: "admin",
      params: TargetParams,
      body: CreateJoinToken,
      responses: [{ status: 201, description: "The join token, with `token` set", schema: JoinToken }],
      handler: async ({ principal, params, body }) => ({
        status: 201,
        body: await s.targets.createJoinToken(principal, params.target, body),
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/targets/:target/join-tokens",
      summary: "List the target's join tokens, revoked ones included (never their secrets)",
      tag: "targets",
      auth: "admin",
      params: TargetParams,
      responses: [{ status: 200, description: "The join tokens, without `token`", schema: JoinTokenList }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: { join_tokens: await s.targets.listJoinTokens(principal, params.target) },
      }),
    }),
    route({
      kind: "json",
      method: "DELETE",
      path: "/v1/targets/:target/join-tokens/:id",
      summary: "Revoke a join token: it joins no more hosts (hosts that joined with it stay)",
      tag: "targets",
      auth: "admin",
      params: z.object({ target: z.string(), id: z.string() }),
      responses: [{ status: 204, description: "Revoked (also when it already was)" }],
      handler: async ({ principal, params }) => {
        await s.targets.revokeJoinToken(principal, params.target, params.id);
        return { status: 204 };
      },
    }),
    // What a new machine fetches before it has any credential: public, like the binaries of a
    // release. The script carries the bundle's SHA-256 and checks what it downloads against it.
    route({
      kind: "raw",
      method: "GET",
      path: "/v1/install/install.sh",
      summary: "The denvd install script of this control plane (what provisioned machines run)",
      tag: "targets",
      auth: "none",
      responses: [
        { status: 200, description: "A POSIX shell script", contentType: "text/x-shellscript" },
        { status: 404, description: "The denvd bundle is not built" },
      ],
      handler: async ({ reply }) => {
        const script = await s.targets.installScript(s.publicUrl);
        await reply.type("text/x-shellscript; charset=utf-8").send(script);
      },
    }),
    route({
      kind: "raw",
      method: "GET",
      path: "/v1/install/denvd.mjs",
      summary: "The denvd bundle (one file) of this control plane's version",
      tag: "targets",
      auth: "none",
      responses: [
        { status: 200, description: "The bundle (an ES module for node 20)", contentType: "text/javascript" },
        { status: 404, description: "The denvd bundle is not built" },
      ],
      handler: async ({ reply }) => {
        const b = await s.targets.bundle();
        await reply
          .header("x-denv-version", b.version)
          .header("x-denv-sha256", b.sha256)
          .type("text/javascript; charset=utf-8")
          .send(b.bytes);
      },
    }),
  ];
}
