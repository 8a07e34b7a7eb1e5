"""The REST API's resources, as ``packages/spec/src/api.ts`` defines them (JSON, snake_case).

Fields the control plane adds later are kept (``extra="allow"``), so an older client reads a
newer control plane.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._errors import DenvError, error_for


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Project(_Model):
    """A project: a repository or uploaded source with a kind.

    Attributes:
        name: The project's name.
        kind: ``rl-environment`` (protections on) or ``service``.
        repo: Git URL, when the project deploys from a repository.
        compose_path: The compose file, relative to the project's root.
        created_at: ISO 8601 time.
    """

    name: str
    kind: Literal["rl-environment", "service"]
    repo: str | None = None
    compose_path: str = "compose.yaml"
    created_at: str = ""


class GithubConnection(_Model):
    """A project's connection to a GitHub repository (push-to-deploy).

    Attributes:
        project: The project.
        repository: ``owner/repo``, lower-cased.
        branch: The branch whose pushes deploy alpha.
        installation_id: The GitHub App's installation on the repository.
        clone_url: The git URL the host that builds fetches from.
        created_at: ISO 8601 time.
    """

    project: str
    repository: str
    branch: str
    installation_id: int | None = None
    clone_url: str = ""
    created_at: str = ""


class ServiceRef(_Model):
    """One running service of an environment.

    Attributes:
        name: The compose service name.
        container_id: The Docker container id on the host.
        image: The image reference.
        image_id: The pinned image id.
    """

    name: str
    container_id: str = ""
    image: str = ""
    image_id: str = ""


class AgentInfo(_Model):
    """Where the agent works in an environment.

    Attributes:
        service: The agent service.
        user: The agent user (never root on an rl-environment).
        workdir: The agent's working directory (default cwd of exec).
    """

    service: str
    user: str
    workdir: str


class Environment(_Model):
    """A running stack of a project (``PROJECT/ENV``); a sandbox is one for one episode.

    Attributes:
        id: ``PROJECT/ENV``.
        project: The project.
        name: The environment's name (``alpha`` by default).
        status: ``pending``, ``running``, ``stopped``, ``failed`` or ``destroyed``.
        host_id: The host it runs on.
        version: The version it runs (a deploy's new version, or a fork's parent).
        parent_version: The version it was forked from.
        sandbox: True for a sandbox (destroyed at ``expires_at``).
        expires_at: When a sandbox is destroyed.
        services: Its services.
        agent: Where the agent works.
        evidence: What its last deployment recorded.
        pool: A sandbox's answer: ``hit`` when it was a warm fork of the project's pool,
            ``miss`` when it was forked cold.
        created_at: ISO 8601 time.
    """

    id: str
    project: str
    name: str
    status: str
    host_id: str | None = None
    version: str | None = None
    parent_version: str | None = None
    sandbox: bool = False
    expires_at: str | None = None
    services: list[ServiceRef] = Field(default_factory=list)
    agent: AgentInfo | None = None
    evidence: dict[str, Any] | None = None
    pool: str | None = None
    created_at: str = ""

    @property
    def service_names(self) -> list[str]:
        """The service names, the agent service first."""
        names = [s.name for s in self.services]
        if self.agent is not None and self.agent.service in names:
            names.remove(self.agent.service)
            names.insert(0, self.agent.service)
        return names


class Phase(_Model):
    """One phase of a deployment, with its timing and evidence.

    Attributes:
        name: The phase (``build``, ``probe``, ...).
        status: ``pending``, ``running``, ``succeeded``, ``failed`` or ``skipped``.
        started_at: ISO 8601 time.
        finished_at: ISO 8601 time.
        duration_ms: How long it took.
        evidence: What it recorded (digests, placement, probe findings, ...).
    """

    name: str
    status: str
    started_at: str | None = None
    finished_at: str | None = None
    duration_ms: float | None = None
    evidence: dict[str, Any] | None = None


class ErrorBody(_Model):
    """The error of a failed deployment.

    Attributes:
        code: The stable error code.
        message: What was wrong and what to do.
    """

    code: str
    message: str


class Deployment(_Model):
    """A phased change to an environment, with evidence per phase.

    Attributes:
        id: The deployment's id.
        kind: ``deploy``, ``fork``, ``rollback``, ``snapshot``, ``verify``, ``stop``,
            ``start`` or ``destroy``.
        project: The project.
        environment: ``PROJECT/ENV`` the deployment changes.
        status: ``queued``, ``running``, ``succeeded`` or ``failed``.
        phases: The phases, in order.
        result: What it produced: the environment (fork), the version (snapshot), the
            verify result (verify).
        error: Why it failed.
        host_id: The host it ran on.
        created_at: ISO 8601 time.
        finished_at: ISO 8601 time.
    """

    id: str
    kind: str
    project: str
    environment: str
    status: str
    phases: list[Phase] = Field(default_factory=list)
    result: Any = None
    error: ErrorBody | None = None
    host_id: str | None = None
    created_at: str = ""
    finished_at: str | None = None

    @property
    def finished(self) -> bool:
        """Whether the deployment succeeded or failed."""
        return self.status in ("succeeded", "failed")

    def phase(self, name: str) -> Phase | None:
        """The phase of that name.

        Args:
            name: The phase's name.

        Returns:
            The phase, or None when the deployment has no such phase.
        """
        return next((p for p in self.phases if p.name == name), None)

    def to_error(self) -> DenvError:
        """The exception a failed deployment stands for.

        Returns:
            The subclass of :class:`DenvError` of ``error.code``, with ``deployment`` set.
        """
        if self.error is not None:
            err = error_for(self.error.code, self.error.message)
        else:
            failed = next((p.name for p in self.phases if p.status == "failed"), "?")
            err = error_for("internal", f"deployment {self.id} failed in phase '{failed}'")
        err.deployment = self
        return err

    def raise_for_status(self) -> Deployment:
        """Raises the deployment's error when it failed.

        Returns:
            The deployment itself, when it did not fail.

        Raises:
            DenvError: The subclass of the deployment's error code.
        """
        if self.status == "failed":
            raise self.to_error()
        return self


class Version(_Model):
    """An immutable version: pinned image digests plus a consistent snapshot.

    Attributes:
        id: ``PROJECT@vN``.
        project: The project.
        number: N.
        host_id: The host holding the snapshot.
        source_environment: The environment it was taken from.
        parent_version: The version that environment ran.
        digests: Image id per service.
        volumes: Snapshot and size per volume.
        method: How the snapshot was taken (e.g. copy-on-write clones).
        sizes: ``layer_bytes`` and ``volume_bytes``.
        timings: Milliseconds per step.
        created_at: ISO 8601 time.
    """

    id: str
    project: str
    number: int
    host_id: str = ""
    source_environment: str = ""
    parent_version: str | None = None
    digests: dict[str, str] = Field(default_factory=dict)
    volumes: dict[str, Any] = Field(default_factory=dict)
    method: str = ""
    sizes: dict[str, float] = Field(default_factory=dict)
    timings: dict[str, float] = Field(default_factory=dict)
    created_at: str = ""


class Target(_Model):
    """A target: where environments run (docs/reference/targets.md).

    Attributes:
        name: The target's name.
        kind: ``hosts``, ``hetzner``, ``aws``, ``daytona-docker``, ``e2b``, ``daytona``,
            ``modal`` or ``prime``.
        capabilities: What its kind can do (``snapshot``, ``fork``, ``egress_control``...).
        settings: Its kind's settings, defaults filled.
        credentials: The names of the credentials it holds; their values are never returned.
        created_at: When it was created (ISO 8601).
    """

    name: str
    kind: str
    capabilities: dict[str, bool] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    credentials: list[str] = Field(default_factory=list)
    created_at: str = ""


class TargetKind(_Model):
    """A target kind, as the control plane's capability table gives it.

    Attributes:
        kind: The kind.
        family: ``hosts`` (machines running denvd), ``provisioned`` or ``hosted``.
        available: Whether this control plane has its driver.
        capabilities: What it can do.
        settings: The settings a target of it takes.
        credentials: The credentials it reads (``name`` and the ``env`` variable the CLI reads).
    """

    kind: str
    family: str
    available: bool
    capabilities: dict[str, bool] = Field(default_factory=dict)
    settings: list[str] = Field(default_factory=list)
    credentials: list[dict[str, str]] = Field(default_factory=list)


class Pool(_Model):
    """A project's warm fork pool: forks of its current version kept ready for sandboxes.

    Attributes:
        project: The project.
        version: The version its forks are of.
        size: How many ready forks it keeps.
        source: ``set`` (an admin's size), ``file`` (``x-denv.pool``) or ``off``.
        ready: Forks ready to be claimed.
        filling: Forks being made.
    """

    project: str
    version: str | None = None
    size: int = 0
    source: str = "off"
    ready: int = 0
    filling: int = 0


class VerifyResult(_Model):
    """The verifier's grade of an episode (``VerifyResponse``).

    Attributes:
        status: ``graded``, ``refused`` or ``failed``.
        reward: The reward.
        rewards: Every named reward.
        message: Why it was refused or failed.
        log: The verifier's output.
        version: The snapshot of the episode.
        fork: The fork the verifier graded.
        evidence: What each step recorded.
    """

    status: str
    reward: float
    rewards: dict[str, float] = Field(default_factory=dict)
    message: str | None = None
    log: str = ""
    version: str = ""
    fork: str = ""
    evidence: dict[str, Any] = Field(default_factory=dict)


class ProbeResult(_Model):
    """The egress probe's result (protection 5).

    Attributes:
        ok: True when the probe found no way out.
        findings: What it found (one line each; empty when ``ok``).
    """

    ok: bool
    findings: list[str] = Field(default_factory=list)


class EpisodeStep(_Model):
    """One step of an episode's command log: an exec or a files put, and the host's answer.

    Attributes:
        seq: Its number in the log, from 1.
        kind: ``exec`` or ``files.put``.
        started_at: When the control plane sent it (ISO 8601).
        duration_ms: How long until the host answered.
        token: The id of the API token that asked.
        exec: An exec's request as kept: ``cmd`` or ``shell``, ``service``, ``user``, ``cwd``,
            ``env_keys`` (names only, never values), ``stdin_sha256``, ``stdin_bytes``,
            ``stdin_kept``, ``streamed``.
        files: A files put's ``path``, ``sha256`` and ``bytes`` of the tar, ``kept``.
        result: ``exit_code``, ``stdout_sha256``, ``stderr_sha256`` (and their ``*_bytes``),
            ``timed_out``, ``truncated``; for a files put ``entries``.
        error: ``code`` and ``message`` when the call failed.
    """

    seq: int
    kind: str
    started_at: str = ""
    duration_ms: int = 0
    token: str = ""
    exec: dict[str, Any] | None = None
    files: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, str] | None = None


class EpisodeLog(_Model):
    """One page of an episode's command log (``EpisodeLog``).

    Attributes:
        environment: ``PROJECT/ENV`` of the episode.
        started_from: The version it was forked from.
        total: Steps kept.
        dropped: Steps run after the log was full (not kept; such a log cannot be replayed).
        steps: This page's steps, by seq.
        next: Pass it as ``after`` for the next page (absent on the last one).
    """

    environment: str
    started_from: str | None = None
    total: int = 0
    dropped: int = 0
    steps: list[EpisodeStep] = Field(default_factory=list)
    next: int | None = None


class ReplayStep(_Model):
    """How one step of a replay compared with the episode (``ReplayStep``).

    Attributes:
        seq: The step's seq in the episode's log.
        kind: ``exec`` or ``files.put``.
        status: ``same`` or ``diverged``.
        differs: What differs: ``exit_code``, ``stdout``, ``stderr``, ``entries``, ``error``.
        recorded: The episode's outcome (exit code, digests).
        replayed: The replay's outcome.
        error: Why the replayed step failed, if it did.
    """

    seq: int
    kind: str
    status: str
    differs: list[str] = Field(default_factory=list)
    recorded: dict[str, Any] = Field(default_factory=dict)
    replayed: dict[str, Any] = Field(default_factory=dict)
    error: dict[str, str] | None = None


class ReplayResult(_Model):
    """A replay of an episode's log on a fresh fork (``ReplayResponse``).

    Attributes:
        environment: The episode replayed.
        version: The version forked.
        fork: ``PROJECT/ENV`` of the replayed fork (verify it like any other).
        steps: Each step's outcome, by seq.
        diverged: How many steps diverged.
        diverged_at: The first that did.
        duration_ms: How long the replay took.
    """

    environment: str
    version: str
    fork: str
    steps: list[ReplayStep] = Field(default_factory=list)
    diverged: int = 0
    diverged_at: int | None = None
    duration_ms: int = 0


class ReplayStepStatus(_Model):
    """One step of a kept replay: its status only, never its output.

    Attributes:
        seq: The step's seq in the episode's log.
        kind: ``exec`` or ``files.put``.
        status: ``same`` or ``diverged``.
        differs: What differs: ``exit_code``, ``stdout``, ``stderr``, ``entries``, ``error``.
    """

    seq: int
    kind: str
    status: str
    differs: list[str] = Field(default_factory=list)


class ReplaySummary(_Model):
    """A replay of an episode the control plane kept (``ReplaySummary``).

    Attributes:
        id: The replay's id (``rpl_...``).
        environment: ``PROJECT/ENV`` of the episode replayed.
        environment_name: Its name.
        fork: ``PROJECT/ENV`` of the replayed fork (it may have been destroyed since).
        version: The version forked.
        created_at: When the replay ran (ISO 8601).
        token_id: The id of the token that asked for it.
        diverged: How many steps diverged.
        diverged_at: The first that did.
        steps: Each step's status, by seq.
    """

    id: str
    environment: str
    environment_name: str
    fork: str
    version: str
    created_at: str
    token_id: str
    diverged: int = 0
    diverged_at: int | None = None
    steps: list[ReplayStepStatus] = Field(default_factory=list)


class Logs(_Model):
    """A service's output.

    Attributes:
        stdout: Its standard output.
        stderr: Its standard error.
    """

    stdout: str = ""
    stderr: str = ""


class FilesResult(_Model):
    """What an upload wrote.

    Attributes:
        entries: Tar entries extracted.
        bytes: Bytes of regular-file content.
    """

    entries: int
    bytes: int


@dataclass(frozen=True)
class DeploymentEvent:
    """One event of a deployment's log stream.

    Attributes:
        type: ``phase``, ``log`` or ``done``.
        phase: The phase, for ``phase`` events.
        line: The line, for ``log`` events.
        deployment: The finished deployment, for ``done`` events.
    """

    type: str
    phase: Phase | None = None
    line: str | None = None
    deployment: Deployment | None = None
