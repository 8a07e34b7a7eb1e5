"""``DenvEnvironment``: a Harbor environment backend running each trial on denv.

One denv project per task (``harbor-<task>``), deployed once per content of the task's
``environment/`` folder (and again only when it changes, or with ``--force-build``); one
sandbox (a fork of the project's version) per trial. The verifier never runs in the agent's
sandbox and never as the agent:

- ``shared`` mode: Harbor's verifier step (tests uploaded to ``/tests`` after the agent, then
  ``tests/test.sh``) is carried out on a second sandbox forked from a snapshot of the trial's
  sandbox (the agent's processes are gone: a fork starts fresh), as the verifier's user (root
  in gVisor's kernel by default, as Harbor runs tests): the agent's sandbox never receives
  ``/tests``.

The agent is root in ``main`` as in Harbor, confined by gVisor (``x-denv.agent.sandbox``;
``--ek agent_sandbox=none`` makes it uid 1000 instead), and the task's ``network_mode`` maps
onto egress by phase: ``public`` (Harbor's default) gives the episode the host's package
mirrors through denvd's proxy and nothing else, ``no-network`` gives it nothing.
- ``separate`` mode: Harbor stops the agent's environment and starts a second one for the
  verifier (its session id ends in ``__verifier__<key>``). On denv that environment is a fresh
  fork of the task's deployed version (or, when the tests folder brings its own Dockerfile, of
  that image's own project ``<project>-verifier``), in which every command runs as the verifier
  uid. As Harbor specifies, it receives the agent's work only as the task's declared
  artifacts, which are written as the agent user (they are the agent's files).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path, PurePosixPath
from typing import Any

from harbor.environments.base import (  # type: ignore[import-not-found]
    BaseEnvironment,
    ExecResult,
    ServiceOperationsUnsupportedError,
)
from harbor.environments.capabilities import (  # type: ignore[import-not-found]
    EnvironmentCapabilities,
)
from harbor.environments.options import EnvironmentOptions  # type: ignore[import-not-found]
from harbor.models.task.config import NetworkMode  # type: ignore[import-not-found]

from .._async_client import AsyncClient
from .._config import load_config
from .._errors import DenvError, NotFoundError
from .._models import Environment
from ..messages import harbor_public_network
from ._deploy import ensure_deployed
from ._files import extract_contents, tar_dir
from ._options import DenvHarborOptions, parse_ek_options
from ._task import (
    AGENT_UID,
    TESTS_DIR,
    VERIFIER_LOGS,
    AgentPolicy,
    TaskSource,
    artifact_parents,
    is_root,
    project_name,
    task_source,
)

_log = logging.getLogger("denv.harbor")
_MAIN = "main"
#: How Harbor names the session of a separate verifier environment (``Trial.
#: _separate_verifier_session_id``: ``<trial>__verifier__<key>``).
_VERIFIER_SESSION_MARK = "__verifier__"
#: Where only the verifier writes; other uploads to a separate verifier's sandbox are the
#: agent's artifacts.
_VERIFIER_PATHS = (TESTS_DIR, VERIFIER_LOGS)


class DenvEnvironmentOptions(DenvHarborOptions, EnvironmentOptions):  # type: ignore[misc]
    """denv's options (:class:`DenvHarborOptions`) and those Harbor gives every environment."""


