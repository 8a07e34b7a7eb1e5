/** Lines of the hosts, of what denvd refuses, and of version transfers between hosts. */

/** What a host refuses of a project, whatever its compose file says. */
export const HostRefusals = {
  /** A deploy under an environment name the host already holds. */
  environmentExists: (id: string) =>
    `environment ${id} exists: destroy it first, or deploy under another name`,
  /** A fork under an environment name the host already holds. */
  forkExists: (id: string) => `environment ${id} exists: choose another fork name`,
  /** A host that bridges to a hosted provider has no Docker engine of denv's own for this. */
  needsEngine: (what: string, hostId: string) =>
    `refused: ${what} needs denv's own runtime on a Docker engine, and host ${hostId} is a bridge to a hosted provider; use a host of a hosts or provisioned target`,
  /** The project's kind, set by an admin, is authoritative over the file's x-denv.kind. */
  kindMismatch: (project: string, kind: string, asked: string) =>
    `refused: project '${project}' is of kind ${kind}, and its compose file asks for x-denv.kind: ${asked}; a project's kind is set by an admin when the project is created (denv projects create ${project} --kind ${asked}), never by its file`,
  /** x-denv.disk asked for a cap this host has no way to enforce. */
  diskUnenforceable: (what: string, why: string) =>
    `refused: x-denv.disk caps ${what}, and this host cannot enforce it (${why}); remove the cap or deploy on a host that can`,
  /** Images denvd built are scoped to their project: no project runs another's build. */
  /** x-denv.agent.sandbox asked for a runtime the host's engine does not have. */
  sandboxUnavailable: (sandbox: string, runtime: string) =>
    `refused: x-denv.agent.sandbox is ${sandbox}, and this host's Docker engine has no '${runtime}' runtime (scripts/setup-host registers it); deploy on a host that has it`,
  foreignImage: (image: string, owner: string) =>
    `refused: image '${image}' was built on this host for project '${owner}'; a project runs only its own builds and images denv did not build`,
} as const;

/** POST /v1/hosts/join refusals (401), exactly these strings. */
export const JoinTokenMessages = {
  invalid: "join token is not valid",
  expired: "join token is expired",
  usedUp: "join token is used up",
  revoked: "join token is revoked",
} as const;

/** Draining and removing hosts, and host credentials where they do not belong. */
export const HostMessages = {
  /** DELETE /v1/hosts/:id without ?force=true (409). */
  holdsEnvironments: (host: string, count: number) =>
    `host ${host} holds ${count} environment(s): destroy them first, or pass ?force=true (denv hosts rm ${host} --force) to mark them failed and remove it anyway`,
  /** Placement: every online host of the target is draining. */
  allDraining: (target: string) =>
    `no host in target '${target}' takes new environments: its online hosts are draining; join another with denvd join --url URL --token TOKEN`,
  /** A stream credential that is not (or no longer) a host's: never joined, or the host was removed. */
  credentialInvalid: "host credential is not valid: join again with denvd join",
  /** A host credential sent to a REST route: it opens the host stream only. */
  credentialNotApiToken:
    "a host credential is not an API token: it opens GET /v1/hosts/stream only; send an API token (denv_...)",
  /** GET /v1/hosts?limit= that is not a whole number in range (400). */
  pageLimit: (max: number) => `limit must be a whole number from 1 to ${max}`,
  /** GET /v1/hosts?after= that cannot be a host id (400): it takes the `next` of a page. */
  pageAfter: "after must be a host id: pass the next of the previous page",
} as const;

/** Version transfers between hosts (a fork placed where its version is not). */
export const TransferMessages = {
  /** Every attempt failed; what the receiver staged was discarded and nothing was registered there. */
  failed: (version: string, from: string, to: string, why: string) =>
    `the transfer of ${version} from host ${from} to host ${to} failed: ${why}; nothing of it was kept on ${to}`,
  /** A direct connection to a host's transfer listener, refused before any byte of a version. */
  directRefused: (why: string) => `version transfer: direct connection refused: ${why}`,
  directNoTicket: "no ticket",
  directWrongTicket: "the ticket is not one this host was given",
  directUsedTicket: "the ticket was used already",
  directExpiredTicket: "the ticket expired",
  /** A direct receive whose sender never came. */
  directNoSender: (version: string, from: string) =>
    `version transfer: ${from} did not connect with its ticket for ${version} before the ticket expired`,
  directOtherVersion: (version: string, from: string) => `the ticket is not for ${version} from ${from}`,
  /** The control plane does not send a host to an address its connection does not come from. */
  directAddressRefused: (host: string, advertised: string, peer: string) =>
    `host ${host} advertises transfer address ${advertised}, but its connection comes from ${peer}`,
} as const;

/** What denvd refuses before it talks to a control plane. */
export const DenvdMessages = {
  /** `denvd run --provider` without the user's key at the provider. */
  providerKeyMissing: (provider: string) =>
    `refused: --provider ${provider} needs the API key of your ${provider} account in DENVD_PROVIDER_API_KEY (never a flag: flags show in the process list)`,
  /**
   * `denvd run|release --provider modal` with a key that is not Modal's token as TOKEN_ID:TOKEN_SECRET
   * (the key itself is never repeated: it is a secret).
   */
  modalKeyMalformed: () =>
    "refused: --provider modal takes DENVD_PROVIDER_API_KEY as TOKEN_ID:TOKEN_SECRET, your Modal token's id (ak-...) and its secret (as-...) joined by one colon; the key given is not of that form",
  /** `denvd release` on a host that bridges to no provider. */
  releaseNeedsProvider: () =>
    "refused: release is for a bridge (--provider e2b, daytona, prime or modal): it removes what the bridge holds at its provider; a host of denv's own runtime has its environments destroyed through the control plane",
  insecureUrl: (url: string) =>
    `refused: ${url} is plain http:// to a machine other than this one, so the join token and the host credential would cross the network unencrypted; use https://, or pass --insecure (DENVD_INSECURE=1) to accept it`,
} as const;
