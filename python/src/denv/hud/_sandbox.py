"""``DenvSandbox``: the denv sandbox one HUD rollout (or its verifier) acts on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .._async_client import AsyncClient
from .._exec import ExecResult
from .._models import Environment, VerifyResult


class DenvSandbox:
    """A handle on the sandbox of one placement, what an environment's templates and tools use.

    :class:`~denv.hud.DenvRuntime` makes one per placement and hands it to the environment's
    constructor. The handle stays the same object for the placement's life; what it points at
    can change: when HUD restores a session into a placement that was not forked from that
    session's snapshot, the placement's sandbox is replaced by a fork of the snapshot and the
    handle follows it (:attr:`environment` is then the new one).

    Args:
        client: The denv client (owned by the runtime, not by the handle).
        environment: The sandbox.

    Attributes:
        client: The denv client, for calls the handle does not wrap.
    """

    def __init__(self, client: AsyncClient, environment: Environment) -> None:
        self.client = client
        self._environment = environment
        # The session snapshot (PROJECT@vN) the sandbox is a fork of, when HUD restored one.
        self._snapshot: str | None = None

    def __repr__(self) -> str:
        return f"DenvSandbox({self.id}, version={self.version!r})"

    @property
    def environment(self) -> Environment:
        """The sandbox as denv describes it (``PROJECT/ENV``, services, agent, ...)."""
        return self._environment

    @property
    def id(self) -> str:
        """``PROJECT/ENV`` of the sandbox."""
        return self._environment.id

    @property
    def project(self) -> str:
        """The denv project."""
        return self._environment.project

    @property
    def version(self) -> str | None:
        """The version the sandbox was forked from (``PROJECT@vN``)."""
        return self._environment.parent_version or self._environment.version

    def _replace(self, environment: Environment, *, snapshot: str | None) -> None:
        self._environment = environment
        self._snapshot = snapshot

    async def exec(
        self,
        cmd: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        service: str | None = None,
        user: str | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> ExecResult:
        """Runs a command in the sandbox (denv exec; the agent service and user by default).

        Args:
            cmd: argv; exactly one of ``cmd`` and ``shell``.
            shell: A command line for ``sh -c``.
            service: Service (default: the agent service).
            user: User (default: the agent user; root is refused on the agent service).
            cwd: Working directory (default: the agent's workdir).
            env: Extra environment variables.
            stdin: Standard input.
            timeout: Seconds before the process tree is killed (``exit_code`` 124).
            output_limit: Per-stream cap in bytes.

        Returns:
            The result; a non-zero exit is a result, not an error.

        Raises:
            DenvError: denv refused or failed the exec (e.g. ``AgentRootError``).
        """
        return await self.client.exec(
            self.id,
            cmd,
            shell=shell,
            service=service,
            user=user,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout=timeout,
            output_limit=output_limit,
        )

    async def read_file(
        self, path: str, *, service: str | None = None, user: str | None = None
    ) -> bytes:
        """Reads one file of the sandbox.

        Args:
            path: Absolute path.
            service: Service (default: the agent service).
            user: User who reads (default: the agent user).

        Returns:
            Its content.

        Raises:
            NotFoundError: It does not exist or is not a regular file.
            DenvError: denv refused the read (e.g. ``ForbiddenError``).
        """
        return await self.client.read_file(self.id, path, service=service, user=user)

    async def write_file(
        self,
        path: str,
        data: bytes | str,
        *,
        mode: int = 0o644,
        service: str | None = None,
        user: str | None = None,
    ) -> None:
        """Writes one file of the sandbox (parent folders created).

        Args:
            path: Absolute path.
            data: Its content (text is written as UTF-8).
            mode: Its permission bits.
            service: Service (default: the agent service).
            user: User who writes (default: the agent user).

        Raises:
            DenvError: denv refused the write (e.g. ``ForbiddenError``).
        """
        await self.client.write_file(self.id, path, data, mode=mode, service=service, user=user)

    async def verify(self) -> VerifyResult:
        """Grades the sandbox with the project's own denv verifier.

        denv stops the agent, snapshots the sandbox, forks the snapshot and runs the
        project's verifier there as another principal (the answer key never enters the
        agent's services). The snapshot it graded is named in ``version`` of the result.

        Returns:
            The verifier's result (``status``, ``reward``, ...).

        Raises:
            AgentSurvivedError: Agent processes survived the kill.
            VerifierFailedError: The verifier could not grade.
            DenvError: The verification failed otherwise.
        """
        return await self.client.verify(self.id)