class DenvEnvironment(BaseEnvironment):  # type: ignore[misc]
    """Harbor's ``BaseEnvironment`` on denv (``--env denv.harbor:DenvEnvironment``).

    Options (``--ek key=value``): :class:`DenvHarborOptions` (``url``, ``token``,
    ``project``, ``ttl_sec``, ``agent_sandbox``, ``verifier_user``, ``public_network``),
    through Harbor's own ``options_model``: its preflight checks them before any trial is
    queued, and
    ``BaseEnvironment.__init__`` parses them once into ``self.options``, both with
    :meth:`parse_options` (an unknown option is refused in one line naming it).
    """

    options_model = DenvEnvironmentOptions
    options: DenvEnvironmentOptions

    @classmethod
    def parse_options(cls, kwargs: dict[str, Any] | None = None) -> DenvEnvironmentOptions:
        """Parses the ``--ek`` options (Harbor's runtime inputs are not among them).

        Args:
            kwargs: The options.

        Returns:
            The options.

        Raises:
            ValueError: An unknown option, or a value that does not fit (one line naming it).
        """
        return parse_ek_options(DenvEnvironmentOptions, kwargs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._agent = AgentPolicy()
        # A separate verifier with an image of its own deploys a project of its own.
        self._verifier_project: str | None = None
        self._client: AsyncClient | None = None
        self._sandbox: Environment | None = None
        self._verifier: Environment | None = None
        self._snapshot_version: str | None = None
        self._source: TaskSource | None = None
        super().__init__(*args, **kwargs)

    # ------------------------------------------------------------------ Harbor's contract

    @staticmethod
    def type() -> str:
        """The environment type Harbor records."""
        return "denv"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        """Compose tasks (per-service exec and copy) and no internet (denv denies egress)."""
        return EnvironmentCapabilities(docker_compose=True, disable_internet=True)

    def _validate_definition(self) -> None:
        # Runs inside BaseEnvironment.__init__, after it set session_id and self.options.
        if self.is_separate_verifier and not getattr(self, "_enable_environment_dir_upload", True):
            # A verifier image of its own (tests/Dockerfile): a project of its own.
            base = self.options.project or project_name(self.environment_name)
            self._verifier_project = f"{base}-verifier"
            agent_dirs = artifact_parents(Path(self.environment_dir))
        else:
            agent_dirs = ()
        # Every refusal comes here, before start() creates the project: a refused run leaves
        # nothing behind on the control plane.
        self._agent = self._agent_policy()
        self._source = task_source(
            Path(self.environment_dir),
            self.project,
            docker_image=self.task_env_config.docker_image,
            workdir=self.task_env_config.workdir,
            agent_dirs=agent_dirs,
            cpus=self.task_env_config.cpus,
            memory_mb=self.task_env_config.memory_mb,
            agent=self._agent,
        )
        for note in self._source.notes:
            self.logger.info("denv: %s: %s", self._source.compose_name, note)

    def _agent_policy(self) -> AgentPolicy:
        """The agent's user and sandbox, and the episode's egress, from the task and options.

        Raises:
            ValueError: A public task with ``public_network=refuse`` (one line naming it).
        """
        public = any(
            p.network_mode == NetworkMode.PUBLIC
            for p in (self.network_policy, *getattr(self, "_phase_network_policies", ()))
        )
        egress = "deny"
        if public:
            if self.options.public_network == "refuse":
                raise ValueError(harbor_public_network(self.environment_name))
            if self.options.public_network == "mirrors":
                egress = "mirrors"
                self.logger.info(
                    "denv: task %s asks for network_mode=public: its episode reaches the "
                    "host's package mirrors through denvd's proxy, nothing else",
                    self.environment_name,
                )
            else:
                self.logger.warning(
                    "denv denies egress: task %s asks for network_mode=public and runs "
                    "without internet access",
                    self.environment_name,
                )
        if self.options.agent_sandbox == "gvisor":
            return AgentPolicy(user="root", sandbox="gvisor", egress=egress)
        return AgentPolicy(user=AGENT_UID, egress=egress)

    @property
    def project(self) -> str:
        """The denv project of this task."""
        return self._verifier_project or self.options.project or project_name(self.environment_name)

    @property
    def sandbox(self) -> Environment | None:
        """The trial's sandbox (None before ``start`` and after ``stop``)."""
        return self._sandbox

    @property
    def verifier_sandbox(self) -> Environment | None:
        """The verifier's sandbox.

        In shared mode a fork made when the tests are uploaded; in separate mode this
        environment's own sandbox.
        """
        if self.is_separate_verifier:
            return self._sandbox
        return self._verifier

    @property
    def is_separate_verifier(self) -> bool:
        """Whether Harbor made this environment for a separate-mode verifier."""
        return _VERIFIER_SESSION_MARK in str(getattr(self, "session_id", ""))

    async def start(self, force_build: bool) -> None:
        """Deploys the task's environment when its content changed, then forks a sandbox."""
        conf = load_config(self.options.url, self.options.token, self.project)
        url = conf.require_url()
        assert self._source is not None
        self._client = AsyncClient(url, conf.token, self.project)
        version = await ensure_deployed(
            self._client, url, self.project, self._source, force=force_build
        )
        self._sandbox = await self._client.create_sandbox(
            self.project, version=version, ttl_sec=self.options.ttl_sec
        )
        role = "verifier" if self.is_separate_verifier else "trial"
        self.logger.info("denv: %s sandbox %s (fork of %s)", role, self._sandbox.id, version)
        await self._upload_environment_dir_after_start()

    async def stop(self, delete: bool) -> None:
        """Destroys the trial's sandbox and the verifier's (idempotent).

        denv sandboxes are destroyed whatever ``delete`` says (their TTL would do it later);
        the verifier's snapshot version is deleted with them.
        """
        client = self._client
        if client is None:
            return

        async def destroy(env: Environment) -> None:
            try:
                await client.destroy_sandbox(env.id)
            except NotFoundError:
                pass
            except DenvError as exc:
                self.logger.warning("denv: cannot destroy %s: %s", env.id, exc)

        # Both at once: each waits until its sandbox is unreachable (about 0.4 s on 2 cores).
        envs = [e for e in (self._verifier, self._sandbox) if e is not None]
        self._verifier = self._sandbox = None
        await asyncio.gather(*(destroy(e) for e in envs))
        if self._snapshot_version is not None:
            try:
                await client.delete_version(self._snapshot_version)
            except DenvError as exc:
                self.logger.debug("denv: version %s kept: %s", self._snapshot_version, exc)
            self._snapshot_version = None
        self._client = None
        await client.aclose()

    # ------------------------------------------------------------------ routing

    def _target(self) -> tuple[AsyncClient, Environment, str | None]:
        """The sandbox an operation goes to, and as whom (None: the agent user)."""
        if self._client is None or self._sandbox is None:
            raise RuntimeError("denv environment is not started")
        if self._verifier is not None:
            return self._client, self._verifier, self.options.verifier
        return self._client, self._sandbox, None

    def _user(self, user: str | int | None) -> str | None:
        resolved = self._resolve_user(user)
        if self._verifier is not None or self.is_separate_verifier:
            # Every command of the verifier step runs as the verifier principal.
            return self.options.verifier
        if resolved is None:
            return None
        if is_root(resolved) and not self._agent.root:
            # Root is refused on an agent that is not sandboxed (protection 1): the agent user
            # owns Harbor's folders, so Harbor's root housekeeping runs as the agent user.
            return None
        return str(resolved)

    async def _begin_verifier(self) -> None:
        """Snapshot the trial's sandbox and fork it for the verifier."""
        client, sandbox, _ = self._target()
        version = await client.snapshot(sandbox.id)
        self._snapshot_version = version.id
        self._verifier = await client.create_sandbox(
            sandbox.project, version=version.id, ttl_sec=self.options.ttl_sec
        )
        self.logger.info(
            "denv: verifier sandbox %s (fork of %s, uid %s)",
            self._verifier.id,
            version.id,
            self.options.verifier,
        )

    # ------------------------------------------------------------------ exec

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        """Runs ``bash -c command`` in service ``main``; a non-zero exit is returned."""
        return await self._exec(command, _MAIN, cwd, env, timeout_sec, user)

    async def service_exec(
        self,
        command: str,
        *,
        service: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        """Runs a command in a compose service (default ``main``)."""
        return await self._exec(command, service or _MAIN, cwd, env, timeout_sec, user)

    async def _exec(
        self,
        command: str,
        service: str,
        cwd: str | None,
        env: dict[str, str] | None,
        timeout_sec: int | None,
        user: str | int | None,
    ) -> ExecResult:
        client, target, _ = self._target()
        as_user = self._user(user) if service == _MAIN else _sidecar_user(user)
        res = await client.exec(
            target.id,
            ["bash", "-c", command],
            service=service,
            user=as_user,
            cwd=cwd,
            env=self._merge_env(env),
            timeout=float(timeout_sec) if timeout_sec else None,
        )
        return ExecResult(
            stdout=res.stdout.decode("utf-8", errors="replace"),
            stderr=res.stderr.decode("utf-8", errors="replace"),
            return_code=res.exit_code,
        )

    # ------------------------------------------------------------------ files

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        """Writes a local file into ``main``."""
        client, target, _ = self._target()
        path = Path(source_path)
        data = await asyncio.to_thread(path.read_bytes)
        mode = (await asyncio.to_thread(path.stat)).st_mode & 0o777
        await client.write_file(
            target.id, target_path, data, mode=mode, service=_MAIN, user=self._writer(target_path)
        )

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        """Copies a local folder's contents into ``main``.

        An upload to ``/tests`` while no verifier sandbox exists is Harbor's verifier step:
        the trial's sandbox is snapshotted and forked first, and the tests go to the fork.
        """
        shared_step = self._verifier is None and not self.is_separate_verifier
        if shared_step and _under(target_dir, TESTS_DIR):
            await self._begin_verifier()
        client, target, _ = self._target()
        archive = await asyncio.to_thread(tar_dir, Path(source_dir))
        await client.put_files(
            target.id, target_dir, archive, service=_MAIN, user=self._writer(target_dir)
        )

    def _writer(self, path: str) -> str | None:
        """Who writes an upload (None: the agent user).

        In a separate verifier's sandbox the agent's artifacts are written as the agent user
        and the rest as the verifier.
        """
        if self.is_separate_verifier and not any(_under(path, p) for p in _VERIFIER_PATHS):
            return None
        return self._user(None)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        """Reads a file of ``main`` into a local file."""
        await self.service_download_file(source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        """Copies a folder of ``main`` into a local folder (overwriting files)."""
        await self.service_download_dir(source_dir, target_dir)

    async def service_download_file(
        self, source_path: str, target_path: Path | str, *, service: str | None = None
    ) -> None:
        """Reads a file of a compose service (default ``main``)."""
        client, target, _ = self._target()
        svc = service or _MAIN
        user = self._user(None) if svc == _MAIN else None
        data = await client.read_file(target.id, source_path, service=svc, user=user)
        out = Path(target_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(out.write_bytes, data)

    async def service_download_dir(
        self, source_dir: str, target_dir: Path | str, *, service: str | None = None
    ) -> None:
        """Copies a folder of a compose service (default ``main``) into a local folder."""
        client, target, _ = self._target()
        svc = service or _MAIN
        user = self._user(None) if svc == _MAIN else None
        archive = await client.get_files(target.id, source_dir, service=svc, user=user)
        await asyncio.to_thread(extract_contents, archive, Path(target_dir))

    async def stop_service(self, service: str) -> None:
        """Not offered: denv stops and starts whole environments, not one service.

        Harbor asks for it in separate mode before it collects sidecar artifacts, so that agent
        processes cannot touch them; on denv the agent user cannot write into another service
        anyway, and Harbor goes on after a warning.
        """
        raise ServiceOperationsUnsupportedError(
            f"denv cannot stop the single service {service!r} of a sandbox (the agent user "
            "cannot write into the other services, whose artifacts are collected as they are)"
        )


def _sidecar_user(user: str | int | None) -> str | None:
    return None if user is None else str(user)


def _under(path: str, root: str) -> bool:
    p, r = PurePosixPath(path), PurePosixPath(root)
    return p == r or r in p.parents
