"""``DenvRuntime``: HUD's runtime provider backed by denv sandboxes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from hud.environment import Environment  # type: ignore[import-not-found,unused-ignore]

# bind() is the control channel's public entry point; _shutdown() is its counterpart, the one
# HUD's own LocalRuntime calls (it cancels the live sessions before the server closes; hud is
# pinned, so its name is stable here).
from hud.environment.server import _shutdown, bind  # type: ignore[import-not-found,unused-ignore]
from hud.eval import Runtime, RuntimeConfig, Task  # type: ignore[import-not-found,unused-ignore]
from hud.eval.runtime.core import validate_session_id  # type: ignore[import-not-found,unused-ignore]

from .._async_client import AsyncClient
from .._errors import ConflictError, DenvError, NotFoundError
from ._sandbox import DenvSandbox
from ._tools import serve_tools

logger = logging.getLogger("denv")

# A project name (packages/spec/src/names.ts), optionally @vN.
_IMAGE = re.compile(r"^([a-z0-9][a-z0-9-]{0,39})(?:@v?(\d+))?$")

#: The ``kind`` of the session archive :meth:`DenvEndpoint.snapshot_session` yields.
ARCHIVE_KIND = "denv-snapshot"


def not_a_version(image: str) -> str:
    """The refusal of a ``runtime_config.image`` that names no denv version.

    Args:
        image: The image as given.

    Returns:
        The exact message.
    """
    return (
        f"runtime_config.image '{image}' is not a denv version: DenvRuntime forks a version of "
        "a denv project, so give PROJECT or PROJECT@vN (deploy the image's compose project "
        "with 'denv deploy' first)"
    )


def unsupported_config(field: str) -> str:
    """The refusal of a ``runtime_config`` field denv does not take from a task row.

    Args:
        field: The field (``compose``, ``resources``).

    Returns:
        The exact message.
    """
    return (
        f"DenvRuntime does not take runtime_config.{field}: a denv sandbox runs its version "
        "as deployed (services and limits come from the project's compose file); deploy it "
        "with 'denv deploy' and name the version in runtime_config.image"
    )


def no_version(task: str) -> str:
    """The refusal of a task placed with no denv version to fork.

    Args:
        task: The task's slug.

    Returns:
        The exact message.
    """
    return (
        f"task '{task}' names no denv version to fork: give DenvRuntime(project=...) or the "
        "row's runtime_config.image (PROJECT or PROJECT@vN)"
    )


def not_a_denv_archive(path: str) -> str:
    """The refusal of a session archive another runtime made.

    Args:
        path: The archive.

    Returns:
        The exact message.
    """
    return (
        f"{path} is not a denv session snapshot: DenvEndpoint.restore_session restores what "
        "a DenvEndpoint snapshotted (a denv version), not another runtime's archive"
    )


def parse_image(image: str) -> tuple[str, str | None]:
    """Splits a ``runtime_config.image`` into a denv project and version.

    Args:
        image: ``PROJECT`` (the version its ``alpha`` environment runs) or ``PROJECT@vN``.

    Returns:
        (project, ``PROJECT@vN`` or None).

    Raises:
        ValueError: ``image`` is neither (e.g. a Docker image reference);
            the message is :func:`not_a_version`.
    """
    match = _IMAGE.match(image.strip())
    if match is None:
        raise ValueError(not_a_version(image))
    project, number = match.group(1), match.group(2)
    return project, None if number is None else f"{project}@v{int(number)}"


@dataclass(frozen=True)
class _Handoff:
    """A session snapshot on its way from the actor's placement to the verifier's."""

    project: str
    version: str


# HUD's rollout provisions the verifier inside the actor's ``snapshot_session`` block, in the
# same task: the snapshot is handed over here, so the verifier's placement forks it instead of
# forking the task's version and then replacing that fork on restore.
_handoff: ContextVar[_Handoff | None] = ContextVar("denv_hud_handoff", default=None)


def read_archive(path: Path) -> str:
    """The denv version a session archive of :meth:`DenvEndpoint.snapshot_session` names.

    Args:
        path: The archive.

    Returns:
        ``PROJECT@vN``.

    Raises:
        ValueError: It is not such an archive (:func:`not_a_denv_archive`).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        data = None
    if (
        not isinstance(data, dict)
        or data.get("kind") != ARCHIVE_KIND
        or not isinstance(data.get("version"), str)
    ):
        raise ValueError(not_a_denv_archive(str(path)))
    version: str = data["version"]
    return version


