# unasync: async
"""The asyncio client of the denv control plane (REST, SSE and WebSocket routes).

python/scripts/unasync.py writes the blocking client, ``_client.py``, from this file.
"""
# unasync: sync
# """The blocking client of the denv control plane (REST, SSE and WebSocket routes)."""
# unasync: end

from __future__ import annotations

# unasync: async
import asyncio
import contextlib
import inspect
import json
import os
import posixpath
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)

# unasync: sync
# import json
# import os
# import posixpath
# import threading
# import time
# from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
# unasync: end
from types import TracebackType
from typing import IO, Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from ._base import (
    REST_EXEC_LIMIT,
    SOURCE_HASH_HEADER,
    STDIN_END,
    WS_MAX_SIZE,
    ClientBase,
    EnvRef,
    VersionRef,
    close_info,
    closed_error,
    env_id,
    env_parts,
    env_path,
    exec_http_timeout,
    files_params,
    frame_data,
    frame_error,
    iter_stdin,
    mapped_transport_errors,
    parse_list,
    parse_model,
    q,
    sandbox_body,
    split_file_path,
    stdin_frame,
    stream_frame,
    timeout_for,
    version_id,
    version_parts,
    ws_url,
)
from ._errors import (
    DenvTimeoutError,
    InternalError,
    InvalidRequestError,
    NotFoundError,
    error_from_response,
)
from ._exec import ExecResult, as_bytes, decode_exec_response, exec_request, request_size
from ._models import (
    Deployment,
    DeploymentEvent,
    Environment,
    EpisodeLog,
    FilesResult,
    GithubConnection,
    Logs,
    Pool,
    ProbeResult,
    Project,
    ReplayResult,
    ReplaySummary,
    Target,
    TargetKind,
    VerifyResult,
    Version,
)
from ._sse import SSEDecoder, deployment_event
from ._tar import first_entry, iter_chunks, single_file_tar, source_archive, source_hash
from ._tunnel import AsyncPortForward, AsyncTunnel

# unasync: async
EventCallback = Callable[[DeploymentEvent], Awaitable[None] | None]
OutputCallback = Callable[[bytes], Awaitable[None] | None]
StdinSource = bytes | str | IO[bytes] | Iterable[bytes] | AsyncIterable[bytes]
# unasync: sync
# EventCallback = Callable[[DeploymentEvent], None]
# OutputCallback = Callable[[bytes], None]
# StdinSource = bytes | str | IO[bytes] | Iterable[bytes]
# unasync: end


