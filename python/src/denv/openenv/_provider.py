"""``DenvProvider``: openenv-core's ``ContainerProvider`` backed by denv sandboxes."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from typing import Any

import httpx

from .._client import Client
from .._errors import ConflictError, DenvError, NotFoundError
from .._models import Environment
from .._tunnel import PortForward

try:
    from openenv.core.containers.runtime.providers import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
        ContainerProvider,
    )
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("denv.openenv needs openenv-core: pip install -e 'python[openenv]'") from exc

logger = logging.getLogger("denv")

#: The port OpenEnv servers listen on inside their container.
OPENENV_PORT = 8000

# A project name (packages/spec/src/names.ts), optionally @vN.
_IMAGE = re.compile(r"^([a-z0-9][a-z0-9-]{0,39})(?:@v?(\d+))?$")


def parse_image(image: str) -> tuple[str, str | None]:
    """Splits the ``image`` OpenEnv passes into a denv project and version.

    Args:
        image: ``PROJECT`` (the version the project's ``alpha`` environment runs) or
            ``PROJECT@vN``.

    Returns:
        (project, ``PROJECT@vN`` or None).

    Raises:
        ValueError: ``image`` is neither form (e.g. a Docker image reference).
    """
    match = _IMAGE.match(image.strip())
    if match is None:
        raise ValueError(
            f"'{image}' is not a denv version: DenvProvider forks a version of a denv project, "
            "so pass PROJECT or PROJECT@vN (deploy the image's compose project with "
            "'denv deploy' first)"
        )
    project, number = match.group(1), match.group(2)
    return project, None if number is None else f"{project}@v{int(number)}"


class DenvProvider(ContainerProvider):  # type: ignore[misc,unused-ignore]
    """Runs OpenEnv environments as denv sandboxes (forks of a version), one per provider.

    ``start_container(image)`` forks the version ``image`` names (``PROJECT`` or
    ``PROJECT@vN``) into a new sandbox and returns ``http://127.0.0.1:PORT``: a local
    listener that tunnels each connection to the server's port inside the sandbox
    (:meth:`denv.Client.port_forward`). ``stop_container()`` closes the listener and destroys
    the sandbox. :meth:`fork` snapshots the running sandbox and starts a second provider on a
    fork of that snapshot.

    Args:
        client: The denv client to use (not closed by the provider). Default: one made from
            ``url``, ``token`` and ``config_path`` (or the configuration), closed on stop.
        url: Control plane URL, when no client is given.
        token: API token, when no client is given.
        config_path: Config file to read, when no client is given.
        service: The service the OpenEnv server runs in (default: the agent service).
        server_port: The port it listens on inside the environment.
        ttl_sec: Seconds until denv destroys a sandbox that was not stopped.
        sandbox_timeout: Seconds to wait for a sandbox to be ready.

    Attributes:
        sandbox: The running sandbox (None before start and after stop).
        version: The version the sandbox was forked from.
        base_url: The local URL of the server (None before start and after stop).
        snapshot_version: For a provider made by :meth:`fork`: the snapshot it forked, deleted
            when it stops unless ``keep_version`` was given.
    """

    def __init__(
        self,
        client: Client | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        config_path: str | os.PathLike[str] | None = None,
        service: str | None = None,
        server_port: int = OPENENV_PORT,
        ttl_sec: int = 3600,
        sandbox_timeout: float | None = 900.0,
    ) -> None:
        self._given_client = client
        self._client: Client | None = client
        self._settings: dict[str, Any] = {"url": url, "token": token, "config_path": config_path}
        self.service = service
        self.server_port = int(server_port)
        self.ttl_sec = int(ttl_sec)
        self.sandbox_timeout = sandbox_timeout
        self.sandbox: Environment | None = None
        self.version: str | None = None
        self.base_url: str | None = None
        self.snapshot_version: str | None = None
        self._delete_snapshot = False
        self._forward: PortForward | None = None

    def __repr__(self) -> str:
        where = self.sandbox.id if self.sandbox is not None else "not started"
        return f"DenvProvider({where}, base_url={self.base_url!r})"

    @property
    def client(self) -> Client:
        """The denv client (made on first use when none was given)."""
        if self._client is None:
            self._client = Client(
                self._settings["url"],
                self._settings["token"],
                config_path=self._settings["config_path"],
            )
        return self._client

    # ------------------------------------------------------------------ ContainerProvider

    def start_container(
        self,
        image: str,
        port: int | None = None,
        env_vars: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> str:
        """Forks a version into a new sandbox and tunnels a local port to its server.

        Args:
            image: ``PROJECT`` (the version its ``alpha`` environment runs) or ``PROJECT@vN``.
            port: The local port to listen on (default: a free one).
            env_vars: Not supported: a fork runs its version as deployed (set variables in the
                compose file); only None or an empty mapping is accepted.
            **kwargs: ``ttl_sec`` and ``name`` (the sandbox's environment name).

        Returns:
            ``http://127.0.0.1:PORT``.

        Raises:
            ValueError: ``image`` is not ``PROJECT`` or ``PROJECT@vN``, or ``env_vars`` is set.
            TypeError: An unknown keyword argument.
            RuntimeError: The provider already runs a sandbox, or denv could not create it
                (the :class:`denv.DenvError` is the ``__cause__``), or the sandbox has no
                such service.
        """
        if self.sandbox is not None:
            raise RuntimeError(
                f"this DenvProvider already runs {self.sandbox.id}: one provider manages one "
                "sandbox (stop_container() first, or make another provider)"
            )
        project, version = parse_image(image)
        if env_vars:
            raise ValueError(
                "DenvProvider cannot set env_vars: a denv sandbox runs its version as deployed; "
                f"set {', '.join(sorted(env_vars))} in the project's compose file"
            )
        ttl = int(kwargs.pop("ttl_sec", self.ttl_sec))
        name = kwargs.pop("name", None)
        if kwargs:
            raise TypeError(f"DenvProvider.start_container: unexpected {', '.join(sorted(kwargs))}")
        try:
            sandbox = self.client.create_sandbox(
                project, version=version, name=name, ttl_sec=ttl, timeout=self.sandbox_timeout
            )
        except DenvError as exc:
            raise RuntimeError(f"denv could not fork {image}: {exc}") from exc
        self.sandbox = sandbox
        self.version = sandbox.parent_version or sandbox.version or version
        try:
            service = self._service_of(sandbox)
            self._forward = self.client.port_forward(
                sandbox.id, service, self.server_port, local_port=port or 0
            )
        except BaseException:
            self._teardown()
            raise
        self.base_url = f"http://127.0.0.1:{self._forward.port}"
        logger.info(
            "denv: %s runs %s; %s -> %s:%d",
            sandbox.id,
            self.version,
            self.base_url,
            service,
            self.server_port,
        )
        return self.base_url

    def wait_for_ready(self, base_url: str, timeout_s: float = 30.0) -> None:
        """Polls ``GET {base_url}/health`` until it answers 200.

        Args:
            base_url: The URL ``start_container`` returned.
            timeout_s: Seconds to wait.

        Raises:
            TimeoutError: No 200 within ``timeout_s`` (the built-in one).
        """
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        with httpx.Client(trust_env=False, timeout=5.0) as http:
            while True:
                try:
                    resp = http.get(f"{base_url.rstrip('/')}/health")
                    if resp.status_code == 200:
                        return
                    last = f"HTTP {resp.status_code}"
                except httpx.HTTPError as exc:
                    last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"{base_url}/health did not answer 200 within {timeout_s:g}s ({last})"
                    )
                time.sleep(0.25)

    def stop_container(self) -> None:
        """Closes the tunnel and destroys the sandbox (a no-op when none runs).

        A provider made by :meth:`fork` also deletes its snapshot version unless it was
        kept or another environment still runs from it.

        Raises:
            DenvError: The sandbox could not be destroyed (other than already gone).
        """
        self._teardown()

    # ------------------------------------------------------------------ denv

    def fork(
        self, *, port: int | None = None, timeout_s: float = 120.0, keep_version: bool = False
    ) -> DenvProvider:
        """Snapshots the running sandbox and starts a new provider on a fork of the snapshot.

        The snapshot holds the sandbox's disk (container layers and volumes), not its
        processes' memory: the fork's services start fresh from that disk, so an OpenEnv
        server continues an episode after a fork only if it keeps the episode on disk.

        Args:
            port: The new provider's local port (default: a free one).
            timeout_s: Seconds to wait for the fork's server to answer ``/health``.
            keep_version: Keep the snapshot version when the new provider stops.

        Returns:
            The new provider, started (``base_url`` set) and ready; stop it with
            ``stop_container()`` (or close the OpenEnv client it is given to).

        Raises:
            RuntimeError: This provider runs no sandbox, or the snapshot or fork failed.
            TimeoutError: The fork's server did not become ready.
        """
        if self.sandbox is None:
            raise RuntimeError("DenvProvider.fork: no sandbox runs; start_container() first")
        try:
            snapshot = self.client.snapshot(self.sandbox.id)
        except DenvError as exc:
            raise RuntimeError(f"denv could not snapshot {self.sandbox.id}: {exc}") from exc
        child = DenvProvider(
            self._given_client,
            **self._settings,
            service=self.service,
            server_port=self.server_port,
            ttl_sec=self.ttl_sec,
            sandbox_timeout=self.sandbox_timeout,
        )
        child.snapshot_version = snapshot.id
        child._delete_snapshot = not keep_version
        try:
            url = child.start_container(snapshot.id, port=port)
            child.wait_for_ready(url, timeout_s=timeout_s)
        except BaseException:
            child._teardown()
            raise
        return child

    # ------------------------------------------------------------------ internals

    def _service_of(self, sandbox: Environment) -> str:
        names = [s.name for s in sandbox.services]
        if self.service is not None:
            service = self.service
        elif sandbox.agent is not None:
            service = sandbox.agent.service
        elif len(names) == 1:
            service = names[0]
        else:
            raise RuntimeError(
                f"{sandbox.id} has no agent service and {len(names)} services: "
                "pass DenvProvider(service=...)"
            )
        if names and service not in names:
            raise RuntimeError(
                f"{sandbox.id} has no service '{service}' (it has {', '.join(names)})"
            )
        return service

    def _teardown(self) -> None:
        forward, self._forward = self._forward, None
        sandbox, self.sandbox = self.sandbox, None
        self.base_url = None
        if forward is not None:
            forward.close()
        try:
            if sandbox is not None:
                with contextlib.suppress(NotFoundError):
                    self.client.destroy_sandbox(sandbox.id)
            if self._delete_snapshot and self.snapshot_version is not None:
                with contextlib.suppress(NotFoundError, ConflictError):
                    self.client.delete_version(self.snapshot_version)
                self._delete_snapshot = False
        finally:
            if self._given_client is None and self._client is not None:
                self._client.close()
                self._client = None
