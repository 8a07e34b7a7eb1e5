"""``DenvTools``: the rollout's ``bash`` tool, an MCP server verifiers starts per rollout.

verifiers runs a task's toolsets as their own processes (``python -m`` this module, in the
tool runtime, ``subprocess`` by default) and hands their tools to the harness over MCP. Before
each call the server pulls the rollout's state (``DenvState.sandbox``, set by
``DenvTask.setup``) from the rollout's state channel, so one server serves exactly its own
rollout's sandbox. Commands run through denv exec with exec's defaults: the agent service, as
the agent user (root is refused there), in the agent's workdir.
"""

from __future__ import annotations

from .._async_client import AsyncClient
from .._errors import DenvError
from .._exec import format_result

try:
    import verifiers.v1 as vf  # type: ignore[import-untyped,unused-ignore]
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("denv.verifiers needs verifiers: pip install -e 'python[verifiers]'") from exc

from ._state import DenvState

#: What the tool answers when it is called before the rollout has a sandbox.
NO_SANDBOX = "error: this rollout has no denv sandbox (its setup did not create one)"


class DenvToolsConfig(vf.ToolsetConfig):  # type: ignore[misc]
    """The ``bash`` tool's settings (``--env.taskset.task.tools.*``).

    Attributes:
        url: The control plane (default: ``DENV_URL``, else ``~/.config/denv/config.json``).
            The token is never part of the config (configs are written into run
            directories): ``DENV_TOKEN`` or the config file, inherited by the tool process.
        timeout: Seconds a command may run before its process tree is killed.
        output_limit: Bytes of stdout and of stderr the model sees per command.
    """

    url: str | None = None
    timeout: float = 120.0
    output_limit: int = 16384


class DenvTools(vf.Toolset[DenvToolsConfig, DenvState]):  # type: ignore[misc]
    """The ``bash`` tool (advertised bare: ``bash``, not ``denv_tools_bash``)."""

    TOOL_PREFIX = None

    @vf.tool  # type: ignore[untyped-decorator]
    async def bash(self, command: str) -> str:
        """Run a bash command in the environment (as the agent user, in its workdir).

        Args:
            command: The command line, run with ``bash -c``.

        Returns:
            The exit code, stdout and stderr.
        """
        state: DenvState = self.state
        if state.sandbox is None:
            return NO_SANDBOX
        config: DenvToolsConfig = self.config
        try:
            async with AsyncClient(config.url) as client:
                result = await client.exec(
                    state.sandbox,
                    ["bash", "-c", command],
                    timeout=config.timeout,
                    output_limit=config.output_limit,
                )
        except DenvError as err:
            return f"error: {err}"
        return format_result(result, config.output_limit)


if __name__ == "__main__":
    DenvTools.run()
