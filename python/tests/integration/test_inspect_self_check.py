"""Inspect's own sandbox conformance checks (``self_check``) against denv sandboxes.

Two configurations, like Inspect's own runner (``tests/tools/test_sandbox_docker_and_local.py``
in inspect_ai), each a module-scoped fork shared by every check:

- ``denv-nonroot``: the counterpart of Inspect's ``docker-nonroot`` configuration: a project of
  kind ``service`` whose default service runs as a non-root user, root reachable on request.
  Inspect lists no expected failure for ``docker-nonroot``, and there is none here.
- ``denv-agent``: the agent service of an rl-environment (examples/quickstart), commands as the
  non-root agent user. Protection 1 refuses root in the agent service, so the one check that
  needs root there (``test_exec_as_user``) is refused by design; it is a strict xfail, so a
  build that let the agent become root fails this test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
from inspect_ai.util import SandboxEnvironment, SandboxUserUnsupportedError
from inspect_ai.util._sandbox.self_check import *  # noqa: F403

from conftest import QUICKSTART_COMPOSE, Live
from denv.inspect import DenvSandboxConfig, DenvSandboxEnvironment
from denv.messages import agent_root

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

NONROOT_COMPOSE = Path(__file__).parent / "self_check_nonroot" / "compose.yaml"


@dataclass(frozen=True)
class SelfCheckConfig:
    """One sandbox configuration the checks run against.

    Attributes:
        id: The pytest parameter id.
        compose: The compose file deployed.
        project: The denv project (None: the live test project).
        xfails: Check name -> why this configuration cannot pass it.
    """

    id: str
    compose: Path
    project: str | None
    xfails: dict[str, str] = field(default_factory=dict)


CONFIGS = [
    SelfCheckConfig("denv-nonroot", NONROOT_COMPOSE, "inspect-self-check"),
    SelfCheckConfig(
        "denv-agent",
        QUICKSTART_COMPOSE,
        None,
        {
            "test_exec_as_user": (
                "protection 1: the agent is never root; exec(user='root') in the agent service "
                "of an rl-environment raises SandboxUserUnsupportedError"
            ),
        },
    ),
]


@dataclass
class ConfigAndEnvs:
    cfg: SelfCheckConfig
    envs: dict[str, SandboxEnvironment]


@pytest_asyncio.fixture(
    scope="module", loop_scope="module", params=CONFIGS, ids=[c.id for c in CONFIGS]
)
async def denv_environments(
    request: pytest.FixtureRequest, live: Live
) -> AsyncIterator[ConfigAndEnvs]:
    cfg: SelfCheckConfig = request.param
    config = DenvSandboxConfig(
        project=cfg.project or live.project,
        compose=str(cfg.compose),
        url=live.url,
        token=live.token,
    )
    task = f"denv_self_check_{cfg.id}"
    await DenvSandboxEnvironment.task_init(task, config)
    envs = await DenvSandboxEnvironment.sample_init(task, config, {})
    try:
        yield ConfigAndEnvs(cfg, envs)
    finally:
        await DenvSandboxEnvironment.sample_cleanup(task, config, envs, False)
        await DenvSandboxEnvironment.task_cleanup(task, config, True)


@pytest.fixture
def sandbox_env(
    request: pytest.FixtureRequest, denv_environments: ConfigAndEnvs
) -> SandboxEnvironment:
    reason = denv_environments.cfg.xfails.get(request.node.originalname)
    if reason is not None:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    return next(iter(denv_environments.envs.values()))


async def test_default_environment_runs_as_the_non_root_user(
    denv_environments: ConfigAndEnvs,
) -> None:
    envs = denv_environments.envs
    whoami = await next(iter(envs.values())).exec(["id", "-u"])
    assert whoami.stdout.strip() == "1000"
    if denv_environments.cfg.id == "denv-agent":
        assert list(envs) == ["app", "db"]  # the agent service first
    else:
        assert list(envs) == ["default"]


async def test_root_in_the_agent_service_is_refused_with_protection_1(
    denv_environments: ConfigAndEnvs,
) -> None:
    env = next(iter(denv_environments.envs.values()))
    if denv_environments.cfg.id != "denv-agent":
        root = await env.exec(["id", "-u"], user="root")
        assert root.stdout.strip() == "0"  # kind service: protections off, root on request
        return
    with pytest.raises(SandboxUserUnsupportedError) as info:
        await env.exec(["id", "-u"], user="root")
    assert agent_root("app") in str(info.value)
