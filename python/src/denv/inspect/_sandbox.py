"""``DenvSandboxEnvironment``: Inspect's sandbox provider ``denv``.

Each sample gets its own sandbox, a fork of the project's version, and one
``SandboxEnvironment`` per compose service (the agent service first: it is the default).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import posixpath
import re
import secrets
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from inspect_ai.log import transcript
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxConnection,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUnavailableError,
    SandboxUserUnsupportedError,
    sandboxenv,
    store,
)
from pydantic import BaseModel
from typing_extensions import override

from .._async_client import AsyncClient
from .._errors import (
    AgentRootError,
    DenvConnectionError,
    DenvError,
    DockerError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
)
from .._exec import ExecResult as DenvExecResult
from .._models import Environment
from .._tar import TarHead, first_entry, starts_with_directory
from ._config import (
    COMPOSE_FILES,
    DOCKERFILE,
    DenvSandboxConfig,
    Settings,
    ensure_version,
    resolve_settings,
    slug,
)
from ._state import RunState, run_startup, run_state

logger = logging.getLogger("denv.inspect")

#: Sandboxes made by this provider are named with this prefix (``cli_cleanup`` finds leaks).
SANDBOX_PREFIX = "inspect-"

#: The key of the sample store (and the ``source`` of the info event) recording the sandbox.
STORE_KEY = "denv"

# Room for tar headers and padding around a file at the read limit.
_ARCHIVE_OVERHEAD = 64 * 1024
_WRITE_TIMEOUT = 600
_OCI_PERMISSION = re.compile(r"oci runtime exec failed.*permission denied", re.IGNORECASE)
_WRITE_SCRIPT = 'd=$(dirname -- "$1") && mkdir -p -- "$d" && cat > "$1"'


@dataclass
class _Running:
    """One sample's sandbox, the client that talks to it, and the run it belongs to."""

    client: AsyncClient
    sandbox: Environment
    settings: Settings
    run: RunState
    workdirs: dict[str, str] = field(default_factory=dict)
    destroyed: bool = False


def _sandbox_name(task_name: str) -> str:
    suffix = secrets.token_hex(4)
    middle = slug(task_name, 40 - len(SANDBOX_PREFIX) - len(suffix) - 1)
    return f"{SANDBOX_PREFIX}{middle}-{suffix}"


@contextlib.contextmanager
def _unavailable(sandbox_id: str) -> Iterator[None]:
    """Maps denv errors of an exec onto Inspect's exceptions."""
    try:
        yield
    except AgentRootError as exc:
        raise SandboxUserUnsupportedError(str(exc)) from exc
    except (DenvConnectionError, NotFoundError, DockerError) as exc:
        raise SandboxUnavailableError(f"denv sandbox {sandbox_id} cannot execute: {exc}") from exc


