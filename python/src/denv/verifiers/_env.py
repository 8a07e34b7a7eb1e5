"""``DenvEnv``: the single-agent env of a denv taskset, owner of its sandboxes' lifetime."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .._async_client import AsyncClient
from .._errors import DenvError, NotFoundError
from ..messages import verifiers_host_shell

try:
    import verifiers.v1 as vf  # type: ignore[import-untyped,unused-ignore]
    from verifiers.v1.harnesses import NullHarnessConfig  # type: ignore[import-untyped,unused-ignore]
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("denv.verifiers needs verifiers: pip install -e 'python[verifiers]'") from exc

from ._task import DenvTasksetConfig, episode_sandboxes

logger = logging.getLogger("denv")


def default_agent() -> Any:
    """The agent seat's defaults: verifiers' ``null`` chat loop, on the host.

    The model gets only the task's tools (``bash`` runs in the sandbox): the ``null`` harness
    executes nothing itself, so the ``subprocess`` runtime it runs in (a chat program on this
    machine, no container needed) hands the model no local execution.
    """
    return vf.AgentConfig(harness=NullHarnessConfig(id="null"), runtime=vf.SubprocessConfig())


class DenvEnvConfig(vf.SingleAgentEnvConfig):  # type: ignore[misc]
    """``DenvEnv``'s config (``--env.*``): the one ``agent`` seat, ``null`` on the host."""

    agent: vf.AgentConfig = default_agent()


class DenvEnv(vf.Env[DenvEnvConfig]):  # type: ignore[misc]
    """One agent plays the denv task; the sandboxes its rollouts created are destroyed after.

    verifiers runs a task's ``finalize`` and rewards only after a rollout that did not fail, so
    the destruction lives here: every sandbox ``DenvTask.setup`` created during the episode is
    destroyed when the episode ends, whether it was graded, failed or cancelled. (Paired with
    another env, a denv taskset's sandboxes are destroyed by their TTL instead.)

    Args:
        config: The env's config.

    Raises:
        ValueError: The agent's harness executes the model's commands itself and its runtime
            is verifiers' ``subprocess`` one (they would run on this machine, not in the
            sandbox); the message is ``denv.messages.verifiers_host_shell``.
    """

    def __init__(self, config: DenvEnvConfig) -> None:
        super().__init__(config)
        for name, harness in self._harnesses.items():
            runtime = self._agent_specs[name].runtime
            if harness.EXECUTES_CODE and isinstance(runtime, vf.SubprocessConfig):
                raise ValueError(verifiers_host_shell(harness.config.id))

    async def run(self, task: Any, agents: Any) -> None:
        """Runs the agent on ``task``, then destroys the episode's sandboxes.

        Args:
            task: The task.
            agents: The episode's agents (``agents.agent`` plays).
        """
        created: list[str] = []
        token = episode_sandboxes.set(created)
        try:
            await agents.agent.run(task)
        finally:
            episode_sandboxes.reset(token)
            if created:
                # Shielded: a cancelled episode still frees its sandboxes.
                await asyncio.shield(destroy_sandboxes(created, self._url()))

    def _url(self) -> str | None:
        config: DenvTasksetConfig = self.config.taskset
        url: str | None = config.task.url
        return url


async def destroy_sandboxes(sandboxes: list[str], url: str | None) -> None:
    """Destroys ``sandboxes``; one that is already gone is not an error, others are logged."""
    async with AsyncClient(url) as client:
        results = await asyncio.gather(
            *(client.destroy_sandbox(sandbox) for sandbox in sandboxes), return_exceptions=True
        )
    for sandbox, result in zip(sandboxes, results, strict=True):
        if isinstance(result, NotFoundError):
            continue
        if isinstance(result, BaseException):
            level = logging.WARNING if isinstance(result, DenvError) else logging.ERROR
            logger.log(level, "denv: could not destroy sandbox %s: %s", sandbox, result)


def load_environment(taskset: str, **kwargs: Any) -> Any:
    """A ``DenvEnv`` over a denv taskset, built in Python.

    verifiers loads a taskset by the id of the module that exports it, so ``taskset`` names a
    module whose ``__all__`` lists :class:`DenvEnv` and :class:`DenvTaskset`.

    Args:
        taskset: The taskset's module (id), e.g. ``my_env``.
        **kwargs: ``DenvTasksetConfig`` fields (``project``, ``prompt``, ``version``,
            ``ttl_sec``, ``task``).

    Returns:
        The environment (``verifiers.v1.Env``).

    Raises:
        ValueError: A keyword is not a field of the taskset's config.
    """
    unknown = sorted(set(kwargs) - set(DenvTasksetConfig.model_fields))
    if unknown:
        raise ValueError(
            f"unknown denv taskset setting(s): {', '.join(unknown)} "
            f"(known: {', '.join(sorted(DenvTasksetConfig.model_fields))})"
        )
    config = DenvEnvConfig(taskset=DenvTasksetConfig(id=taskset, **kwargs))
    return vf.load_environment(config)
