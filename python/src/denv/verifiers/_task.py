"""``DenvTaskset`` and ``DenvTask``: a denv project as a verifiers taskset."""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

from .._async_client import AsyncClient
from .._errors import DenvError, NotFoundError

try:
    import verifiers.v1 as vf  # type: ignore[import-untyped,unused-ignore]
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("denv.verifiers needs verifiers: pip install -e 'python[verifiers]'") from exc

from ._state import DenvState
from ._tools import DenvTools, DenvToolsConfig

logger = logging.getLogger("denv")

# The sandboxes the current episode created: DenvEnv.run sets a fresh list and destroys what it
# holds when the episode ends (a task's own hooks do not run after a failed rollout).
episode_sandboxes: ContextVar[list[str] | None] = ContextVar("denv_episode_sandboxes", default=None)


class DenvTaskData(vf.TaskData):  # type: ignore[misc]
    """One task: a denv project (and version) and the prompt.

    Attributes:
        project: The denv project whose version each rollout forks.
        version: ``PROJECT@vN`` (default: the version the project's ``alpha`` runs).
        ttl_sec: The sandbox's TTL: denv destroys it then, whatever happened to the rollout.
    """

    project: str
    version: str | None = None
    ttl_sec: int = 3600


class DenvTaskConfig(vf.TaskConfig):  # type: ignore[misc]
    """Settings of every task (``--env.taskset.task.*``).

    Attributes:
        url: The control plane (default: ``DENV_URL``, else ``~/.config/denv/config.json``);
            the token comes from ``DENV_TOKEN`` or the config file, never from this config.
        keep_episodes: Keep the snapshot each verification records (``PROJECT@vN``, also
            named in ``trace.state.episode``); it is deleted after grading otherwise.
        tools: The ``bash`` tool's settings.
    """

    url: str | None = None
    keep_episodes: bool = False
    tools: DenvToolsConfig = DenvToolsConfig()


class DenvTask(vf.Task[DenvTaskData, DenvState, DenvTaskConfig]):  # type: ignore[misc]
    """A rollout on a denv sandbox: created in ``setup``, graded by denv's verifier.

    The sandbox is a fork of the task's version (a claim from the project's warm pool when it
    has one), ready, probed for egress. Its name is recorded in ``trace.state.sandbox``.
    """

    async def setup(self, trace: Any, runtime: Any) -> None:
        """Creates the rollout's sandbox.

        Args:
            trace: The rollout's trace (its ``state`` receives the sandbox).
            runtime: The harness's runtime (unused: commands go to the sandbox).

        Raises:
            DenvError: The sandbox could not be created (e.g. ``EgressLeakError``, or a fork
                whose services were not healthy in time); the rollout fails with it.
        """
        data: DenvTaskData = self.data
        config: DenvTaskConfig = self.config
        try:
            async with AsyncClient(config.url) as client:
                sandbox = await client.create_sandbox(
                    data.project, version=data.version, ttl_sec=data.ttl_sec
                )
        except TimeoutError as err:
            # verifiers reports any TimeoutError of a setup hook as "task setup timed out":
            # keep denv's reason (e.g. a service that was not healthy in time).
            raise DenvError(f"denv could not make a sandbox of {data.project}: {err}") from err
        created = episode_sandboxes.get()
        if created is not None:
            created.append(sandbox.id)
        state: DenvState = trace.state
        state.sandbox = sandbox.id
        state.version = sandbox.version
        logger.info("denv sandbox %s (%s) for rollout %s", sandbox.id, sandbox.version, trace.id)

    @classmethod
    def toolsets(cls, config: DenvTaskConfig) -> list[Any]:
        """The rollout's tools: ``bash`` in its sandbox."""
        return [DenvTools(config.tools)]

    @vf.reward  # type: ignore[untyped-decorator]
    async def denv_verifier(self, trace: Any) -> float:
        """The reward denv's verifier gives the episode (0.0 when it refused the submission).

        Args:
            trace: The rollout's trace.

        Returns:
            The verifier's reward.

        Raises:
            ValueError: The rollout has no sandbox, or the verifier could not grade (status
                ``failed``): no reward is guessed.
            DenvError: The verification failed (e.g. ``AgentSurvivedError``).
        """
        state: DenvState = trace.state
        if state.sandbox is None:
            raise ValueError("this rollout has no denv sandbox to verify")
        config: DenvTaskConfig = self.config
        async with AsyncClient(config.url) as client:
            result = await client.verify(state.sandbox)
            state.episode = result.version or None
            if result.version and not config.keep_episodes:
                try:
                    await client.delete_version(result.version)
                except NotFoundError:
                    pass
                except DenvError as err:
                    logger.warning("denv: could not delete %s: %s", result.version, err)
        if result.status == "failed":
            raise ValueError(
                f"denv's verifier could not grade {state.sandbox}: {result.message or result.log}"
            )
        return float(result.reward)


class DenvTasksetConfig(vf.TasksetConfig):  # type: ignore[misc]
    """The taskset (``--env.taskset.*``).

    Attributes:
        project: The denv project (required).
        version: ``PROJECT@vN`` (default: the version the project's ``alpha`` runs).
        prompt: What the model is asked to do.
        ttl_sec: Each sandbox's TTL.
        task: Settings of every task.
    """

    project: str = ""
    version: str | None = None
    prompt: str = ""
    ttl_sec: int = 3600
    task: DenvTaskConfig = DenvTaskConfig()


class DenvTaskset(vf.Taskset[DenvTask, DenvTasksetConfig]):  # type: ignore[misc]
    """One task: the project's environment and the prompt (``-r N`` rollouts of it)."""

    def load(self) -> list[DenvTask]:
        """The taskset's one task.

        Returns:
            ``[DenvTask]``.

        Raises:
            ValueError: ``project`` or ``prompt`` is missing.
        """
        config: DenvTasksetConfig = self.config
        missing = [name for name in ("project", "prompt") if not getattr(config, name)]
        if missing:
            raise ValueError(
                f"the denv taskset needs {' and '.join(missing)}: "
                + " ".join(f"--env.taskset.{name} ..." for name in missing)
            )
        data = DenvTaskData(
            idx=0,
            name=config.project,
            prompt=config.prompt,
            project=config.project,
            version=config.version,
            ttl_sec=config.ttl_sec,
        )
        return [DenvTask(data, config.task)]
