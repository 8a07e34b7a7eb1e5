# Generated from _async_client.py by python/scripts/unasync.py: edit that file, then run
# the script (python/tests/test_unasync.py checks that this file is its output).
"""The blocking client of the denv control plane (REST, SSE and WebSocket routes)."""

from __future__ import annotations

import json
import os
import posixpath
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import IO, Any

import httpx
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import ClientConnection, connect

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
from ._tunnel import PortForward, Tunnel

EventCallback = Callable[[DeploymentEvent], None]
OutputCallback = Callable[[bytes], None]
StdinSource = bytes | str | IO[bytes] | Iterable[bytes]


class Client(ClientBase):
    """A blocking client of the denv control plane.

    Configuration comes from ``~/.config/denv/config.json`` (``url``, ``token``,
    ``project``), overridden by ``DENV_URL``, ``DENV_TOKEN``, ``DENV_PROJECT``, overridden
    by the arguments. Environments are named ``PROJECT/ENV`` (``PROJECT`` alone means
    ``PROJECT/alpha``); versions ``PROJECT@vN``.

    Use it as a context manager, or call :meth:`close`.

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
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, project, config_path)
        self._timeout = timeout
        self._http = httpx.Client(
            base_url=self._url,
            headers=self._headers(),
            timeout=timeout_for(timeout),
            transport=transport,
        )

    def close(self) -> None:
        """Closes the HTTP connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ plumbing

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        content: bytes | Iterable[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        what = f"{method} {path}"
        with mapped_transport_errors(self._url, what):
            resp = self._http.request(
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

    def _get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return (self._send("GET", path, params=params)).json()

    def _ws(self, path: str, params: Mapping[str, str] | None = None) -> ClientConnection:
        try:
            conn = connect(
                ws_url(self._url, path, params),
                additional_headers=self._headers(),
                max_size=WS_MAX_SIZE,
                open_timeout=self._timeout,
                close_timeout=5,
            )
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            raise self._ws_error(path, exc) from exc
        # websockets >= 17.1 wants connections entered as context managers; a tunnel
        # outlives this call, so it is entered here and closed by its owner.
        return conn.__enter__()

    def _long(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        wait: bool,
        on_event: EventCallback | None,
        check: bool = True,
    ) -> Deployment:
        resp = self._send(method, path, json_body=json_body)
        dep = parse_model(Deployment, resp.json(), path)
        if wait and not dep.finished:
            dep = self.wait_deployment(dep.id, on_event=on_event, check=False)
        if check:
            dep.raise_for_status()
        return dep

    # ------------------------------------------------------------------ service

    def health(self) -> bool:
        """Whether the control plane answers ``GET /healthz``.

        Returns:
            True when it answered ``{"ok": true}``.

        Raises:
            DenvConnectionError: The control plane could not be reached.
        """
        data = self._get_json("/healthz")
        return bool(isinstance(data, dict) and data.get("ok"))

    def whoami(self) -> dict[str, Any]:
        """Who the token is.

        Returns:
            ``{"id", "name", "role", "project"?}``.

        Raises:
            UnauthorizedError: The token is missing or unknown.
        """
        data = self._get_json("/v1/whoami")
        return dict(data) if isinstance(data, dict) else {}

    # ------------------------------------------------------------------ projects

    def list_projects(self) -> list[Project]:
        """The projects the token may see.

        Returns:
            The projects (only its own for a project-scoped token).
        """
        return parse_list(Project, self._get_json("/v1/projects"), "projects", "GET /v1/projects")

    def get_project(self, name: str | None = None) -> Project:
        """One project.

        Args:
            name: The project (default: the configured project).

        Returns:
            The project.

        Raises:
            NotFoundError: No such project.
        """
        path = f"/v1/projects/{q(self._project(name))}"
        return parse_model(Project, self._get_json(path), path)

    def create_project(
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
            (self._send("POST", "/v1/projects", json_body=body)).json(),
            "POST /v1/projects",
        )

    def connect_github(
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
        resp = self._send("POST", route, json_body=body)
        return parse_model(GithubConnection, resp.json(), f"POST {route}")

    def delete_project(self, name: str | None = None) -> None:
        """Deletes a project (admin token).

        Args:
            name: The project (default: the configured project).

        Raises:
            ConflictError: It still has environments.
        """
        self._send("DELETE", f"/v1/projects/{q(self._project(name))}")

    # ------------------------------------------------------------------ deployments

    def deploy(
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
            resp = self._send("POST", route, params=params, json_body={"git_ref": git_ref})
        else:
            assert path is not None
            digest = source_hash(path, extra_files)
            archive = source_archive(path, extra_files)
            with archive:
                resp = self._send(
                    "POST",
                    route,
                    params=params,
                    content=_file_chunks(archive),
                    headers={"Content-Type": "application/x-tar", SOURCE_HASH_HEADER: digest},
                    timeout=timeout_for(None),
                )
        dep = parse_model(Deployment, resp.json(), route)
        if wait and not dep.finished:
            dep = self.wait_deployment(dep.id, on_event=on_event, check=False)
        dep.raise_for_status()
        return dep

    def list_deployments(self, project: str | None = None) -> list[Deployment]:
        """A project's deployments, newest first.

        Args:
            project: The project (default: the configured project).

        Returns:
            The deployments.
        """
        path = f"/v1/projects/{q(self._project(project))}/deployments"
        return parse_list(Deployment, self._get_json(path), "deployments", path)

    def get_deployment(self, deployment_id: str) -> Deployment:
        """One deployment.

        Args:
            deployment_id: Its id.

        Returns:
            The deployment.

        Raises:
            NotFoundError: No such deployment.
        """
        path = f"/v1/deployments/{q(deployment_id)}"
        return parse_model(Deployment, self._get_json(path), path)

    def deployment_events(
        self, deployment_id: str, *, timeout: float | None = None
    ) -> Iterator[DeploymentEvent]:
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
        with (
            mapped_transport_errors(self._url, f"GET {path}"),
            self._http.stream(
                "GET", path, headers={"Accept": "text/event-stream"}, timeout=timeout_for(timeout)
            ) as resp,
        ):
            if resp.status_code >= 400:
                resp.read()
                raise error_from_response(resp)
            decoder = SSEDecoder()
            for line in resp.iter_lines():
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

    def wait_deployment(
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
                for event in self.deployment_events(dep_id, timeout=remaining):
                    if on_event is not None:
                        _notify(on_event, event)
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
                final = self.get_deployment(dep_id)
            if final.finished:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise DenvTimeoutError(f"deployment {dep_id} did not finish within {timeout} s")
            time.sleep(min(0.5 * (attempt + 1), 5.0))
        if check:
            final.raise_for_status()
        return final

    # ------------------------------------------------------------------ environments

    def list_environments(self, project: str | None = None) -> list[Environment]:
        """A project's environments.

        Args:
            project: The project (default: the configured project).

        Returns:
            The environments.
        """
        path = f"/v1/projects/{q(self._project(project))}/environments"
        return parse_list(Environment, self._get_json(path), "environments", path)

    def get_environment(self, environment: EnvRef) -> Environment:
        """One environment.

        Args:
            environment: ``PROJECT/ENV``.

        Returns:
            The environment.

        Raises:
            NotFoundError: No such environment.
        """
        path = env_path(environment)
        return parse_model(Environment, self._get_json(path), path)

    def fork(
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
        dep = self._long(
            "POST", env_path(environment, "/fork"), json_body=body, wait=True, on_event=on_event
        )
        if isinstance(dep.result, dict) and "id" in dep.result:
            return parse_model(Environment, dep.result, "fork result")
        if dep.environment and dep.environment != env_id(environment):
            return self.get_environment(dep.environment)
        raise InternalError(f"fork deployment {dep.id} finished without naming its environment")

    def snapshot(self, environment: EnvRef, *, on_event: EventCallback | None = None) -> Version:
        """Snapshots an environment (all services frozen at one point) into a new version.

        Args:
            environment: ``PROJECT/ENV``.
            on_event: Called with each deployment event.

        Returns:
            The new version.

        Raises:
            DenvError: The snapshot failed (its code's subclass).
        """
        dep = self._long("POST", env_path(environment, "/snapshot"), wait=True, on_event=on_event)
        if isinstance(dep.result, dict):
            return parse_model(Version, dep.result, "snapshot result")
        if isinstance(dep.result, str):
            return self.get_version(dep.result)
        raise InternalError(f"snapshot deployment {dep.id} finished without a version")

    def rollback(
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
        return self._long(
            "POST", env_path(environment, "/rollback"), json_body=body, wait=wait, on_event=on_event
        )

    def stop(
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
        return self._long("POST", env_path(environment, "/stop"), wait=wait, on_event=on_event)

    def start(
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
        return self._long("POST", env_path(environment, "/start"), wait=wait, on_event=on_event)

    def destroy(
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
        return self._long("DELETE", env_path(environment), wait=wait, on_event=on_event)

    def verify(self, environment: EnvRef, *, on_event: EventCallback | None = None) -> VerifyResult:
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
        dep = self._long("POST", env_path(environment, "/verify"), wait=True, on_event=on_event)
        return parse_model(VerifyResult, dep.result, "verify result")

    # ------------------------------------------------------------------ episodes

    def episode_log(
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
        return parse_model(EpisodeLog, self._get_json(path, params or None), path)

    def replay(
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
        resp = self._send("POST", path, json_body=body, timeout=httpx.Timeout(3600.0))
        return parse_model(ReplayResult, resp.json(), path)

    def replays(self, environment: EnvRef) -> list[ReplaySummary]:
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
        return parse_list(ReplaySummary, self._get_json(path), "replays", f"GET {path}")

    # ------------------------------------------------------------------ versions

    def list_versions(self, project: str | None = None) -> list[Version]:
        """A project's versions.

        Args:
            project: The project (default: the configured project).

        Returns:
            The versions.
        """
        path = f"/v1/projects/{q(self._project(project))}/versions"
        return parse_list(Version, self._get_json(path), "versions", path)

    def get_version(self, version: VersionRef) -> Version:
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
        return parse_model(Version, self._get_json(path), path)

    def delete_version(self, version: VersionRef) -> None:
        """Deletes a version and its snapshot.

        Args:
            version: ``PROJECT@vN`` (or N of the configured project).

        Raises:
            ConflictError: Environments still run from it.
        """
        project, number = version_parts(version, self.project)
        self._send("DELETE", f"/v1/versions/{q(project)}/{number}")

    # ------------------------------------------------------------------ sandboxes

    def list_pools(self) -> list[Pool]:
        """Every project's warm fork pool.

        Returns:
            The pools.
        """
        return parse_list(Pool, self._get_json("/v1/pools"), "pools", "/v1/pools")

    def get_pool(self, project: str | None = None) -> Pool:
        """A project's warm fork pool.

        Args:
            project: The project (default: the configured project).

        Returns:
            The pool.
        """
        path = f"/v1/projects/{q(self._project(project))}/pool"
        return parse_model(Pool, self._get_json(path), path)

    def set_pool(self, size: int | None, project: str | None = None) -> Pool:
        """Sets how many warm forks a project's pool keeps (admin).

        Args:
            size: 0 to 64; None goes back to the compose file's ``x-denv.pool``.
            project: The project (default: the configured project).

        Returns:
            The pool, which then fills or shrinks to its size.
        """
        path = f"/v1/projects/{q(self._project(project))}/pool"
        resp = self._send("PUT", path, json_body={"size": size})
        return parse_model(Pool, resp.json(), path)

    # ------------------------------------------------------------------ targets

    def target_kinds(self) -> list[TargetKind]:
        """Every target kind, with whether this control plane has its driver.

        Each kind comes with its capabilities, settings and credentials
        (docs/reference/targets.md).

        Returns:
            The kinds.
        """
        path = "/v1/targets/kinds"
        return parse_list(TargetKind, self._get_json(path), "kinds", path)

    def list_targets(self) -> list[Target]:
        """The targets this token may see (all of them for an admin).

        Returns:
            The targets.
        """
        return parse_list(Target, self._get_json("/v1/targets"), "targets", "/v1/targets")

    def get_target(self, name: str) -> Target:
        """A target: its kind's capabilities, settings and credential names (admin).

        Args:
            name: The target.

        Returns:
            The target.
        """
        path = f"/v1/targets/{q(name)}"
        return parse_model(Target, self._get_json(path), path)

    def create_target(
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
        resp = self._send("POST", "/v1/targets", json_body=body)
        return parse_model(Target, resp.json(), "/v1/targets")

    def delete_target(self, name: str, *, force: bool = False) -> None:
        """Removes a target that has no hosts and no machines left (admin).

        Args:
            name: The target.
            force: Delete a provisioned target's machines first.
        """
        params = {"force": "true"} if force else None
        self._send("DELETE", f"/v1/targets/{q(name)}", params=params)

    def create_sandbox(
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
        resp = self._send("POST", "/v1/sandboxes", json_body=body, timeout=timeout_for(timeout))
        return parse_model(Environment, resp.json(), "POST /v1/sandboxes")

    def create_sandboxes(
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
        resp = self._send("POST", "/v1/sandboxes", json_body=body, timeout=timeout_for(timeout))
        return parse_list(Environment, resp.json(), "sandboxes", "POST /v1/sandboxes")

    def list_sandboxes(self) -> list[Environment]:
        """The sandboxes the token may see.

        Returns:
            The sandboxes.
        """
        return parse_list(
            Environment, self._get_json("/v1/sandboxes"), "sandboxes", "GET /v1/sandboxes"
        )

    def destroy_sandbox(self, sandbox: EnvRef, *, wait: bool = True) -> None:
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
        self._send(
            "DELETE",
            f"/v1/sandboxes/{q(project)}/{q(name)}",
            params={"wait": "true"} if wait else None,
            timeout=timeout_for(300.0),
        )

    # ------------------------------------------------------------------ exec

    def exec(
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
            return self.exec_stream(
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
        resp = self._send("POST", path, json_body=body, timeout=exec_http_timeout(timeout))
        return decode_exec_response(resp.json())

    def exec_stream(
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
        conn = self._ws(path)
        with conn:
            sender_failed: list[BaseException] = []

            def send_stdin() -> None:
                try:
                    for chunk in _stdin_chunks(stdin):
                        conn.send(stdin_frame(chunk))
                    conn.send(STDIN_END)
                except ConnectionClosed:
                    pass
                except BaseException as exc:
                    # Reading stdin failed: end the stream (the command would wait for
                    # stdin for ever) and report the failure instead of the closed stream.
                    sender_failed.append(exc)
                    conn.close(1011, "stdin failed")

            try:
                conn.send(json.dumps({"type": "start", "exec": body}))
            except ConnectionClosed as exc:
                raise closed_error(f"GET {path}", *close_info(exc)) from exc
            sender = threading.Thread(target=send_stdin, name="denv-exec-stdin", daemon=True)
            sender.start()
            try:
                while result is None:
                    frame = stream_frame(conn.recv())
                    kind = frame["type"]
                    if kind == "stdout":
                        chunk = frame_data(frame)
                        out += chunk
                        if on_stdout is not None:
                            _notify(on_stdout, chunk)
                    elif kind == "stderr":
                        chunk = frame_data(frame)
                        err += chunk
                        if on_stderr is not None:
                            _notify(on_stderr, chunk)
                    elif kind == "exit":
                        res = frame.get("result")
                        if not isinstance(res, dict):
                            raise InternalError("exec stream: 'exit' frame without a result")
                        result = res
                    elif kind == "error":
                        raise frame_error(frame)
            except ConnectionClosed as exc:
                sender.join(timeout=5)
                if sender_failed:
                    raise sender_failed[0] from exc
                raise closed_error(f"GET {path}", *close_info(exc)) from exc
        sender.join(timeout=5)
        if sender_failed:
            raise sender_failed[0]
        return decode_exec_response(result, stdout=bytes(out), stderr=bytes(err))

    # ------------------------------------------------------------------ files

    def put_files(
        self,
        environment: EnvRef,
        path: str,
        archive: bytes | IO[bytes] | Iterable[bytes],
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
        content: bytes | Iterable[bytes]
        if isinstance(archive, (bytes, bytearray, memoryview)):
            content = bytes(archive)
        else:
            content = _stdin_chunks(archive)
        route = env_path(environment, "/files")
        resp = self._send(
            "PUT",
            route,
            params=files_params(path, service, user),
            content=content,
            headers={"Content-Type": "application/x-tar"},
            timeout=timeout_for(None),
        )
        return parse_model(FilesResult, resp.json(), f"PUT {route}")

    def iter_files(
        self,
        environment: EnvRef,
        path: str,
        *,
        service: str | None = None,
        user: str | None = None,
    ) -> Iterator[bytes]:
        """Downloads a file or folder as a tar archive, in chunks (the path under its base name).

        Close the iterator (or read it to the end) to release the connection.

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
        with (
            mapped_transport_errors(self._url, f"GET {route}"),
            self._http.stream(
                "GET",
                route,
                params=files_params(path, service, user),
                timeout=timeout_for(None),
            ) as resp,
        ):
            if resp.status_code >= 400:
                resp.read()
                raise error_from_response(resp)
            yield from resp.iter_bytes()

    def get_files(
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
        return b"".join(self.iter_files(environment, path, service=service, user=user))

    def write_file(
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
        self.put_files(environment, folder, archive, service=service, user=user)

    def read_file(
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
            archive = self.get_files(environment, current, service=service, user=user)
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

    def connect(self, environment: EnvRef, service: str, port: int) -> Tunnel:
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
        conn = self._ws(path, {"service": service, "port": str(int(port))})
        return Tunnel(conn, f"{env_id(environment)} {service}:{port}")

    def port_forward(
        self,
        environment: EnvRef,
        service: str,
        port: int,
        *,
        local_port: int = 0,
        host: str = "127.0.0.1",
    ) -> PortForward:
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
        return PortForward(lambda: self.connect(ref, service, port), host, local_port)

    def probe(self, environment: EnvRef) -> ProbeResult:
        """Runs the egress probe of an environment (protection 5).

        Args:
            environment: ``PROJECT/ENV``.

        Returns:
            The result (``ok``, ``findings``, and the details the host reports).
        """
        path = env_path(environment, "/probe")
        return parse_model(ProbeResult, self._get_json(path), path)

    def logs(
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
        return parse_model(Logs, self._get_json(path, params), path)


def _notify(callback: Callable[[Any], None], value: Any) -> None:
    callback(value)


_file_chunks = iter_chunks
_stdin_chunks = iter_stdin