@dataclass(frozen=True, kw_only=True)
class DenvEndpoint(Runtime):  # type: ignore[misc,unused-ignore]
    """The connectable address of one denv placement, and its session transport.

    ``url`` is the HUD control channel of the environment built for the placement (served
    by this process on loopback); ``params`` names the sandbox (``denv_sandbox``) and the
    version it forked (``denv_version``).

    A session's snapshot is a denv snapshot of the placement's sandbox (a new version: the
    disk of every service and volume at one point), and its restore is a fork of that
    version: HUD's grader flow (``Task.verifier`` with a runtime of its own) snapshots the
    actor's session, closes the actor, places the verifier and restores into it, so the
    verifier grades a fork of the actor's world, never the world the agent still holds.

    Attributes:
        sandbox: The placement's sandbox handle (the one the environment was built with).
    """

    transports_sessions: ClassVar[bool] = True

    sandbox: DenvSandbox
    _provider: DenvRuntime

    @asynccontextmanager
    async def snapshot_session(self, session_id: str) -> AsyncIterator[Path | None]:
        """Snapshots the sandbox; yields an archive naming the new version.

        The archive is a small JSON file (``{"kind": "denv-snapshot", "version": ...}``)
        valid for the block. While the block runs, a placement this provider makes in the
        same task forks the snapshot directly. The version is deleted when the block ends
        and no fork runs from it any more (else by the last fork's placement), unless the
        provider keeps snapshots.

        Args:
            session_id: HUD's control session (a single path component).

        Yields:
            The archive's path.

        Raises:
            ValueError: ``session_id`` is not a single path component.
            DenvError: The snapshot failed.
        """
        validate_session_id(session_id)
        version = await self.sandbox.client.snapshot(self.sandbox.id)
        logger.info("denv: session %s of %s is %s", session_id, self.sandbox.id, version.id)
        token = _handoff.set(_Handoff(version.project, version.id))
        try:
            with tempfile.TemporaryDirectory(prefix="denv-hud-session-") as directory:
                archive = Path(directory) / "session.json"
                archive.write_text(
                    json.dumps(
                        {
                            "kind": ARCHIVE_KIND,
                            "version": version.id,
                            "sandbox": self.sandbox.id,
                            "session_id": session_id,
                        }
                    ),
                    encoding="utf-8",
                )
                yield archive
        finally:
            _handoff.reset(token)
            if not self._provider.keep_snapshots:
                await asyncio.shield(self._provider._delete_version(version.id))

    async def restore_session(self, session_id: str, source: Path) -> None:
        """Makes this placement's sandbox a fork of the snapshot ``source`` names.

        A placement made while that snapshot was handed over already is one: nothing to do.
        Otherwise the snapshot is forked into a new sandbox, the handle moves to it and the
        sandbox it held is destroyed.

        Args:
            session_id: HUD's control session.
            source: An archive :meth:`snapshot_session` yielded.

        Raises:
            ValueError: ``session_id`` is not a single path component, or ``source`` is not
                a denv session archive (:func:`not_a_denv_archive`).
            DenvError: The fork failed (the placement keeps its sandbox).
        """
        validate_session_id(session_id)
        version = read_archive(source)
        if self.sandbox._snapshot == version:
            return
        project, _ = parse_image(version.split("@", 1)[0])
        old = self.sandbox.id
        fork = await self.sandbox.client.create_sandbox(
            project,
            version=version,
            ttl_sec=self._provider.ttl_sec,
            timeout=self._provider.sandbox_timeout,
        )
        self.sandbox._replace(fork, snapshot=version)
        logger.info("denv: restored %s into %s (was %s)", version, fork.id, old)
        await self._provider._destroy(self.sandbox.client, old)


