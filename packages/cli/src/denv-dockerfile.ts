import { AGENT_UID, VERIFIER_UID } from "./harbor-task.js";

/** The Dockerfile 'denv import harbor' writes next to the task's own. */
export const GENERATED_DOCKERFILE = "Dockerfile.denv";

/** The last WORKDIR of a Dockerfile when it is an absolute path without variables. */
export function dockerfileWorkdir(dockerfile: string): string | undefined {
  const found = [...dockerfile.matchAll(/^\s*WORKDIR\s+(\S+)\s*$/gim)].map((m) => m[1] ?? "");
  const last = found.at(-1)?.replace(/^["']|["']$/g, "");
  return last?.startsWith("/") && !last.includes("$") ? last : undefined;
}

/**
 * The task's Dockerfile followed by one root step: the users agent (1000) and verifier (1001),
 * Harbor's folders, and the workdir owned by DENV_WORKDIR_OWNER (the agent in the agent's
 * image, the verifier in the verifier's image, which copies the submission back there).
 */
export function denvDockerfile(
  dockerfile: string,
  workdir: string,
  extraDirs: string[] = [],
  opts: { root?: boolean } = {},
): string {
  const users = [
    [AGENT_UID, "agent"],
    [VERIFIER_UID, "verifier"],
  ]
    .map(
      ([uid, name]) =>
        `getent passwd ${uid} >/dev/null 2>&1 || useradd -m -u ${uid} -U -s /bin/sh ${name} 2>/dev/null || { echo '${name}:x:${uid}:${uid}::/home/${name}:/bin/sh' >> /etc/passwd; echo '${name}:x:${uid}:' >> /etc/group; mkdir -p /home/${name}; chown ${uid}:${uid} /home/${name}; };`,
    )
    .join(" ");
  const w = [workdir, ...extraDirs].map((d) => `'${d.replace(/'/g, "'\\''")}'`).join(" ");
  if (opts.root) {
    // A root agent (confined by gVisor) and a root verifier find the image's owners as Harbor's
    // docker backend leaves them: only Harbor's folders are added.
    return `${dockerfile.replace(/\n+$/, "")}

# Added by 'denv import harbor': Harbor's folders (the agent and the verifier are root).
USER root
RUN mkdir -p ${w} /logs/agent /logs/artifacts /logs/verifier /tests /solution
WORKDIR ${workdir}
`;
  }
  return `${dockerfile.replace(/\n+$/, "")}

# Added by 'denv import harbor': users and Harbor's folders for a non-root agent and verifier.
USER root
ARG DENV_WORKDIR_OWNER=${AGENT_UID}
RUN set -e; ${users} mkdir -p ${w} /logs/agent /logs/artifacts /logs/verifier /tests /solution; chown -R \${DENV_WORKDIR_OWNER}:\${DENV_WORKDIR_OWNER} ${w}; chown -R ${AGENT_UID}:${AGENT_UID} /logs/agent /logs/artifacts /solution; chown ${VERIFIER_UID}:${VERIFIER_UID} /logs/verifier /tests; chmod 755 /logs /logs/verifier /tests
WORKDIR ${workdir}
`;
}
