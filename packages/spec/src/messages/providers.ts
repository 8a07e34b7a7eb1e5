/**
 * Lines of a denvd host that bridges to a hosted sandbox provider (a provider runtime): what the
 * provider cannot do for a file or a verb, said in one line that names the capability.
 */
export const ProviderMessages = {
  /** A plan asks for something the provider's sandboxes do not have (nothing was created). */
  lacks: (provider: string, capability: string, why: string) =>
    `refused: ${provider} sandboxes cannot run this environment: they lack ${capability}, which ${why}`,
  /** A compose key of the service the provider runtime does not carry over (nothing was created). */
  unsupportedKey: (provider: string, service: string, key: string, why: string) =>
    `refused: service '${service}' sets ${key}, which the ${provider} runtime does not carry over (${why}); remove it or deploy on a hosts target`,
  /** A verb the provider runtime does not do (yet). */
  unsupportedVerb: (provider: string, verb: string, why: string) =>
    `refused: ${verb} is not available on a host bridging to ${provider} (${why}); use a host of a hosts or provisioned target`,
  /** Why env stop and start are refused on a provider without a pause (unsupportedVerb's `why`). */
  noPause: (provider: string) =>
    `${provider} has no pause: a sandbox runs until it is deleted or its timeout passes`,
  /** A Dockerfile step the provider's image API cannot build (nothing was built). */
  unbuildableStep: (provider: string, service: string, step: string, why: string) =>
    `refused: the Dockerfile of service '${service}' has ${step}, which ${provider}'s image API cannot build (${why}); change the Dockerfile or deploy on a hosts target`,
  /** An exec or files option the provider's API has no way to honour. */
  unsupportedOption: (provider: string, option: string, why: string) =>
    `refused: ${option} is not available on ${provider} sandboxes (${why})`,
  /** The provider runs commands and file calls as a named user only. */
  userWithoutName: (provider: string, user: string) =>
    `refused: user '${user}' has no name in the sandbox's /etc/passwd, and ${provider} runs commands and file calls only as a named user`,
  /** The egress probe needs a canary to connect to (a listener denv runs). */
  noCanary: (provider: string) =>
    `refused: the ${provider} runtime has no egress canary (a listener denv runs) to probe against; configure one`,
  /** The provider's own record of the sandbox says it may reach the internet. */
  internetAllowed: (sandbox: string) =>
    `sandbox '${sandbox}' allows internet access by the provider's network policy`,
  /** The agent's user can become root in the sandbox without a password (protection 1). */
  agentBecomesRoot: (service: string, user: string, how: string) =>
    `refused: user '${user}' of service '${service}' can become root without a password (${how}), and the agent is never root on an rl-environment (protection 1); remove that from the image`,
  /**
   * The image lets the agent write where root takes its programs from in a single-sandbox
   * provider's verify (root prepares the verifier in the agent's filesystem).
   */
  agentWritesSystem: (service: string, user: string, path: string) =>
    `refused: user '${user}' of service '${service}' can write ${path}, where root takes the programs it runs to prepare the verifier, and the agent never writes what root runs (protection 2); fix the image's permissions`,
  /** The agent asks to act as the verifier's uid, where the verifier runs in the agent's sandbox. */
  agentAsVerifier: (service: string, user: string, uid: number) =>
    `refused: user '${user}' is uid ${uid} in service '${service}', the verifier's, whose grading runs in this sandbox; the agent never acts as the verifier (protection 2)`,
  /** An exec or files call names a service of the environment other than the agent's, on a provider that runs each service in a sandbox of its own. */
  agentServiceOnly: (provider: string, service: string, agentService: string) =>
    `refused: ${provider} runs exec and files in the agent's service ('${agentService}') only, not in '${service}': its sandbox is the service's own, reached over the environment's private network`,
  /** An exec, files call, snapshot or verify of an environment whose sandbox is paused (`env stop`). */
  paused: (provider: string, environment: string, how = "paused") =>
    `refused: environment ${environment} is stopped (its ${provider} sandbox is ${how}); start it first (denv env start ${environment})`,
  /** The probe itself could not run in the sandbox (no bash with /dev/tcp, or no timeout). */
  probeFailed: (service: string, detail: string) =>
    `the egress probe could not run in service '${service}': ${detail}`,
} as const;
