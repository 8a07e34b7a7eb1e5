/** `denvd --help`; docs/reference/denvd.md shows it verbatim (checked by agent/docs.test.ts). */
export const USAGE = `denvd: the denv sidecar (one per host; drives the local Docker Engine for the control plane)

usage:
  denvd join --url URL --token JOIN_TOKEN [--name NAME] [--label k=v]... [--state-dir DIR] [--force] [--insecure] [--json]
  denvd run [--state-dir DIR] [--docker-socket PATH] [--store auto|btrfs|copy] [--label k=v]... [--url URL] [--insecure] [--capacity-memory BYTES] [--transfer-listen IP:PORT]
            [--provider e2b|daytona|prime|modal [--provider-api-url URL] [--provider-canary IP:PORT]...]
  denvd release --provider e2b|daytona|prime|modal [--provider-api-url URL] [--state-dir DIR] [--json]
  denvd status [--state-dir DIR] [--json]
  denvd doctor [--state-dir DIR] [--docker-socket PATH] [--json]
  denvd --help | --version

environment (a flag wins over its variable):
  DENVD_STATE_DIR            state directory (default /var/lib/denvd)
  DENVD_DOCKER_SOCKET        Docker Engine socket (default /var/run/docker.sock)
  DENVD_STORE                volume store: auto, btrfs or copy (default auto)
  DENVD_LABELS               placement labels, k=v,k=v
  DENVD_URL                  control plane URL (join; run: overrides host.json)
  DENVD_TOKEN                join token (join)
  DENVD_NAME                 host name asked for at join
  DENVD_INSECURE             1: accept a plain http:// URL of another machine (join, run)
  DENVD_CAPACITY_MEMORY      bytes of memory offered to denv (run; default: the machine's)
  DENVD_TRANSFER_LISTEN      IP:PORT that takes direct version transfers from other hosts (run; default: none)
  DENVD_PROVIDER             e2b, daytona, prime, modal: bridge to that hosted provider's sandboxes instead of this machine's engine (run, release)
  DENVD_PROVIDER_API_KEY     your API key at the provider, modal's TOKEN_ID:TOKEN_SECRET (run, release; a variable only, never a flag)
  DENVD_PROVIDER_API_URL     the provider's API (run, release; default: its SDK's)
  DENVD_PROVIDER_SANDBOX_URL where the provider's SDK reaches each sandbox (run, release; default: its SDK's)
  DENVD_PROVIDER_CANARIES    IP:PORT,...: listeners of denv's a sandbox must not reach (run --provider; the egress probe)
`;