class AsyncClient(ClientBase):
    """An asyncio client of the denv control plane.

    Configuration comes from ``~/.config/denv/config.json`` (``url``, ``token``,
    ``project``), overridden by ``DENV_URL``, ``DENV_TOKEN``, ``DENV_PROJECT``, overridden
    by the arguments. Environments are named ``PROJECT/ENV`` (``PROJECT`` alone means
    ``PROJECT/alpha``); versions ``PROJECT@vN``.

    Use it as an async context manager, or call :meth:`aclose`.

    Args:
        url: Control plane URL (e.g. ``http://127.0.0.1:7070``).
        token: API token.
        project: Default project of calls that name none.
        timeout: Seconds to wait for ordinary requests (long ones wait as long as they
            take: exec until its own timeout, uploads and downloads until done).
        config_path: Config file to read instead of the default location.
        transport: An httpx transport (tests pass ``httpx.MockTransport``).

    Raises:
        ConfigError: No URL is configured, or the config file is unreadable.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        project: str | None = None,
        *,
        timeout: float = 30.0,
        config_path: str | os.PathLike[str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, project, config_path)
        self._timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=self._url,
            headers=self._headers(),
            timeout=timeout_for(timeout),
            transport=transport,
        )

    async def aclose(self) -> None:
        """Closes the HTTP connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ plumbing

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        content: bytes | AsyncIterable[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        what = f"{method} {path}"
        with mapped_transport_errors(self._url, what):
            resp = await self._http.request(
                method,
                path,
                params=params,
                json=json_body,
                content=content,
                headers=headers,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        if resp.status_code >= 400:
            raise error_from_response(resp)
        return resp

    async def _get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return (await self._send("GET", path, params=params)).json()

    async def _ws(self, path: str, params: Mapping[str, str] | None = None) -> ClientConnection:
        try:
            conn = await connect(
                ws_url(self._url, path, params),
                additional_headers=self._headers(),
                max_size=WS_MAX_SIZE,
                open_timeout=self._timeout,
                close_timeout=5,
            )
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            raise self._ws_error(path, exc) from exc
        # unasync: async
        return conn
        # unasync: sync
        # # websockets >= 17.1 wants connections entered as context managers; a tunnel
        # # outlives this call, so it is entered here and closed by its owner.
        # return conn.__enter__()
        # unasync: end

    async def _long(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        wait: bool,
        on_event: EventCallback | None,
        check: bool = True,
    ) -> Deployment:
        resp = await self._send(method, path, json_body=json_body)
        dep = parse_model(Deployment, resp.json(), path)
        if wait and not dep.finished:
            dep = await self.wait_deployment(dep.id, on_event=on_event, check=False)
        if check:
            dep.raise_for_status()
        return dep

    # ------------------------------------------------------------------ service

    async def health(self) -> bool:
        """Whether the control plane answers ``GET /healthz``.

        Returns:
            True when it answered ``{"ok": true}``.

        Raises:
            DenvConnectionError: The control plane could not be reached.
        """
        data = await self._get_json("/healthz")
        return bool(isinstance(data, dict) and data.get("ok"))

    async def whoami(self) -> dict[str, Any]:
        """Who the token is.

        Returns:
            ``{"id", "name", "role", "project"?}``.

        Raises:
            UnauthorizedError: The token is missing or unknown.
        """
        data = await self._get_json("/v1/whoami")
        return dict(data) if isinstance(data, dict) else {}

    # ------------------------------------------------------------------ projects

    async def list_projects(self) -> list[Project]:
        """The projects the token may see.

        Returns:
            The projects (only its own for a project-scoped token).
        """
        return parse_list(
            Project, await self._get_json("/v1/projects"), "projects", "GET /v1/projects"
        )

    async def get_project(self, name: str | None = None) -> Project:
        """One project.

        Args:
            name: The project (default: the configured project).

        Returns:
            The project.

        Raises:
            NotFoundError: No such project.
        """
        path = f"/v1/projects/{q(self._project(name))}"
        return parse_model(Project, await self._get_json(path), path)

    async def create_project(
        self,
        name: str | None = None,
        *,
        kind: str = "rl-environment",
        repo: str | None = None,
        compose_path: str = "compose.yaml",
    ) -> Project:
        """Creates a project (admin token).

        Args:
            name: The project (default: the configured project); 1-40 of ``a-z0-9-``.
            kind: ``rl-environment`` (protections on) or ``service``.
            repo: Git URL to deploy from (else deploys upload the source).
            compose_path: The compose file, relative to the project's root.

        Returns:
            The project.

        Raises:
            ConflictError: It exists already.
            ForbiddenError: The token is not an admin token.
        """
        body: dict[str, Any] = {
            "name": self._project(name),
            "kind": kind,
            "compose_path": compose_path,
        }
        if repo is not None:
            body["repo"] = repo
        return parse_model(
            Project,
            (await self._send("POST", "/v1/projects", json_body=body)).json(),
            "POST /v1/projects",
        )

    async def connect_github(
        self,
        repository: str,
        *,
        project: str | None = None,
        branch: str | None = None,
    ) -> GithubConnection:
        """Connects a project to a GitHub repository: each push to its branch deploys alpha.

        The control plane's GitHub App must be installed on the repository. Afterwards
        ``deploy(git_ref=...)`` deploys any ref of it, fetched by the host that builds.

        Args:
            repository: ``OWNER/REPO``.
            project: The project (default: the configured project).
            branch: The branch whose pushes deploy (default: the repository's default branch).

        Returns:
            The connection (repository, branch, installation id, clone URL).

        Raises:
            InvalidRequestError: The app is not configured on the control plane, or not
                installed on the repository.
            ConflictError: Another project is connected to the repository.
        """
        body: dict[str, Any] = {"repository": repository}
        if branch is not None:
            body["branch"] = branch
        route = f"/v1/projects/{q(self._project(project))}/github"
        resp = await self._send("POST", route, json_body=body)
        return parse_model(GithubConnection, resp.json(), f"POST {route}")

    async def delete_project(self, name: str | None = None) -> None:
        """Deletes a project (admin token).

        Args:
            name: The project (default: the configured project).

        Raises:
            ConflictError: It still has environments.
        """
        await self._send("DELETE", f"/v1/projects/{q(self._project(name))}")

    # ------------------------------------------------------------------ deployments

    async def deploy(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        project: str | None = None,
        environment: str = "alpha",
        git_ref: str | None = None,
        wait: bool = True,
        on_event: EventCallback | None = None,
        extra_files: Mapping[str, bytes] | None = None,
        placement: Mapping[str, str] | None = None,
    ) -> Deployment:
        """Deploys a project folder (streamed as a tar archive) or a git ref.

        The upload carries the folder's content hash (:func:`denv.source_hash`) in the
        ``X-Denv-Source-Sha256`` header, so a deploy can be matched with its source later.

        Args:
            path: The project folder (the folder of its compose file).
            project: The project (default: the configured project).
            environment: The environment to deploy to.
            git_ref: A git ref, for a project with a repository (instead of ``path``).
            wait: Wait for the deployment to finish.
            on_event: Called with each phase and log event while waiting.
            extra_files: Files added to the archive (relative path -> content).
            placement: Labels the host must carry (``k=v``; over the file's
                ``x-denv.placement``; docs/reference/targets.md#placement).

        Returns:
            The deployment (finished when ``wait``).

        Raises:
            InvalidRequestError: Neither or both of ``path`` and ``git_ref``.
            InvalidComposeError: The compose file was refused (``details`` lists why).
            DenvError: The deployment failed (its code's subclass, ``deployment`` set).
        """
        name = self._project(project)
        route = f"/v1/projects/{q(name)}/deploy"
        params = {"environment": environment}
        if placement:
            params["placement"] = ",".join(f"{k}={v}" for k, v in placement.items())
        if (path is None) == (git_ref is None):
            raise InvalidRequestError("give the project folder (path=...) or git_ref=..., not both")
        if git_ref is not None:
            resp = await self._send("POST", route, params=params, json_body={"git_ref": git_ref})
        else:
            assert path is not None
            # unasync: async
            digest = await asyncio.to_thread(source_hash, path, extra_files)
            archive = await asyncio.to_thread(source_archive, path, extra_files)
            # unasync: sync
            # digest = source_hash(path, extra_files)
            # archive = source_archive(path, extra_files)
            # unasync: end
            with archive:
                resp = await self._send(
                    "POST",
                    route,
                    params=params,
                    content=_file_chunks(archive),
                    headers={"Content-Type": "application/x-tar", SOURCE_HASH_HEADER: digest},
                    timeout=timeout_for(None),
                )
        dep = parse_model(Deployment, resp.json(), route)
        if wait and not dep.finished:
            dep = await self.wait_deployment(dep.id, on_event=on_event, check=False)
        dep.raise_for_status()
        return dep

    async def list_deployments(self, project: str | None = None) -> list[Deployment]:
        """A project's deployments, newest first.

        Args:
            project: The project (default: the configured project).

        Returns:
            The deployments.
        """
        path = f"/v1/projects/{q(self._project(project))}/deployments"
        return parse_list(Deployment, await self._get_json(path), "deployments", path)

    async def get_deployment(self, deployment_id: str) -> Deployment:
        """One deployment.

        Args:
            deployment_id: Its id.

        Returns:
            The deployment.

        Raises:
            NotFoundError: No such deployment.
        """
        path = f"/v1/deployments/{q(deployment_id)}"
        return parse_model(Deployment, await self._get_json(path), path)

    async def deployment_events(
        self, deployment_id: str, *, timeout: float | None = None
    ) -> AsyncGenerator[DeploymentEvent, None]:
        """The deployment's log as it happens (server-sent events; the past is replayed first).

        Args:
            deployment_id: The deployment.
            timeout: Seconds to wait for each event (None: no limit).

        Yields:
            ``phase``, ``log`` and finally ``done`` events.

        Raises:
            NotFoundError: No such deployment.
            DenvTimeoutError: No event came within ``timeout``.
        """
        path = f"/v1/deployments/{q(deployment_id)}/log"
        with mapped_transport_errors(self._url, f"GET {path}"):
            async with self._http.stream(
                "GET", path, headers={"Accept": "text/event-stream"}, timeout=timeout_for(timeout)
            ) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    raise error_from_response(resp)
                decoder = SSEDecoder()
                async for line in resp.aiter_lines():
                    msg = decoder.feed(line)
                    event = deployment_event(msg) if msg is not None else None
                    if event is not None:
                        yield event
                        if event.type == "done":
                            return
                msg = decoder.flush()
                event = deployment_event(msg) if msg is not None else None
                if event is not None:
                    yield event

    async def wait_deployment(
        self,
        deployment: str | Deployment,
        *,
        on_event: EventCallback | None = None,
        timeout: float | None = None,
        check: bool = True,
    ) -> Deployment:
        """Waits for a deployment to finish, following its log stream.

        When the stream breaks off it is re-opened (its replay is passed to ``on_event``
        again); the deployment is fetched when the stream ends without a ``done`` event.

        Args:
            deployment: The deployment or its id.
            on_event: Called with each event.
            timeout: Seconds to wait in all (None: no limit).
            check: Raise the deployment's error when it failed.

        Returns:
            The finished deployment.

        Raises:
            DenvTimeoutError: It did not finish within ``timeout``.
            DenvError: It failed and ``check`` is set (its code's subclass).
        """
        dep_id = deployment.id if isinstance(deployment, Deployment) else deployment
        deadline = None if timeout is None else time.monotonic() + timeout
        attempt = 0
        while True:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.1)
            final: Deployment | None = None
            try:
                async for event in self.deployment_events(dep_id, timeout=remaining):
                    if on_event is not None:
                        await _notify(on_event, event)
                    if event.type == "done" and event.deployment is not None:
                        final = event.deployment
            # The built-in ConnectionError: DenvConnectionError and any other dropped stream.
            except (DenvTimeoutError, ConnectionError) as exc:
                timed_out = isinstance(exc, DenvTimeoutError) and deadline is not None
                if timed_out and deadline is not None and time.monotonic() >= deadline:
                    raise DenvTimeoutError(
                        f"deployment {dep_id} did not finish within {timeout} s"
                    ) from exc
                attempt += 1
                if attempt > 5:
                    raise
            if final is None:
                final = await self.get_deployment(dep_id)
            if final.finished:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise DenvTimeoutError(f"deployment {dep_id} did not finish within {timeout} s")
            await asyncio.sleep(min(0.5 * (attempt + 1), 5.0))
        if check:
            final.raise_for_status()
        return final

    # ------------------------------------------------------------------ environments

    async def list_environments(self, project: str | None = None) -> list[Environment]:
        """A project's environments.

        Args:
            project: The project (default: the configured project).

        Returns:
            The environments.
        """
        path = f"/v1/projects/{q(self._project(project))}/environments"
        return parse_list(Environment, await self._get_json(path), "environments", path)

    async def get_environment(self, environment: EnvRef) -> Environment:
        """One environment.

        Args:
            environment: ``PROJECT/ENV``.

        Returns:
            The environment.

        Raises:
            NotFoundError: No such environment.
        """
        path = env_path(environment)
        return parse_model(Environment, await self._get_json(path), path)

    async def fork(
        self,
        environment: EnvRef,
        *,
        version: VersionRef | None = None,
        name: str | None = None,
        on_event: EventCallback | None = None,
    ) -> Environment:
        """Forks a version of an environment's project into a new environment, and waits.

        Args:
            environment: ``PROJECT/ENV`` whose project is forked.
            version: The version (default: the project's current version).
            name: The new environment's name (default: one the control plane picks).
            on_event: Called with each deployment event.

        Returns:
            The new environment.

        Raises:
            EgressLeakError: The fork's egress probe found a way out.
            DenvError: The fork failed (its code's subclass).
        """
        body: dict[str, Any] = {}
        if version is not None:
            body["version"] = version_id(version, env_parts(environment)[0])
        if name is not None:
            body["name"] = name
        dep = await self._long(
            "POST", env_path(environment, "/fork"), json_body=body, wait=True, on_event=on_event
        )
        if isinstance(dep.result, dict) and "id" in dep.result:
            return parse_model(Environment, dep.result, "fork result")
        if dep.environment and dep.environment != env_id(environment):
            return await self.get_environment(dep.environment)
        raise InternalError(f"fork deployment {dep.id} finished without naming its environment")

    async def snapshot(
        self, environment: EnvRef, *, on_event: EventCallback | None = None
    ) -> Version:
        """Snapshots an environment (all services frozen at one point) into a new version.

        Args:
            environment: ``PROJECT/ENV``.
            on_event: Called with each deployment event.

        Returns:
            The new version.

        Raises:
            DenvError: The snapshot failed (its code's subclass).
        """
        dep = await self._long(
            "POST", env_path(environment, "/snapshot"), wait=True, on_event=on_event
        )
        if isinstance(dep.result, dict):
            return parse_model(Version, dep.result, "snapshot result")
        if isinstance(dep.result, str):
            return await self.get_version(dep.result)
        raise InternalError(f"snapshot deployment {dep.id} finished without a version")

    async def rollback(
        self,
        environment: EnvRef,
        version: VersionRef,
        *,
        wait: bool = True,
        on_event: EventCallback | None = None,
    ) -> Deployment:
        """Replaces an environment with a fork of an older version.

        Args:
            environment: ``PROJECT/ENV``.
            version: The version to roll back to.
            wait: Wait for the deployment to finish.
            on_event: Called with each deployment event.

        Returns:
            The deployment.

        Raises:
            DenvError: The rollback failed (its code's subclass).
        """
        body = {"version": version_id(version, env_parts(environment)[0])}
        return await self._long(
            "POST", env_path(environment, "/rollback"), json_body=body, wait=wait, on_event=on_event
        )

    async def stop(
        self, environment: EnvRef, *, wait: bool = True, on_event: EventCallback | None = None
    ) -> Deployment:
        """Stops an environment's services (its data stays).

        Args:
            environment: ``PROJECT/ENV``.
            wait: Wait for the deployment to finish.
            on_event: Called with each deployment event.

        Returns:
            The deployment.

        Raises:
            DenvError: It failed (its code's subclass).
        """
        return await self._long(
            "POST", env_path(environment, "/stop"), wait=wait, on_event=on_event
        )

    async def start(
        self, environment: EnvRef, *, wait: bool = True, on_event: EventCallback | None = None
    ) -> Deployment:
        """Starts a stopped environment (start, health, egress probe).

        Args:
            environment: ``PROJECT/ENV``.
            wait: Wait for the deployment to finish.
            on_event: Called with each deployment event.

        Returns:
            The deployment.

        Raises:
            DenvError: It failed (its code's subclass).
        """
        return await self._long(
            "POST", env_path(environment, "/start"), wait=wait, on_event=on_event
        )

    async def destroy(
        self, environment: EnvRef, *, wait: bool = True, on_event: EventCallback | None = None
    ) -> Deployment:
        """Destroys an environment (containers, network and volumes).

        Args:
            environment: ``PROJECT/ENV``.
            wait: Wait for the deployment to finish.
            on_event: Called with each deployment event.

        Returns:
            The deployment.

        Raises:
            DenvError: It failed (its code's subclass).
        """
        return await self._long("DELETE", env_path(environment), wait=wait, on_event=on_event)

    async def verify(
        self, environment: EnvRef, *, on_event: EventCallback | None = None
    ) -> VerifyResult:
        """Grades an episode: stops the agent, snapshots, forks, runs the verifier there.

        Args:
            environment: ``PROJECT/ENV`` of the episode.
            on_event: Called with each deployment event.

        Returns:
            The verifier's result (``status``, ``reward``, ``rewards``, ``log``, ...).

        Raises:
            AgentSurvivedError: Agent processes survived the kill.
            VerifierFailedError: The verifier could not grade.
            DenvError: The deployment failed otherwise (its code's subclass).
        """
        dep = await self._long(
            "POST", env_path(environment, "/verify"), wait=True, on_event=on_event
        )
        return parse_model(VerifyResult, dep.result, "verify result")

    # ------------------------------------------------------------------ episodes

    async def episode_log(
        self, environment: EnvRef, *, after: int | None = None, limit: int | None = None
    ) -> EpisodeLog:
        """One page of an episode's command log: each exec and files put, with its digests.

        Args:
            environment: ``PROJECT/ENV`` of a fork or a sandbox.
            after: List the steps after this seq (the ``next`` of the page before).
            limit: At most this many steps (default 100, at most 1000).

        Returns:
            The page (``steps``, ``total``, ``dropped``, ``next``, ``started_from``).

        Raises:
            NotFoundError: No such environment, or the token cannot read it.
        """
        params = {k: str(v) for k, v in (("after", after), ("limit", limit)) if v is not None}
        path = env_path(environment, "/episode")
        return parse_model(EpisodeLog, await self._get_json(path, params or None), path)

    async def replay(
        self,
        environment: EnvRef,
        *,
        from_version: VersionRef | None = None,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ReplayResult:
        """Runs an episode's log again on a fresh fork and compares each step.

        The fork is of the version the episode started from (or ``from_version``); the steps
        run in order as the same users in the same services, with the stdin the log kept.

        Args:
            environment: ``PROJECT/ENV`` of the episode.
            from_version: Fork this version instead (``PROJECT@vN`` or ``N``).
            name: The replayed fork's name (default ``replay-XXXXXX``).
            env: The values of the env keys the log's steps set (the log keeps only names).

        Returns:
            Each step's outcome, ``diverged``, ``diverged_at`` and the replayed ``fork``.

        Raises:
            InvalidRequestError: The log cannot be replayed (no steps, steps dropped, a stdin
                over 64 KiB, an env value missing); nothing was forked.
            NotFoundError: No such environment or version.
        """
        body: dict[str, Any] = {}
        if from_version is not None:
            body["from"] = version_id(from_version, env_parts(environment)[0])
        if name is not None:
            body["name"] = name
        if env:
            body["env"] = dict(env)
        path = env_path(environment, "/replay")
        # A replay forks and runs every step before it answers.
        resp = await self._send("POST", path, json_body=body, timeout=httpx.Timeout(3600.0))
        return parse_model(ReplayResult, resp.json(), path)

    async def replays(self, environment: EnvRef) -> list[ReplaySummary]:
        """The replays the control plane kept of an episode, newest first.

        Args:
            environment: ``PROJECT/ENV`` of the episode.

        Returns:
            Each replay: its ``fork``, ``version``, ``diverged``, ``diverged_at`` and each
            step's status (no output).

        Raises:
            NotFoundError: No such environment, or the token cannot read it.
        """
        path = env_path(environment, "/replays")
        return parse_list(ReplaySummary, await self._get_json(path), "replays", f"GET {path}")

    # ------------------------------------------------------------------ versions

    async def list_versions(self, project: str | None = None) -> list[Version]:
        """A project's versions.

        Args:
            project: The project (default: the configured project).

        Returns:
            The versions.
        """
        path = f"/v1/projects/{q(self._project(project))}/versions"
        return parse_list(Version, await self._get_json(path), "versions", path)

    async def get_version(self, version: VersionRef) -> Version:
        """One version.

        Args:
            version: ``PROJECT@vN`` (or N of the configured project).

        Returns:
            The version.

        Raises:
            NotFoundError: No such version.
        """
        project, number = version_parts(version, self.project)
        path = f"/v1/versions/{q(project)}/{number}"
        return parse_model(Version, await self._get_json(path), path)

    async def delete_version(self, version: VersionRef) -> None:
        """Deletes a version and its snapshot.

        Args:
            version: ``PROJECT@vN`` (or N of the configured project).

        Raises:
            ConflictError: Environments still run from it.
        """
        project, number = version_parts(version, self.project)
        await self._send("DELETE", f"/v1/versions/{q(project)}/{number}")

    # ------------------------------------------------------------------ sandboxes

    async def list_pools(self) -> list[Pool]:
        """Every project's warm fork pool.

        Returns:
            The pools.
        """
        return parse_list(Pool, await self._get_json("/v1/pools"), "pools", "/v1/pools")

    async def get_pool(self, project: str | None = None) -> Pool:
        """A project's warm fork pool.

        Args:
            project: The project (default: the configured project).

        Returns:
            The pool.
        """
        path = f"/v1/projects/{q(self._project(project))}/pool"
        return parse_model(Pool, await self._get_json(path), path)

    async def set_pool(self, size: int | None, project: str | None = None) -> Pool:
        """Sets how many warm forks a project's pool keeps (admin).

        Args:
            size: 0 to 64; None goes back to the compose file's ``x-denv.pool``.
            project: The project (default: the configured project).

        Returns:
            The pool, which then fills or shrinks to its size.
        """
        path = f"/v1/projects/{q(self._project(project))}/pool"
        resp = await self._send("PUT", path, json_body={"size": size})
        return parse_model(Pool, resp.json(), path)

    # ------------------------------------------------------------------ targets

    async def target_kinds(self) -> list[TargetKind]:
        """Every target kind, with whether this control plane has its driver.

        Each kind comes with its capabilities, settings and credentials
        (docs/reference/targets.md).

        Returns:
            The kinds.
        """
        path = "/v1/targets/kinds"
        return parse_list(TargetKind, await self._get_json(path), "kinds", path)

    async def list_targets(self) -> list[Target]:
        """The targets this token may see (all of them for an admin).

        Returns:
            The targets.
        """
        return parse_list(Target, await self._get_json("/v1/targets"), "targets", "/v1/targets")

    async def get_target(self, name: str) -> Target:
        """A target: its kind's capabilities, settings and credential names (admin).

        Args:
            name: The target.

        Returns:
            The target.
        """
        path = f"/v1/targets/{q(name)}"
        return parse_model(Target, await self._get_json(path), path)

    async def create_target(
        self,
        name: str,
        kind: str,
        *,
        settings: Mapping[str, Any] | None = None,
        credentials: Mapping[str, str] | None = None,
    ) -> Target:
        """Creates a target of a kind this control plane has a driver for (admin).

        Args:
            name: The target's name.
            kind: ``hosts``, ``hetzner``, ... (``target_kinds()`` says which are available).
            settings: The kind's settings (docs/reference/targets.md#settings).
            credentials: Its secrets (API keys), stored encrypted and never returned: the
                target lists only their names.

        Returns:
            The target.
        """
        body = {
            "name": name,
            "kind": kind,
            "settings": dict(settings or {}),
            "credentials": dict(credentials or {}),
        }
        resp = await self._send("POST", "/v1/targets", json_body=body)
        return parse_model(Target, resp.json(), "/v1/targets")

    async def delete_target(self, name: str, *, force: bool = False) -> None:
        """Removes a target that has no hosts and no machines left (admin).

        Args:
            name: The target.
            force: Delete a provisioned target's machines first.
        """
        params = {"force": "true"} if force else None
        await self._send("DELETE", f"/v1/targets/{q(name)}", params=params)

    async def create_sandbox(
        self,
        project: str | None = None,
        *,
        version: VersionRef | None = None,
        name: str | None = None,
        ttl_sec: int = 3600,
        timeout: float | None = 900.0,
    ) -> Environment:
        """Creates a sandbox: a ready fork of a version for one episode, destroyed after a TTL.

        Args:
            project: The project (default: the configured project).
            version: The version (default: the project's current version).
            name: The sandbox's environment name (default: one the control plane picks).
            ttl_sec: Seconds until it is destroyed.
            timeout: Seconds to wait for it to be ready.

        Returns:
            The sandbox (``sandbox`` true, ``expires_at`` set).

        Raises:
            EgressLeakError: Its egress probe found a way out; it does not start.
            DenvError: It could not be created (its code's subclass).
        """
        body = sandbox_body(self._project(project), version, name, ttl_sec)
        resp = await self._send(
            "POST", "/v1/sandboxes", json_body=body, timeout=timeout_for(timeout)
        )
        return parse_model(Environment, resp.json(), "POST /v1/sandboxes")

    async def create_sandboxes(
        self,
        count: int,
        project: str | None = None,
        *,
        version: VersionRef | None = None,
        name: str | None = None,
        ttl_sec: int = 3600,
        timeout: float | None = 900.0,
    ) -> list[Environment]:
        """Creates ``count`` sandboxes of one version in one call, spread over the hosts.

        All or none: when one fails, those already created are destroyed and the error names
        the one that failed. Each answer's ``placement`` (extra field) says where it went and
        why (docs/reference/targets.md#placement).

        Args:
            count: How many (1 to 256).
            project: The project (default: the configured project).
            version: The version (default: the project's current version).
            name: Their names are ``NAME-1`` ... ``NAME-N`` (default: names the control plane
                picks).
            ttl_sec: Seconds until each is destroyed.
            timeout: Seconds to wait for all of them to be ready.

        Returns:
            The sandboxes, in order.

        Raises:
            DenvError: One could not be created (its code's subclass); none is left.
        """
        body = sandbox_body(self._project(project), version, name, ttl_sec, count)
        resp = await self._send(
            "POST", "/v1/sandboxes", json_body=body, timeout=timeout_for(timeout)
        )
        return parse_list(Environment, resp.json(), "sandboxes", "POST /v1/sandboxes")

    async def list_sandboxes(self) -> list[Environment]:
        """The sandboxes the token may see.

        Returns:
            The sandboxes.
        """
        return parse_list(
            Environment, await self._get_json("/v1/sandboxes"), "sandboxes", "GET /v1/sandboxes"
        )

    async def destroy_sandbox(self, sandbox: EnvRef, *, wait: bool = True) -> None:
        """Destroys a sandbox.

        Args:
            sandbox: ``PROJECT/ENV`` of the sandbox.
            wait: Return once its host removed it (the default). False returns as soon as
                the control plane sealed it (no more exec, files or tunnels) and marked it
                ``destroying``; the removal then finishes in the background.

        Raises:
            NotFoundError: No such sandbox.
        """
        project, name = env_parts(sandbox)
        await self._send(
            "DELETE",
            f"/v1/sandboxes/{q(project)}/{q(name)}",
            params={"wait": "true"} if wait else None,
            timeout=timeout_for(300.0),
        )

    # ------------------------------------------------------------------ exec

    async def exec(
        self,
        environment: EnvRef,
        cmd: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        service: str | None = None,
        user: str | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        tty: bool | None = None,
        output_limit: int | None = None,
    ) -> ExecResult:
        """Runs a command in an environment and returns its result.

        Requests larger than 768 KiB (large stdin or argv) go over the streaming route
        (:meth:`exec_stream`); the result is the same.

        Args:
            environment: ``PROJECT/ENV``.
            cmd: argv, e.g. ``["ls", "-l"]``; exactly one of ``cmd`` and ``shell``.
            shell: A command line for ``sh -c``.
            service: Service (default: the agent service).
            user: User (default: the agent user; root is refused on the agent service).
            cwd: Working directory (default: the agent's workdir).
            env: Extra environment variables.
            stdin: Standard input (text is sent as UTF-8).
            timeout: Seconds; on expiry the process tree is killed, ``timed_out`` is set
                and ``exit_code`` is 124.
            tty: Allocate a terminal.
            output_limit: Per-stream cap in bytes (default 10 MiB); ``truncated`` is set
                when a stream went over.

        Returns:
            The result: ``exit_code``, ``stdout`` and ``stderr`` bytes, ``timed_out``,
            ``truncated``, ``duration_ms``. A non-zero exit is a result, not an error.

        Raises:
            AgentRootError: Root was asked for in the agent service (protection 1).
            NotFoundError: No such environment or service.
            InvalidRequestError: Not exactly one of ``cmd`` and ``shell``.
        """
        data = as_bytes(stdin) if stdin is not None else None
        body = exec_request(
            cmd,
            shell=shell,
            service=service,
            user=user,
            cwd=cwd,
            env=env,
            stdin=data,
            timeout=timeout,
            tty=tty,
            output_limit=output_limit,
        )
        if request_size(body) > REST_EXEC_LIMIT:
            return await self.exec_stream(
                environment,
                cmd,
                shell=shell,
                service=service,
                user=user,
                cwd=cwd,
                env=env,
                stdin=data,
                timeout=timeout,
                tty=tty,
                output_limit=output_limit,
            )
        path = env_path(environment, "/exec")
        resp = await self._send("POST", path, json_body=body, timeout=exec_http_timeout(timeout))
        return decode_exec_response(resp.json())

    async def exec_stream(
        self,
        environment: EnvRef,
        cmd: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        service: str | None = None,
        user: str | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: StdinSource | None = None,
        timeout: float | None = None,
        tty: bool | None = None,
        output_limit: int | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> ExecResult:
        """Runs a command over the WebSocket route: stdin streamed in, output streamed out.

        Standard input is closed after ``stdin`` is sent (at once when it is None).

        Args:
            environment: ``PROJECT/ENV``.
            cmd: argv; exactly one of ``cmd`` and ``shell``.
            shell: A command line for ``sh -c``.
            service: Service (default: the agent service).
            user: User (default: the agent user; root is refused on the agent service).
            cwd: Working directory (default: the agent's workdir).
            env: Extra environment variables.
            stdin: Bytes, text, a binary file or an iterable of byte chunks.
            timeout: Seconds; on expiry the process tree is killed and ``timed_out`` is set.
            tty: Allocate a terminal.
            output_limit: Per-stream cap in bytes (default 10 MiB).
            on_stdout: Called with each chunk of standard output as it arrives.
            on_stderr: Called with each chunk of standard error as it arrives.

        Returns:
            The result, with all the output received.

        Raises:
            AgentRootError: Root was asked for in the agent service (protection 1).
            NotFoundError: No such environment or service.
            DenvError: The stream ended with an error.
        """
        body = exec_request(
            cmd,
            shell=shell,
            service=service,
            user=user,
            cwd=cwd,
            env=env,
            timeout=timeout,
            tty=tty,
            output_limit=output_limit,
        )
        path = env_path(environment, "/exec/stream")
        out, err = bytearray(), bytearray()
        result: dict[str, Any] | None = None
        conn = await self._ws(path)
        async with conn:
            sender_failed: list[BaseException] = []

            async def send_stdin() -> None:
                try:
                    async for chunk in _stdin_chunks(stdin):
                        await conn.send(stdin_frame(chunk))
                    await conn.send(STDIN_END)
                except ConnectionClosed:
                    pass
                # unasync: async
                except Exception as exc:
                    # unasync: sync
                    # except BaseException as exc:
                    # unasync: end
                    # Reading stdin failed: end the stream (the command would wait for
                    # stdin for ever) and report the failure instead of the closed stream.
                    sender_failed.append(exc)
                    await conn.close(1011, "stdin failed")

            try:
                await conn.send(json.dumps({"type": "start", "exec": body}))
            except ConnectionClosed as exc:
                raise closed_error(f"GET {path}", *close_info(exc)) from exc
            # unasync: async
            sender = asyncio.create_task(send_stdin())
            # unasync: sync
            # sender = threading.Thread(target=send_stdin, name="denv-exec-stdin", daemon=True)
            # sender.start()
            # unasync: end
            try:
                while result is None:
                    frame = stream_frame(await conn.recv())
                    kind = frame["type"]
                    if kind == "stdout":
                        chunk = frame_data(frame)
                        out += chunk
                        if on_stdout is not None:
                            await _notify(on_stdout, chunk)
                    elif kind == "stderr":
                        chunk = frame_data(frame)
                        err += chunk
                        if on_stderr is not None:
                            await _notify(on_stderr, chunk)
                    elif kind == "exit":
                        res = frame.get("result")
                        if not isinstance(res, dict):
                            raise InternalError("exec stream: 'exit' frame without a result")
                        result = res
                    elif kind == "error":
                        raise frame_error(frame)
            except ConnectionClosed as exc:
                # unasync: sync
                # sender.join(timeout=5)
                # unasync: end
                if sender_failed:
                    raise sender_failed[0] from exc
                raise closed_error(f"GET {path}", *close_info(exc)) from exc
            # unasync: async
            finally:
                if not sender.done():
                    sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sender
            # unasync: end
        # unasync: sync
        # sender.join(timeout=5)
        # if sender_failed:
        #     raise sender_failed[0]
        # unasync: end
        return decode_exec_response(result, stdout=bytes(out), stderr=bytes(err))

    # ------------------------------------------------------------------ files

    async def put_files(
        self,
        environment: EnvRef,
        path: str,
        # unasync: async
        archive: bytes | IO[bytes] | Iterable[bytes] | AsyncIterable[bytes],
        # unasync: sync
        # archive: bytes | IO[bytes] | Iterable[bytes],
        # unasync: end
        *,
        service: str | None = None,
        user: str | None = None,
    ) -> FilesResult:
        """Extracts a tar archive into a folder of a service (created when missing).

        The archive is checked whole before anything is written: device nodes, FIFOs,
        sockets, escaping links, setuid/setgid bits and paths that climb out are refused.

        Args:
            environment: ``PROJECT/ENV``.
            path: Absolute folder in the container.
            archive: The tar archive (optionally gzip): bytes, a binary file, or chunks.
            service: Service (default: the agent service).
            user: User who writes (default: the agent user; root refused on the agent service).

        Returns:
            Entries and bytes written.

        Raises:
            SpecialFileError: The archive holds a special file (protection 3).
            AgentRootError: Root was asked for in the agent service.
            ForbiddenError: The user may not write there.
        """
        content: bytes | AsyncIterable[bytes]
        if isinstance(archive, (bytes, bytearray, memoryview)):
            content = bytes(archive)
        else:
            content = _stdin_chunks(archive)
        route = env_path(environment, "/files")
        resp = await self._send(
            "PUT",
            route,
            params=files_params(path, service, user),
            content=content,
            headers={"Content-Type": "application/x-tar"},
            timeout=timeout_for(None),
        )
        return parse_model(FilesResult, resp.json(), f"PUT {route}")

    async def iter_files(
        self,
        environment: EnvRef,
        path: str,
        *,
        service: str | None = None,
        user: str | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """Downloads a file or folder as a tar archive, in chunks (the path under its base name).

        Close the generator (``aclose``, or ``contextlib.aclosing``) when stopping early.

        Args:
            environment: ``PROJECT/ENV``.
            path: Absolute path in the container.
            service: Service (default: the agent service).
            user: User who reads (default: the agent user).

        Yields:
            Chunks of the tar archive.

        Raises:
            NotFoundError: The path does not exist.
            ForbiddenError: The user may not read it.
        """
        route = env_path(environment, "/files")
        with mapped_transport_errors(self._url, f"GET {route}"):
            async with self._http.stream(
                "GET",
                route,
                params=files_params(path, service, user),
                timeout=timeout_for(None),
            ) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    raise error_from_response(resp)
                async for chunk in resp.aiter_bytes():
                    yield chunk

    async def get_files(
        self,
        environment: EnvRef,
        path: str,
        *,
        service: str | None = None,
        user: str | None = None,
    ) -> bytes:
        """Downloads a file or folder as a tar archive (the path under its base name).

        Args:
            environment: ``PROJECT/ENV``.
            path: Absolute path in the container.
            service: Service (default: the agent service).
            user: User who reads (default: the agent user).

        Returns:
            The tar archive.

        Raises:
            NotFoundError: The path does not exist.
            ForbiddenError: The user may not read it.
        """
        # unasync: async
        parts = bytearray()
        async with contextlib.aclosing(
            self.iter_files(environment, path, service=service, user=user)
        ) as chunks:
            async for chunk in chunks:
                parts += chunk
        return bytes(parts)
        # unasync: sync
        # return b"".join(self.iter_files(environment, path, service=service, user=user))
        # unasync: end

    async def write_file(
        self,
        environment: EnvRef,
        path: str,
        data: bytes | str,
        *,
        mode: int = 0o644,
        service: str | None = None,
        user: str | None = None,
    ) -> None:
        """Writes one file (parent folders created), as the user.

        Args:
            environment: ``PROJECT/ENV``.
            path: Absolute path of the file.
            data: Its content (text is written as UTF-8).
            mode: Its permission bits.
            service: Service (default: the agent service).
            user: User who writes (default: the agent user).

        Raises:
            InvalidRequestError: The path is relative or names a folder.
            ForbiddenError: The user may not write there.
        """
        folder, name = split_file_path(path)
        archive = single_file_tar(name, as_bytes(data), mode)
        await self.put_files(environment, folder, archive, service=service, user=user)

    async def read_file(
        self,
        environment: EnvRef,
        path: str,
        *,
        service: str | None = None,
        user: str | None = None,
    ) -> bytes:
        """Reads one regular file (symlinks are followed), as the user.

        Args:
            environment: ``PROJECT/ENV``.
            path: Absolute path of the file.
            service: Service (default: the agent service).
            user: User who reads (default: the agent user).

        Returns:
            Its content.

        Raises:
            NotFoundError: It does not exist, or is not a regular file.
            InvalidRequestError: It is a folder.
            ForbiddenError: The user may not read it.
        """
        current = path
        for _ in range(16):
            archive = await self.get_files(environment, current, service=service, user=user)
            head = first_entry(archive)
            if head is None or head.kind == "other":
                raise NotFoundError(f"{path}: not a regular file")
            if head.kind == "dir":
                raise InvalidRequestError(f"{path}: is a directory")
            if head.kind == "file":
                return head.data
            target = head.linkname
            current = posixpath.normpath(
                target
                if target.startswith("/")
                else posixpath.join(posixpath.dirname(current), target)
            )
        raise InvalidRequestError(f"{path}: too many levels of symbolic links")

    # ------------------------------------------------------------------ network

    async def connect(self, environment: EnvRef, service: str, port: int) -> AsyncTunnel:
        """Opens a TCP connection to ``service:port`` inside an environment.

        Args:
            environment: ``PROJECT/ENV``.
            service: The service.
            port: The port it listens on.

        Returns:
            The tunnel (``send``, ``recv``, ``close``).

        Raises:
            NotFoundError: No such environment or service.
        """
        path = env_path(environment, "/connect")
        conn = await self._ws(path, {"service": service, "port": str(int(port))})
        return AsyncTunnel(conn, f"{env_id(environment)} {service}:{port}")

    async def port_forward(
        self,
        environment: EnvRef,
        service: str,
        port: int,
        *,
        local_port: int = 0,
        host: str = "127.0.0.1",
    ) -> AsyncPortForward:
        """Listens on a local port and tunnels each connection to ``service:port``.

        Args:
            environment: ``PROJECT/ENV``.
            service: The service.
            port: The port it listens on.
            local_port: Local port (0: any free port; see ``.port``).
            host: Local address to listen on.

        Returns:
            The running forwarder (``.port``, ``.address``, ``close()``).
        """
        ref = env_id(environment)
        # unasync: async

        async def open_tunnel() -> AsyncTunnel:
            return await self.connect(ref, service, port)

        return await AsyncPortForward(open_tunnel).start(host, local_port)
        # unasync: sync
        # return PortForward(lambda: self.connect(ref, service, port), host, local_port)
        # unasync: end

    async def probe(self, environment: EnvRef) -> ProbeResult:
        """Runs the egress probe of an environment (protection 5).

        Args:
            environment: ``PROJECT/ENV``.

        Returns:
            The result (``ok``, ``findings``, and the details the host reports).
        """
        path = env_path(environment, "/probe")
        return parse_model(ProbeResult, await self._get_json(path), path)

    async def logs(
        self, environment: EnvRef, *, service: str | None = None, tail: int | None = None
    ) -> Logs:
        """A service's output.

        Args:
            environment: ``PROJECT/ENV``.
            service: Service (default: the agent service).
            tail: Lines from the end.

        Returns:
            Its stdout and stderr.
        """
        params: dict[str, str] = {}
        if service is not None:
            params["service"] = service
        if tail is not None:
            params["tail"] = str(int(tail))
        path = env_path(environment, "/logs")
        return parse_model(Logs, await self._get_json(path, params), path)


# unasync: async
async def _notify(callback: Callable[[Any], Awaitable[None] | None], value: Any) -> None:
    outcome = callback(value)
    if inspect.isawaitable(outcome):
        await outcome


async def _file_chunks(f: IO[bytes]) -> AsyncGenerator[bytes, None]:
    for chunk in iter_chunks(f):
        yield chunk


async def _stdin_chunks(
    stdin: bytes | str | IO[bytes] | Iterable[bytes] | AsyncIterable[bytes] | None,
) -> AsyncGenerator[bytes, None]:
    if isinstance(stdin, AsyncIterable):
        async for piece in stdin:
            for chunk in iter_stdin(bytes(piece)):
                yield chunk
        return
    for chunk in iter_stdin(stdin):
        yield chunk


# unasync: sync
# def _notify(callback: Callable[[Any], None], value: Any) -> None:
#     callback(value)
#
#
# _file_chunks = iter_chunks
# _stdin_chunks = iter_stdin
# unasync: end