class DenvRuntime:
    """HUD's runtime provider on denv: each placement forks a version into a sandbox.

    ``DenvRuntime(build, project="quickstart")`` is a HUD ``Provider``: called with a task
    row, it forks the row's denv version into a new sandbox (a pool claim when the project
    keeps a warm pool), builds the HUD environment for it with ``build(sandbox)``, publishes
    the sandbox's ``denv`` MCP capability (a ``bash`` tool running in the sandbox as the
    agent user), serves the environment's control channel on loopback and yields a
    :class:`DenvEndpoint`. When the placement ends the channel closes, the environment
    stops and the sandbox is destroyed, whatever happened. Placements run at once: each has
    its own sandbox, environment and tool server.

    The version comes from the row's ``runtime_config.image`` (``PROJECT`` or
    ``PROJECT@vN``), else from ``project`` / ``version``. ``runtime_config.limits``
    map to the sandbox's readiness timeout (``startup_timeout_s``) and TTL
    (``run_timeout_s``); ``compose`` and ``resources`` are refused (a denv version runs as
    deployed).

    Args:
        build: Makes the placement's HUD environment from its sandbox (the templates close
            over the :class:`DenvSandbox` to act on and grade the world). Called once per
            placement, so each placement has its own ``Environment``.
        project: The denv project forked when a row names none.
        version: ``PROJECT@vN`` (default: the version the project's ``alpha`` runs).
        client: The denv client to use (not closed). Default: one per placement made from
            ``url``, ``token`` and ``config_path`` (or the configuration).
        url: Control plane URL, when no client is given.
        token: API token, when no client is given.
        config_path: Config file to read, when no client is given.
        ttl_sec: Seconds until denv destroys a sandbox the provider did not.
        sandbox_timeout: Seconds to wait for a sandbox to be ready.
        tools: Publish the ``denv`` MCP capability (``bash`` in the sandbox).
        tool_timeout: Seconds a ``bash`` command may run.
        output_limit: Bytes of each stream a ``bash`` result shows.
        keep_snapshots: Keep the versions session snapshots make (deleted otherwise).
        ready_timeout: Seconds the environment's ``@env.initialize`` hooks may take.

    Attributes:
        runtime_config: The default ``RuntimeConfig`` (``image`` = the project or version),
            which HUD layers a row's ``runtime_config`` over.

    Raises:
        TypeError: ``build`` is not callable.
        ValueError: ``project`` or ``version`` is no denv project or version
            (:func:`not_a_version`).
    """

    def __init__(
        self,
        build: Callable[[DenvSandbox], Environment],
        *,
        project: str | None = None,
        version: str | None = None,
        client: AsyncClient | None = None,
        url: str | None = None,
        token: str | None = None,
        config_path: str | os.PathLike[str] | None = None,
        ttl_sec: int = 3600,
        sandbox_timeout: float | None = 900.0,
        tools: bool = True,
        tool_timeout: float = 120.0,
        output_limit: int = 16384,
        keep_snapshots: bool = False,
        ready_timeout: float = 120.0,
    ) -> None:
        if not callable(build):
            raise TypeError(
                f"DenvRuntime: build must be a (DenvSandbox) -> hud.Environment callable, "
                f"got {build!r}"
            )
        self._build = build
        image = version or project
        if image is not None:
            parse_image(image)
        self.runtime_config: RuntimeConfig | None = (
            RuntimeConfig(image=image) if image is not None else None
        )
        self._client = client
        self._settings: dict[str, Any] = {"url": url, "token": token, "config_path": config_path}
        self.ttl_sec = int(ttl_sec)
        self.sandbox_timeout = sandbox_timeout
        self.tools = tools
        self.tool_timeout = tool_timeout
        self.output_limit = output_limit
        self.keep_snapshots = keep_snapshots
        self.ready_timeout = ready_timeout

    def __repr__(self) -> str:
        image = self.runtime_config.image if self.runtime_config is not None else None
        return f"DenvRuntime({image!r})"

    def resolve(self, task: Task) -> tuple[RuntimeConfig, str, str | None]:
        """What a placement of ``task`` forks: its effective config, project and version.

        Args:
            task: The row.

        Returns:
            (the effective ``RuntimeConfig``, the project, ``PROJECT@vN`` or None for the
            version the project's ``alpha`` runs).

        Raises:
            ValueError: The row asks for ``compose`` or ``resources``
                (:func:`unsupported_config`), its image is not a denv version
                (:func:`not_a_version`), or nothing names a version (:func:`no_version`).
        """
        config = (self.runtime_config or RuntimeConfig()).with_overrides(task.runtime_config)
        for field in ("compose", "resources"):
            if getattr(config, field) is not None:
                raise ValueError(unsupported_config(field))
        if config.image is None:
            raise ValueError(no_version(task.slug))
        project, version = parse_image(config.image)
        return config, project, version

    @asynccontextmanager
    async def __call__(self, task: Task) -> AsyncIterator[Runtime]:
        """Places ``task``: a sandbox, its environment served on loopback, until the block ends.

        Args:
            task: The row to place (an actor's task, or a verifier).

        Yields:
            The placement's :class:`DenvEndpoint`.

        Raises:
            ValueError: See :meth:`resolve`.
            TypeError: ``build`` returned something else than a ``hud.Environment``.
            DenvError: denv could not create the sandbox (e.g. ``EgressLeakError``).
        """
        config, project, version = self.resolve(task)
        limits = config.limits
        ttl = self.ttl_sec
        timeout = self.sandbox_timeout
        if limits is not None and limits.run_timeout_s is not None:
            ttl = limits.run_timeout_s
        if limits is not None and limits.startup_timeout_s is not None:
            timeout = float(limits.startup_timeout_s)
        handoff = _handoff.get()
        snapshot = handoff.version if handoff is not None and handoff.project == project else None
        async with self._open_client() as client:
            environment = await client.create_sandbox(
                project, version=snapshot or version, ttl_sec=ttl, timeout=timeout
            )
            sandbox = DenvSandbox(client, environment)
            sandbox._snapshot = snapshot
            logger.info("denv: %s (%s) for task %s", environment.id, sandbox.version, task.slug)
            try:
                async with AsyncExitStack() as stack:
                    env = self._build(sandbox)
                    if not isinstance(env, Environment):
                        raise TypeError(
                            f"DenvRuntime: build returned {env!r}, not a hud.Environment"
                        )
                    if self.tools:
                        capability = await stack.enter_async_context(
                            serve_tools(
                                sandbox, timeout=self.tool_timeout, output_limit=self.output_limit
                            )
                        )
                        env.add_capability(capability)
                    stack.push_async_callback(env.stop)
                    await asyncio.wait_for(env.start(), self.ready_timeout)
                    server = await bind(env, "127.0.0.1", 0)
                    stack.push_async_callback(_shutdown, server)
                    host, port = server.sockets[0].getsockname()[:2]
                    yield DenvEndpoint(
                        f"tcp://{host}:{port}",
                        params={"denv_sandbox": sandbox.id, "denv_version": sandbox.version},
                        config=config,
                        sandbox=sandbox,
                        _provider=self,
                    )
            finally:
                await asyncio.shield(self._release(client, sandbox))

    # ------------------------------------------------------------------ internals

    @asynccontextmanager
    async def _open_client(self) -> AsyncIterator[AsyncClient]:
        if self._client is not None:
            yield self._client
            return
        async with AsyncClient(
            self._settings["url"],
            self._settings["token"],
            config_path=self._settings["config_path"],
        ) as client:
            yield client

    async def _release(self, client: AsyncClient, sandbox: DenvSandbox) -> None:
        await self._destroy(client, sandbox.id)
        if sandbox._snapshot is not None and not self.keep_snapshots:
            await self._delete_version(sandbox._snapshot, client)

    async def _destroy(self, client: AsyncClient, sandbox: str) -> None:
        try:
            await client.destroy_sandbox(sandbox)
        except NotFoundError:
            pass
        except DenvError as err:
            logger.warning("denv: could not destroy sandbox %s: %s", sandbox, err)

    async def _delete_version(self, version: str, client: AsyncClient | None = None) -> None:
        # A version a fork still runs from is refused (ConflictError): the fork's placement
        # deletes it when it ends.
        async with contextlib.AsyncExitStack() as stack:
            if client is None:
                client = await stack.enter_async_context(self._open_client())
            try:
                await client.delete_version(version)
            except (NotFoundError, ConflictError):
                pass
            except DenvError as err:
                logger.warning("denv: could not delete %s: %s", version, err)