@sandboxenv(name="denv")
class DenvSandboxEnvironment(SandboxEnvironment):
    """An Inspect sandbox in one service of a denv sandbox (a fork of a project version).

    Select it with ``Task(sandbox="denv")`` (a compose file next to the task),
    ``sandbox=("denv", "path/compose.yaml")`` or
    ``sandbox=SandboxEnvironmentSpec("denv", DenvSandboxConfig(...))``.
    """

    def __init__(self, running: _Running, service: str) -> None:
        super().__init__()
        self._running = running
        self._service = service

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def config_files(cls) -> list[str]:
        """The files Inspect looks for next to a task (compose files, then a Dockerfile).

        Returns:
            The file names.
        """
        return [*COMPOSE_FILES, DOCKERFILE]

    @classmethod
    def default_concurrency(cls) -> int | None:
        """No provider limit: forks are cheap; use ``--max-sandboxes`` to cap them.

        Returns:
            None.
        """
        return None

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        """Rebuilds a :class:`DenvSandboxConfig` from its serialized form (the eval log).

        Args:
            config: The serialized configuration.

        Returns:
            The configuration.
        """
        return DenvSandboxConfig(**config)

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        """Deploys the compose project once, unless its current version has the same source.

        Args:
            task_name: The task.
            config: A compose path, a Dockerfile path, or a :class:`DenvSandboxConfig`.

        Raises:
            ConfigError: The configuration is incomplete.
            DenvError: The deploy failed (e.g. ``InvalidComposeError`` listing refusals).
        """
        run_startup()
        await ensure_version(resolve_settings(config))

    @override
    @classmethod
    async def sample_init(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        metadata: dict[str, str],
    ) -> dict[str, SandboxEnvironment]:
        """Forks one sandbox for the sample and maps each service to an environment.

        The project, version and fork are recorded in the sample's store under ``"denv"``
        and as an info event (source ``"denv"``) in its transcript, so the eval log shows
        what the environment was.

        Args:
            task_name: The task.
            config: The configuration.
            metadata: The sample's metadata (unused).

        Returns:
            Service name -> environment, the agent service first.

        Raises:
            EgressLeakError: The fork's egress probe found a way out (protection 5).
            DenvError: The sandbox could not be created.
        """
        settings = resolve_settings(config)
        version = await ensure_version(settings)
        client = settings.client()
        try:
            sandbox = await client.create_sandbox(
                settings.project,
                version=version,
                name=_sandbox_name(task_name),
                ttl_sec=settings.ttl_sec,
            )
        except BaseException:
            await client.aclose()
            raise
        run = run_state()
        running = _Running(client, sandbox, settings, run)
        run.sandboxes[sandbox.id] = settings
        try:
            names = sandbox.service_names
            if not names:
                names = [sandbox.agent.service] if sandbox.agent is not None else ["default"]
            if sandbox.agent is not None:
                running.workdirs[sandbox.agent.service] = sandbox.agent.workdir
            environments: dict[str, SandboxEnvironment] = {
                name: DenvSandboxEnvironment(running, name) for name in names
            }
            record: dict[str, Any] = {
                "project": settings.project,
                "version": sandbox.parent_version or sandbox.version or version,
                "fork": sandbox.id,
                "host": sandbox.host_id,
                "services": names,
                "agent": sandbox.agent.model_dump() if sandbox.agent is not None else None,
                "expires_at": sandbox.expires_at,
                "control_plane": settings.url,
            }
            store().set(STORE_KEY, record)
            transcript().info(record, source=STORE_KEY)
        except BaseException:
            await _destroy(running)
            raise
        return environments

    @override
    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        """Destroys the sample's sandbox (also when the sample was interrupted).

        Args:
            task_name: The task.
            config: The configuration.
            environments: The sample's environments.
            interrupted: Whether the sample was interrupted.
        """
        for env in environments.values():
            if isinstance(env, DenvSandboxEnvironment):
                await _destroy(env._running)
                return

    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool
    ) -> None:
        """Destroys the sandboxes the run left, or prints them with ``cleanup=False``.

        Every sandbox of the run, whatever ``task_name`` says: at the end of a run Inspect
        calls this once per configuration with ``"shutdown"`` (and ``task_init`` with
        ``"startup"``), while ``sample_init`` gets the task's own name.

        Args:
            task_name: The task.
            config: The configuration.
            cleanup: False under ``--no-sandbox-cleanup``: the sandboxes are left running
                (until their TTL) and their ids are printed.
        """
        run = run_state()
        run.closed = True
        left = dict(run.sandboxes)
        run.sandboxes.clear()
        if not left:
            return
        if not cleanup:
            ids = "\n".join(f"  {sandbox_id}" for sandbox_id in sorted(left))
            print(
                f"denv sandboxes left running (each is destroyed at its TTL):\n{ids}\n"
                "Destroy one with: inspect sandbox cleanup denv PROJECT/ENV"
            )
            return
        for sandbox_id, settings in left.items():
            client = settings.client()
            try:
                await client.destroy_sandbox(sandbox_id)
            except NotFoundError:
                pass
            except DenvError as exc:
                logger.warning("denv: cannot destroy sandbox %s: %s", sandbox_id, exc)
            finally:
                await client.aclose()

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        """``inspect sandbox cleanup denv [ID]``: destroys one sandbox, or every ``inspect-*``.

        The control plane comes from ``DENV_URL``/``DENV_TOKEN`` or the config file.

        Args:
            id: ``PROJECT/ENV`` of one sandbox; None destroys every sandbox this provider
                made (named ``inspect-...``) that the token can see.
        """
        async with AsyncClient() as client:
            if id is not None:
                await client.destroy_sandbox(id)
                print(f"destroyed {id}")
                return
            for sandbox in await client.list_sandboxes():
                if sandbox.name.startswith(SANDBOX_PREFIX):
                    try:
                        await client.destroy_sandbox(sandbox.id)
                        print(f"destroyed {sandbox.id}")
                    except NotFoundError:
                        pass

    # ------------------------------------------------------------------ exec

    @property
    def sandbox_id(self) -> str:
        """``PROJECT/ENV`` of the sample's sandbox."""
        return self._running.sandbox.id

    @property
    def service(self) -> str:
        """The compose service this environment runs in."""
        return self._service

    def _service_arg(self) -> str | None:
        return (
            None
            if self._service == "default" and not self._running.sandbox.services
            else self._service
        )

    async def _workdir(self) -> str:
        known = self._running.workdirs.get(self._service)
        if known is not None:
            return known
        with _unavailable(self.sandbox_id):
            res = await self._running.client.exec(
                self.sandbox_id, ["sh", "-c", "pwd"], service=self._service_arg(), timeout=60
            )
        workdir = res.stdout_text.strip() if res.ok and res.stdout_text.strip() else "/"
        self._running.workdirs[self._service] = workdir
        return workdir

    async def _path(self, file: str) -> str:
        if file.startswith("/"):
            return posixpath.normpath(file)
        return posixpath.normpath(posixpath.join(await self._workdir(), file))

    async def _exec_raw(
        self,
        cmd: list[str],
        *,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> DenvExecResult:
        with _unavailable(self.sandbox_id):
            return await self._running.client.exec(
                self.sandbox_id,
                cmd,
                service=self._service_arg(),
                user=user,
                cwd=cwd,
                env=env,
                stdin=stdin,
                timeout=timeout,
                output_limit=output_limit,
            )

    @override
    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        """Runs a command in this service (denv kills the process tree on timeout).

        Args:
            cmd: argv.
            input: Standard input (text is sent as UTF-8).
            cwd: Working directory; relative paths are resolved against the service's
                working directory (the agent's workdir in the agent service).
            env: Extra environment variables.
            user: User (default: the agent user in the agent service; root is refused
                there).
            timeout: Seconds.
            timeout_retry: Unused: denv does not retry commands.
            concurrency: Unused: commands run on the denv host, not locally.

        Returns:
            The result; a command that exits non-zero, or cannot be found (127), is a
            failed result.

        Raises:
            TimeoutError: The timeout expired (the process tree was killed).
            PermissionError: The program is not executable.
            OutputLimitExceededError: A stream went over the exec output limit.
            SandboxUserUnsupportedError: Root was asked for in the agent service
                (protection 1).
            SandboxUnavailableError: The sandbox or the control plane is gone.
        """
        stdin = input.encode("utf-8") if isinstance(input, str) else input
        run_cwd = None
        if cwd is not None:
            run_cwd = await self._path(cwd)
        res = await self._exec_raw(
            cmd,
            stdin=stdin,
            cwd=run_cwd,
            env=env,
            user=user,
            timeout=timeout,
            output_limit=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE,
        )
        stdout = res.stdout.decode("utf-8", "replace")
        stderr = res.stderr.decode("utf-8", "replace")
        if res.timed_out:
            err = TimeoutError(f"Command timed out after {timeout} seconds")
            if stdout or stderr:
                setattr(err, "truncated_output", stdout + stderr)  # noqa: B010
            raise err
        if res.truncated:
            raise OutputLimitExceededError(
                limit_str=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR,
                truncated_output=stdout,
            )
        if res.exit_code == 126 and _OCI_PERMISSION.search(stdout + stderr):
            raise PermissionError(f"Permission denied executing command: {shlex.join(cmd)}")
        return ExecResult(
            success=res.exit_code == 0,
            returncode=res.exit_code,
            stdout=stdout,
            stderr=stderr,
        )

    # ------------------------------------------------------------------ files

    @override
    async def write_file(self, file: str, contents: str | bytes) -> None:
        """Writes a file as the service's default user (parent folders created).

        Args:
            file: Path; relative paths resolve against the working directory.
            contents: Text (written as UTF-8) or bytes.

        Raises:
            PermissionError: The user may not write there.
            IsADirectoryError: The path is a folder.
            TimeoutError: The write took longer than 10 minutes.
        """
        path = await self._path(file)
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        res = await self._exec_raw(
            ["/bin/sh", "-c", _WRITE_SCRIPT, "sh", path],
            stdin=data,
            timeout=_WRITE_TIMEOUT,
            output_limit=64 * 1024,
        )
        if res.timed_out:
            raise TimeoutError(f"write_file {file} timed out after {_WRITE_TIMEOUT} seconds")
        if res.exit_code != 0:
            err = res.stderr_text.lower()
            if "permission denied" in err:
                raise PermissionError(errno.EACCES, "Permission denied", file)
            if "is a directory" in err:
                raise IsADirectoryError(errno.EISDIR, "Is a directory", file)
            raise RuntimeError(f"denv write_file {file} failed: {res.stderr_text.strip()}")

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    @override
    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        """Reads a file as the service's default user (symlinks followed).

        Args:
            file: Path; relative paths resolve against the working directory.
            text: Decode as UTF-8 (newlines are kept as they are).

        Returns:
            The content.

        Raises:
            FileNotFoundError: The file does not exist (the message names it).
            PermissionError: The user may not read it.
            IsADirectoryError: It is a folder.
            UnicodeDecodeError: ``text`` and the content is not UTF-8.
            OutputLimitExceededError: It is larger than the read limit (100 MiB).
        """
        if posixpath.basename(file.rstrip("/")) in (".", ".."):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", file)
        path = await self._path(file)
        data = await self._read(file, path, hops=0)
        return data.decode("utf-8") if text else data

    async def _read(self, file: str, path: str, hops: int) -> bytes:
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        archive = bytearray()
        try:
            async with contextlib.aclosing(
                self._running.client.iter_files(self.sandbox_id, path, service=self._service_arg())
            ) as chunks:
                async for chunk in chunks:
                    archive += chunk
                    if len(archive) > limit + _ARCHIVE_OVERHEAD:
                        if starts_with_directory(bytes(archive[:_ARCHIVE_OVERHEAD])):
                            raise IsADirectoryError(errno.EISDIR, "Is a directory", file)
                        raise _read_limit_error()
        except AgentRootError as exc:
            raise SandboxUserUnsupportedError(str(exc)) from exc
        except (ForbiddenError, InvalidRequestError, DockerError, NotFoundError) as exc:
            if not isinstance(exc, NotFoundError) and await self._is_directory(path):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", file) from exc
            if isinstance(exc, NotFoundError):
                if "environment" in exc.message and self.sandbox_id in exc.message:
                    raise SandboxUnavailableError(str(exc)) from exc
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", file) from exc
            if isinstance(exc, ForbiddenError):
                raise PermissionError(errno.EACCES, "Permission denied", file) from exc
            raise
        except DenvConnectionError as exc:
            raise SandboxUnavailableError(str(exc)) from exc
        head: TarHead | None = first_entry(bytes(archive))
        if head is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", file)
        if head.kind == "dir":
            raise IsADirectoryError(errno.EISDIR, "Is a directory", file)
        if head.kind == "symlink" and hops < 16:
            target = head.linkname
            resolved = (
                target
                if target.startswith("/")
                else posixpath.join(posixpath.dirname(path), target)
            )
            return await self._read(file, posixpath.normpath(resolved), hops + 1)
        if head.kind != "file":
            raise OSError(errno.EINVAL, "Not a regular file", file)
        if head.size > limit:
            raise _read_limit_error()
        return head.data

    async def _is_directory(self, path: str) -> bool:
        try:
            res = await self._exec_raw(["test", "-d", path], timeout=60)
        except (DenvError, SandboxUnavailableError, SandboxUserUnsupportedError):
            return False
        return res.exit_code == 0

    # ------------------------------------------------------------------ connection

    @override
    async def connection(self, *, user: str | None = None) -> SandboxConnection:
        """How to open a shell in this service with the denv CLI.

        Args:
            user: User to log in as.

        Returns:
            The ``denv exec`` command line (type ``denv``).

        Raises:
            ConnectionError: The sandbox was destroyed.
        """
        if self._running.destroyed:
            raise ConnectionError(f"denv sandbox {self.sandbox_id} was destroyed")
        argv = ["denv", "exec", self.sandbox_id, "--service", self._service]
        if user is not None:
            argv += ["--user", user]
        argv += ["--", "bash", "-l"]
        return SandboxConnection(type="denv", command=shlex.join(argv), container=self.sandbox_id)


def _read_limit_error() -> OutputLimitExceededError:
    return OutputLimitExceededError(
        limit_str=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, truncated_output=None
    )


async def _destroy(running: _Running) -> None:
    if running.destroyed:
        return
    running.destroyed = True
    try:
        await running.client.destroy_sandbox(running.sandbox.id)
    except NotFoundError:
        pass
    except DenvError as exc:
        logger.warning("denv: cannot destroy sandbox %s: %s", running.sandbox.id, exc)
    finally:
        running.run.sandboxes.pop(running.sandbox.id, None)
        await running.client.aclose()
