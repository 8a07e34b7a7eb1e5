"""denv.verifiers without a control plane: the taskset, the tool's answers, the env's defaults.

The rollouts themselves (vf-eval, sandboxes, denv's verifier) run against a live control plane
in tests/integration/test_verifiers_live.py.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import verifiers.v1 as vf
from verifiers.v1.utils.loaders import environment_class, taskset_class

from denv import ExecResult, messages
from denv.verifiers import (
    DenvEnv,
    DenvEnvConfig,
    DenvTask,
    DenvTaskset,
    DenvTasksetConfig,
    DenvTools,
    DenvToolsConfig,
    format_result,
    load_environment,
)
from denv.verifiers._tools import NO_SANDBOX

ENV_MODULES = Path(__file__).resolve().parent / "integration" / "vf_env"
BLOG = Path(__file__).resolve().parents[2] / "docs" / "blog" / "verifiers.md"


@pytest.fixture
def taskset_module() -> Iterator[str]:
    """The test's taskset module (denv_quickstart) importable, as vf-eval finds it."""
    sys.path.insert(0, str(ENV_MODULES))
    try:
        yield "denv_quickstart"
    finally:
        sys.path.remove(str(ENV_MODULES))
        sys.modules.pop("denv_quickstart", None)


def test_format_result_gives_the_exit_code_and_the_streams() -> None:
    result = ExecResult(exit_code=2, stdout=b"out\n", stderr=b"err\n")
    assert format_result(result, 100) == "exit code: 2\nstdout:\nout\n\nstderr:\nerr\n"
    assert format_result(ExecResult(exit_code=0), 100) == "exit code: 0"


def test_format_result_says_when_output_was_cut_or_timed_out() -> None:
    result = ExecResult(exit_code=124, stdout=b"x" * 10, timed_out=True)
    expected = "exit code: 124 (timed out)\nstdout:\nxxxx\n[output truncated]"
    assert format_result(result, 4) == expected
    truncated = ExecResult(exit_code=0, stderr=b"abc", truncated=True)
    assert format_result(truncated, 100) == "exit code: 0\nstderr:\nabc\n[output truncated]"
    undecodable = ExecResult(exit_code=0, stdout=b"\xff\xfe")
    assert format_result(undecodable, 100) == "exit code: 0\nstdout:\n\ufffd\ufffd"


async def test_the_bash_tool_refuses_without_a_sandbox() -> None:
    # Outside a rollout the tool server's state is the inert one: no sandbox, no exec.
    tools = DenvTools(DenvToolsConfig())
    assert await tools.bash("id") == NO_SANDBOX
    assert tools.server_name == ""  # advertised bare: the model sees `bash`


def test_the_taskset_needs_a_project_and_a_prompt() -> None:
    with pytest.raises(ValueError, match=r"^the denv taskset needs project and prompt: "):
        DenvTaskset(DenvTasksetConfig(id="x")).load()
    with pytest.raises(ValueError, match=r"needs prompt: --env.taskset.prompt \.\.\.$"):
        DenvTaskset(DenvTasksetConfig(id="x", project="quickstart")).load()


def test_the_taskset_is_one_task_on_the_project() -> None:
    config = DenvTasksetConfig(
        id="x", project="quickstart", version="quickstart@v3", prompt="Fix it.", ttl_sec=60
    )
    [task] = list(DenvTaskset(config))
    assert isinstance(task, DenvTask)
    assert (task.data.project, task.data.version, task.data.ttl_sec) == (
        "quickstart",
        "quickstart@v3",
        60,
    )
    assert task.data.prompt == "Fix it."
    assert [type(t) for t in DenvTask.toolsets(task.config)] == [DenvTools]
    assert [fn.__name__ for fn in task.hooks("reward")] == ["denv_verifier"]


def test_a_module_exporting_both_is_a_denv_environment(taskset_module: str) -> None:
    assert taskset_class(taskset_module) is DenvTaskset
    assert environment_class(taskset_module) is DenvEnv


def test_load_environment_builds_the_env_with_a_host_chat_loop(taskset_module: str) -> None:
    env = load_environment(taskset_module, project="quickstart", prompt="Fix the order totals.")
    assert isinstance(env, DenvEnv)
    assert isinstance(env.taskset, DenvTaskset)
    agent = env.config.agent
    # The null harness executes nothing itself: the model acts only through the sandbox's bash.
    assert agent.harness.id == "null"
    assert isinstance(agent.runtime, vf.SubprocessConfig)
    [task] = list(env.taskset)
    assert task.data.project == "quickstart"


def test_load_environment_refuses_unknown_settings(taskset_module: str) -> None:
    with pytest.raises(ValueError, match=r"^unknown denv taskset setting\(s\): projekt \(known: "):
        load_environment(taskset_module, projekt="quickstart", prompt="x")


def test_the_blogs_load_environment_snippet_runs(taskset_module: str) -> None:
    [block] = [
        b
        for b in re.findall(r"```python\n(.*?)```", BLOG.read_text(), flags=re.S)
        if "load_environment(" in b
    ]
    namespace: dict[str, object] = {}
    exec(compile(block, str(BLOG), "exec"), namespace)
    env = namespace["env"]
    assert isinstance(env, DenvEnv)
    assert env.config.taskset.project == "quickstart"


@pytest.mark.parametrize("harness", ["bash", "mini-swe-agent"])
def test_a_harness_that_runs_commands_on_the_host_is_refused(
    taskset_module: str, harness: str
) -> None:
    # verifiers' bash harness in its subprocess runtime would hand the model a shell on the
    # machine running the rollouts: the env refuses the seat before any rollout.
    config = DenvEnvConfig.model_validate(
        {
            "taskset": {"id": taskset_module, "project": "quickstart", "prompt": "Fix it."},
            "agent": {"harness": {"id": harness}, "runtime": {"type": "subprocess"}},
        }
    )
    with pytest.raises(ValueError, match=r"^refused: harness ") as refused:
        vf.load_environment(config)
    assert str(refused.value) == messages.verifiers_host_shell(harness)


def test_a_harness_in_a_container_runtime_is_accepted(taskset_module: str) -> None:
    config = DenvEnvConfig.model_validate(
        {
            "taskset": {"id": taskset_module, "project": "quickstart", "prompt": "Fix it."},
            "agent": {"harness": {"id": "bash"}, "runtime": {"type": "docker"}},
        }
    )
    assert isinstance(vf.load_environment(config), DenvEnv)
