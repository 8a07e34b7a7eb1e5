import { access } from "node:fs/promises";
import { ErrorResponse, ExitCodes, JoinRequest, JoinResponse } from "@denv/spec";
import { hostFilePath, readHostFile, writeHostFile } from "../agent/host-file.js";
import { type DenvdConfig, insecureUrlRefusal } from "../config.js";
import type { Output } from "./output.js";

/**
 * `denvd join --url URL --token JOIN_TOKEN`: trades a join token for this host's id and
 * credential, and keeps them in <state-dir>/host.json (0600). The token and the credential are
 * never printed.
 */
export async function join(config: DenvdConfig, out: Output): Promise<number> {
  if (!config.url)
    return out.fail("join needs --url URL (or DENVD_URL): the control plane's address", ExitCodes.usage);
  const refusal = insecureUrlRefusal(config.url, config.insecure);
  if (refusal) return out.fail(refusal, ExitCodes.usage);
  if (!config.joinToken)
    return out.fail(
      "join needs --token JOIN_TOKEN (or DENVD_TOKEN): create one with `denv join-token create`",
      ExitCodes.usage,
    );
  const path = hostFilePath(config.stateDir);
  if (!config.force && (await exists(path))) {
    const prior = await readHostFile(config.stateDir).catch(() => undefined);
    return out.fail(
      `this host already joined${prior ? ` target ${prior.target} as ${prior.host_id}` : ""} (${path}): pass --force to join again`,
    );
  }
  const request = JoinRequest.parse({
    token: config.joinToken,
    name: config.name || undefined,
    labels: config.labels,
  });
  const endpoint = `${config.url}/v1/hosts/join`;
  let res: Response;
  try {
    res = await fetch(endpoint, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(request),
      signal: AbortSignal.timeout(30_000),
    });
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    const why = cause?.code ?? cause?.message ?? (err as Error).message;
    return out.fail(
      `cannot reach the control plane at ${config.url} (${why}): check --url and that denv-cp is running`,
    );
  }
  const text = await res.text();
  if (!res.ok) {
    const body = safeJson(text);
    const parsed = ErrorResponse.safeParse(body);
    const message = parsed.success ? parsed.data.error.message : text.slice(0, 300) || res.statusText;
    return out.fail(`the control plane refused to join this host (${res.status}): ${message}`);
  }
  const joined = JoinResponse.safeParse(safeJson(text));
  if (!joined.success) {
    return out.fail(
      `the control plane at ${config.url} answered the join with something that is not a JoinResponse`,
    );
  }
  const { host_id, credential, target } = joined.data;
  const file = await writeHostFile(config.stateDir, { url: config.url, host_id, credential, target });
  out.result(
    { host_id, target, url: config.url, host_file: file },
    [
      `joined target ${target} as host ${host_id}`,
      `credential saved to ${file} (mode 0600)`,
      "start the sidecar: systemctl enable --now denvd (or: denvd run)",
    ].join("\n"),
  );
  return ExitCodes.ok;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}
