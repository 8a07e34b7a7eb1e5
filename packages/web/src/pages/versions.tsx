import type { Environment, Version } from "@denv/spec";
import { useSession } from "../client-context.js";
import { bytes, duration, short, when } from "../format.js";
import { Empty, Load, Page } from "../ui.js";
import { useData } from "../use-data.js";
import { ProjectNav } from "./project-nav.js";

export function VersionsPage({ project }: { project: string }) {
  const { client } = useSession();
  const data = useData(
    async () => {
      const [versions, envs] = await Promise.all([
        client.listVersions(project),
        client.listEnvironments(project),
      ]);
      return { versions, envs };
    },
    `versions:${project}`,
    5000,
  );
  return (
    <Page
      title={`${project}: versions`}
      sub="Pinned image digests plus a consistent snapshot; newest first. The snapshots live on the hosts listed as replicas."
    >
      <ProjectNav project={project} />
      <Load of={data} what="versions">
        {({ versions, envs }) =>
          versions.length === 0 ? (
            <Empty>No version yet: a deploy or a snapshot records one.</Empty>
          ) : (
            <ul className="cards wide">
              {versions.map((v) => (
                <VersionCard key={v.id} v={v} envs={envs} newest={versions[0]?.id === v.id} />
              ))}
            </ul>
          )
        }
      </Load>
    </Page>
  );
}

function VersionCard({ v, envs, newest }: { v: Version; envs: Environment[]; newest: boolean }) {
  // The retention policy never deletes a version an environment runs from (docs/reference/config.md#retention).
  const users = envs.filter((e) => e.version === v.id || e.parent_version === v.id).map((e) => e.id);
  const replicas = v.replicas ?? [v.host_id];
  return (
    <li className="card" id={v.id}>
      <h2>
        {v.id}
        {newest && <span className="badge ok">newest</span>}
      </h2>
      <p className="sub">
        from {v.source_environment}
        {v.parent_version === undefined ? "" : ` · parent ${v.parent_version}`} · {when(v.created_at)}
      </p>
      <dl className="evidence">
        <div className="row">
          <dt>snapshot</dt>
          <dd>
            {v.method} · layers {bytes(v.sizes.layer_bytes)} · volumes {bytes(v.sizes.volume_bytes)}
            {typeof v.timings.frozen_ms === "number" ? ` · frozen ${duration(v.timings.frozen_ms)}` : ""}
            {typeof v.timings.total_ms === "number" ? ` · took ${duration(v.timings.total_ms)}` : ""}
          </dd>
        </div>
        <div className="row">
          <dt>digests</dt>
          <dd>
            <ul className="plain">
              {Object.entries(v.digests).map(([service, digest]) => (
                <li key={service}>
                  <strong>{service}</strong> <code title={digest}>{short(digest, 19)}</code>
                </li>
              ))}
            </ul>
          </dd>
        </div>
        {Object.keys(v.volumes).length > 0 && (
          <div className="row">
            <dt>volumes</dt>
            <dd>
              <ul className="plain">
                {Object.entries(v.volumes).map(([name, vol]) => (
                  <li key={name}>
                    <strong>{name}</strong> {bytes(vol.bytes)}
                  </li>
                ))}
              </ul>
            </dd>
          </div>
        )}
        <div className="row">
          <dt>replicas</dt>
          <dd>
            {replicas.length} host{replicas.length === 1 ? "" : "s"}: {replicas.join(", ")}
          </dd>
        </div>
        <div className="row">
          <dt>retention</dt>
          <dd>
            {users.length > 0
              ? `kept: ${users.join(", ")} run${users.length === 1 ? "s" : ""} from it`
              : "not in use: deleted once it falls out of the newest versions the control plane keeps (--retain-versions)"}
          </dd>
        </div>
      </dl>
    </li>
  );
}
