"""``DenvSandboxFactory``, ``DenvSandbox`` and ``DenvVerifyReward`` for the Tinker cookbook."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._async_client import AsyncClient
from .._errors import DenvError, NotFoundError, VerifierFailedError

try:
    from tinker_cookbook.sandbox import SandboxResult  # type: ignore[import-untyped,unused-ignore]
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "denv.tinker needs the Tinker cookbook's sandbox interface: pip install tinker-cookbook"
    ) from exc

# What the cookbook's own sandboxes cap a stream at when the caller gives no limit (128 KB).
DEFAULT_OUTPUT_BYTES = 128 * 1024


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


class DenvSandbox:
    """A denv sandbox behind the cookbook's ``SandboxInterface``.

    Commands run through denv exec in the agent service as the agent user (root is refused
    there, unless the project's agent is sandboxed); files go through denv's files API, whose
    checks (special files, paths that climb out) apply.

    Attributes:
        environment: ``PROJECT/NAME`` of the sandbox.
    """

    def __init__(self, client: AsyncClient, environment: str) -> None:
        self._client = client
        self.environment = environment

    @property
    def sandbox_id(self) -> str:
        """The sandbox's ``PROJECT/NAME``."""
        return self.environment

    async def send_heartbeat(self, timeout: int = 30) -> None:
        """Does nothing: a denv sandbox lives until its TTL or ``cleanup``."""

    async def run_command(
        self,
        command: str,
        workdir: str | None = None,
        timeout: int = 60,
        max_output_bytes: int | None = None,
    ) -> Any:
        """Runs ``command`` with ``sh -c`` (in the agent's workdir unless ``workdir`` is given).

        Returns:
            A ``SandboxResult``; a timed out command has exit code 124, as denv says.
        """
        r = await self._client.exec(
            self.environment,
            shell=command,
            cwd=workdir,
            timeout=timeout,
            output_limit=max_output_bytes or DEFAULT_OUTPUT_BYTES,
        )
        return SandboxResult(stdout=_text(r.stdout), stderr=_text(r.stderr), exit_code=r.exit_code)

    async def read_file(self, path: str, max_bytes: int | None = None, timeout: int = 60) -> Any:
        """Reads ``path`` (its first ``max_bytes``); a missing file is exit code 1, as ``cat``."""
        try:
            data = await self._client.read_file(self.environment, path)
        except DenvError as exc:
            return SandboxResult(stdout="", stderr=str(exc), exit_code=1)
        return SandboxResult(
            stdout=_text(data[:max_bytes] if max_bytes else data), stderr="", exit_code=0
        )

    async def write_file(
        self, path: str, content: str | bytes, executable: bool = False, timeout: int = 60
    ) -> Any:
        """Writes ``path`` as the agent user (its folder is made first), mode 0755 if executable."""
        parent = str(Path(path).parent)
        made = await self.run_command(f"mkdir -p {shlex.quote(parent)}", timeout=timeout)
        if made.exit_code != 0:
            return made
        try:
            await self._client.write_file(
                self.environment, path, content, mode=0o755 if executable else 0o644
            )
        except DenvError as exc:
            return SandboxResult(stdout="", stderr=str(exc), exit_code=1)
        return SandboxResult(stdout="", stderr="", exit_code=0)

    async def cleanup(self) -> None:
        """Destroys the sandbox (a gone one is fine)."""
        with contextlib.suppress(NotFoundError):
            await self._client.destroy_sandbox(self.environment)


class DenvSandboxFactory:
    """The recipe's ``sandbox_factory``: each call forks the task's denv version.

    Args:
        project: The denv project of every task, or a function of the task's ``environment/``
            folder that names it (default: the folder's task name, as ``denv import harbor``
            names the project it writes).
        client: The client (default: ``DENV_URL`` / ``DENV_TOKEN`` or the config file).
    """

    def __init__(
        self,
        project: str | Callable[[Path], str] | None = None,
        client: AsyncClient | None = None,
    ) -> None:
        self._project = project
        self._client = client
        self.sandboxes: list[DenvSandbox] = []

    def project_for(self, env_dir: Path) -> str:
        """The denv project of the task whose ``environment/`` folder is ``env_dir``."""
        if callable(self._project):
            return self._project(env_dir)
        if self._project is not None:
            return self._project
        from ..harbor._task import project_name

        return project_name(Path(env_dir).parent.name)

    async def __call__(self, env_dir: Path, timeout: int) -> DenvSandbox:
        """A new sandbox of the task's project, destroyed by denv after ``timeout`` seconds."""
        if self._client is None:
            self._client = AsyncClient()
        env = await self._client.create_sandbox(self.project_for(Path(env_dir)), ttl_sec=timeout)
        sandbox = DenvSandbox(self._client, env.id)
        self.sandboxes.append(sandbox)
        return sandbox


class DenvVerifyReward:
    """A ``reward_fn`` for the recipe: denv's verifier grades the episode on a fork.

    The agent's processes are stopped, the episode is snapshotted, and the verifier runs in its
    own container with the tests only it sees; the task's tests never run in the agent's
    sandbox. A submission denv refuses (special files) is worth 0.0.

    Args:
        sandbox: The group member's sandbox.
        keep_episodes: Keep the version each verification records (deleted otherwise).
    """

    def __init__(self, sandbox: DenvSandbox, keep_episodes: bool = False) -> None:
        self.sandbox = sandbox
        self.keep_episodes = keep_episodes

    async def __call__(self, history: list[Any]) -> tuple[float, dict[str, float]]:
        """Grades the sandbox's episode; ``history`` (the conversation) is not read.

        Raises:
            VerifierFailedError: The verifier could not grade (no reward is guessed).
        """
        client = self.sandbox._client
        result = await client.verify(self.sandbox.environment)
        if result.version and not self.keep_episodes:
            with contextlib.suppress(NotFoundError):
                await client.delete_version(result.version)
        if result.status == "failed":
            raise VerifierFailedError(
                f"denv's verifier could not grade {self.sandbox.environment}: "
                f"{result.message or result.log}"
            )
        return float(result.reward), {"reward": float(result.reward)}
