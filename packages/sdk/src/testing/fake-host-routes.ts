import {
  ControlPlaneMessages,
  CreateJoinToken,
  DenvError,
  HOSTS_PAGE,
  HostMessages,
  TargetKind,
} from "@denv/spec";
import { parse, type Route, route as r, readJson, send } from "./fake-http.js";
import type { FakeState } from "./fake-state.js";

/** Targets, join tokens and hosts of the fake control plane. */

const now = () => new Date().toISOString();

export function hostRoutes(state: FakeState): Route[] {
  const host = (id: string) => {
    const h = state.hosts.get(id);
    if (h === undefined) throw new DenvError("not_found", `host ${id} not found`);
    return h;
  };
  const target = (name: string) => {
    if (!state.targets.has(name)) throw new DenvError("not_found", `target '${name}' does not exist`);
    return name;
  };
  return [
    r("POST", "/v1/targets", "admin", async (ctx) => {
      const body = await readJson(ctx.req);
      const kind = parse(TargetKind, body.kind);
      if (kind !== "hosts")
        throw new DenvError("invalid_request", ControlPlaneMessages.targetKindNotAvailable(kind));
      const name = String(body.name ?? "");
      if (state.targets.has(name)) throw new DenvError("conflict", `target '${name}' exists`);
      const created = { ...(state.targets.get("local") ?? ({} as never)), name, created_at: now() };
      state.targets.set(name, created);
      send(ctx.res, 201, created);
    }),
    r("GET", "/v1/targets", "token", (ctx) => send(ctx.res, 200, { targets: [...state.targets.values()] })),
    r("POST", "/v1/targets/:t/join-tokens", "admin", async (ctx) => {
      const t = target(ctx.params[0] ?? "");
      const body = parse(CreateJoinToken, await readJson(ctx.req));
      const token = {
        id: state.nextId("jt"),
        target: t,
        uses_left: body.uses,
        expires_at: new Date(Date.now() + body.ttl_sec * 1000).toISOString(),
        created_at: now(),
      };
      state.joinTokens.set(token.id, token);
      send(ctx.res, 201, { ...token, token: `join-${state.nextId("secret")}` });
    }),
    r("GET", "/v1/targets/:t/join-tokens", "admin", (ctx) => {
      const t = target(ctx.params[0] ?? "");
      send(ctx.res, 200, { join_tokens: [...state.joinTokens.values()].filter((j) => j.target === t) });
    }),
    r("DELETE", "/v1/targets/:t/join-tokens/:id", "admin", (ctx) => {
      const [t = "", id = ""] = ctx.params;
      const token = state.joinTokens.get(id);
      if (token?.target !== target(t)) throw new DenvError("not_found", `join token ${id} not found`);
      token.revoked_at ??= now();
      send(ctx.res, 204);
    }),
    // Pages by id, as the control plane's: `limit` (default 100) hosts after `after`, `next` when more follow.
    r("GET", "/v1/hosts", "token", (ctx) => {
      const limit = Number(ctx.url.searchParams.get("limit") ?? HOSTS_PAGE.default);
      const after = ctx.url.searchParams.get("after");
      const all = [...state.hosts.values()]
        .filter((h) => after === null || h.id > after)
        .sort((a, b) => (a.id < b.id ? -1 : 1));
      const hosts = all.slice(0, limit);
      const next = all.length > limit ? hosts.at(-1)?.id : undefined;
      send(ctx.res, 200, { hosts, ...(next === undefined ? {} : { next }) });
    }),
    r("POST", "/v1/hosts/:id/drain", "admin", (ctx) => {
      const h = host(ctx.params[0] ?? "");
      h.draining = true;
      send(ctx.res, 200, h);
    }),
    r("DELETE", "/v1/hosts/:id", "admin", (ctx) => {
      const h = host(ctx.params[0] ?? "");
      const held = [...state.environments.values()].filter(
        (e) => e.host_id === h.id && e.status !== "destroyed",
      );
      if (held.length > 0 && ctx.url.searchParams.get("force") !== "true")
        throw new DenvError("conflict", HostMessages.holdsEnvironments(h.id, held.length));
      for (const e of held) {
        e.status = "failed";
        e.reachable = false;
        delete e.host_id;
      }
      const versions = [...state.versions.values()].filter((v) => v.host_id === h.id).map((v) => v.id);
      for (const v of versions) state.versions.delete(v);
      state.hosts.delete(h.id);
      send(ctx.res, 200, { id: h.id, environments: held.map((e) => e.id), versions, replicas_dropped: [] });
    }),
  ];
}
