/**
 * Table shapes as the database holds them. JSON columns are text (the same on SQLite and
 * PostgreSQL), booleans are 0/1 integers, timestamps ISO-8601 text (which sorts by time).
 */
export interface Database {
  tokens: {
    id: string;
    name: string;
    role: string;
    project: string | null;
    hash: string;
    created_at: string;
  };
  projects: {
    name: string;
    kind: string;
    repo: string | null;
    compose_path: string;
    version_seq: number;
    created_at: string;
  };
  pools: {
    project: string;
    size_file: number | null;
    size_set: number | null;
    updated_at: string;
  };
  environments: {
    id: string;
    project: string;
    name: string;
    host_id: string | null;
    host_env: string | null;
    status: string;
    version: string | null;
    parent_version: string | null;
    sandbox: number;
    pool: number;
    expires_at: string | null;
    services: string;
    agent: string | null;
    evidence: string | null;
    created_at: string;
    updated_at: string;
  };
  deployments: {
    id: string;
    kind: string;
    project: string;
    environment: string;
    status: string;
    phases: string;
    result: string | null;
    error: string | null;
    host_id: string | null;
    state: string;
    created_at: string;
    finished_at: string | null;
  };
  deployment_logs: {
    deployment_id: string;
    seq: number;
    ts: string;
    event: string;
    data: string;
  };
  versions: {
    id: string;
    project: string;
    number: number;
    host_id: string;
    source_environment: string;
    parent_version: string | null;
    digests: string;
    volumes: string;
    method: string;
    sizes: string;
    timings: string;
    created_at: string;
  };
  /** Hosts holding a version's snapshot: its origin (versions.host_id) and the hosts it was sent to. */
  version_replicas: {
    version_id: string;
    host_id: string;
    /** When the cp recorded it (the cp's clock). */
    created_at: string;
  };
  targets: {
    name: string;
    kind: string;
    created_at: string;
    /** JSON of the kind's settings (0007_target_drivers). */
    settings: string | null;
    /** The credentials, sealed (targets/secret-box.ts); never plaintext. */
    credentials: string | null;
  };
  /** Machines a provisioned target created (0007_target_drivers). */
  machines: {
    id: string;
    target: string;
    provider_id: string | null;
    status: string;
    cost_class: string;
    host_id: string | null;
    join_token_id: string | null;
    error: string | null;
    idle_since: string | null;
    created_at: string;
    updated_at: string;
  };
  hosts: {
    id: string;
    target: string;
    credential_hash: string;
    status: string;
    version: string | null;
    labels: string;
    capacity: string | null;
    last_seen_at: string | null;
    created_at: string;
    draining_at: string | null;
  };
  /** An episode's command log (0006_episode_log): one row per step; `kept`: stdin or tar bytes, base64. */
  episode_steps: {
    environment: string;
    seq: number;
    step: string;
    kept: string | null;
  };
  /** Each replay of an episode (0008_replays); `steps`: JSON, each step's seq, kind, status, differs. */
  replays: {
    id: string;
    environment: string;
    environment_name: string;
    fork: string;
    version: string;
    token_id: string;
    diverged: number;
    diverged_at: number | null;
    steps: string;
    created_at: string;
  };
  join_tokens: {
    id: string;
    target: string;
    hash: string;
    uses_left: number;
    expires_at: string;
    created_at: string;
    revoked_at: string | null;
  };
}
