"""denv.tinker against the fake control plane: the Tinker cookbook's own ``SandboxInterface``
and ``SandboxResult`` (tinker-cookbook 0.6.1, installed without its torch; scripts/setup-python),
driven the way its Harbor recipe drives a sandbox: the factory per group member, the bash tool's
``run_command``, the reward's file writes and reads, ``cleanup``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from tinker_cookbook.sandbox import SandboxInterface, SandboxResult

import denv
from denv.tinker import DenvSandbox, DenvSandboxFactory, DenvVerifyReward
from fakecp import FakeControlPlane, exec_response


@pytest.fixture
def fake() -> FakeControlPlane:
    cp = FakeControlPlane()
    cp.add_project("harbor-hello")
    cp.add_environment("harbor-hello/alpha", cp.add_version("harbor-hello", 1))
    return cp


@pytest_asyncio.fixture
async def client(fake: FakeControlPlane) -> AsyncIterator[denv.AsyncClient]:
    async with denv.AsyncClient("http://cp", "t0k", transport=fake.async_transport()) as c:
        yield c


async def test_a_sandbox_per_group_member_behind_the_cookbooks_interface(
    client: denv.AsyncClient, fake: FakeControlPlane, tmp_path: Path
) -> None:
    # The recipe calls the factory with the task's environment/ folder and the sandbox lifetime.
    factory = DenvSandboxFactory(client=client)
    env_dir = tmp_path / "hello" / "environment"
    group = [await factory(env_dir, 600) for _ in range(2)]
    assert all(isinstance(s, SandboxInterface) for s in group)
    assert [s.sandbox_id.split("/")[0] for s in group] == ["harbor-hello", "harbor-hello"]
    assert group[0].sandbox_id != group[1].sandbox_id
    posted = [json.loads(b) for b in fake.bodies if b and b.startswith(b'{"project"')]
    assert [(p["project"], p["ttl_sec"]) for p in posted] == [("harbor-hello", 600)] * 2

    seen: list[dict[str, Any]] = []

    def on_exec(env: str, req: dict[str, Any]) -> dict[str, Any]:
        seen.append({"env": env, **req})
        return exec_response(3, b"out", b"err")

    fake.on_exec = on_exec
    r = await group[0].run_command("ls /app", workdir="/app", timeout=20, max_output_bytes=1000)
    assert isinstance(r, SandboxResult)
    assert (r.stdout, r.stderr, r.exit_code) == ("out", "err", 3)
    assert seen[-1]["env"] == group[0].sandbox_id
    assert (seen[-1]["shell"], seen[-1]["cwd"], seen[-1]["timeout"]) == ("ls /app", "/app", 20)
    assert seen[-1]["output_limit"] == 1000
    fake.on_exec = None

    # As the recipe's reward uploads /tests and reads /logs/verifier/reward.txt.
    wrote = await group[0].write_file("/tests/test.sh", "exit 0\n", executable=True)
    assert wrote.exit_code == 0
    assert await client.read_file(group[0].sandbox_id, "/tests/test.sh") == b"exit 0\n"
    read = await group[0].read_file("/tests/test.sh", max_bytes=4)
    assert (read.stdout, read.exit_code) == ("exit", 0)
    missing = await group[0].read_file("/logs/verifier/reward.txt")
    assert missing.exit_code == 1 and missing.stderr != ""

    await group[0].send_heartbeat()
    for s in group:
        await s.cleanup()
        await s.cleanup()  # a gone sandbox is fine
    assert [e for e in fake.environments.values() if e["sandbox"]] == []


async def test_the_reward_is_denvs_verifier_on_a_fork(
    client: denv.AsyncClient, fake: FakeControlPlane
) -> None:
    sandbox = await DenvSandboxFactory("harbor-hello", client=client)(Path("/x/environment"), 60)
    # The version the fake's verify names as the graded episode's snapshot.
    fake.add_project("quickstart")
    assert fake.add_version("quickstart", 9) == "quickstart@v9"
    reward = DenvVerifyReward(sandbox)
    assert await reward([]) == (1.0, {"reward": 1.0})
    # The graded episode's version is deleted unless kept.
    assert "quickstart@v9" not in fake.versions
    assert isinstance(sandbox, DenvSandbox)
    await sandbox.cleanup()


def test_a_project_per_task_folder_or_given() -> None:
    assert DenvSandboxFactory().project_for(Path("/tasks/Count Words/environment")) == (
        "harbor-count-words"
    )
    assert DenvSandboxFactory("shop").project_for(Path("/tasks/a/environment")) == "shop"
    named = DenvSandboxFactory(lambda d: f"p-{d.parent.name}")
    assert named.project_for(Path("/tasks/a/environment")) == "p-a"


def test_the_pages_block_makes_the_factory() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "blog" / "trainers.md").read_text()
    tinker = page[page.index("## Tinker") :]
    block = tinker.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(block, scope)
    factory = scope["sandbox_factory"]
    assert isinstance(factory, DenvSandboxFactory)
    assert factory.project_for(Path("/tasks/hello/environment")) == "harbor-hello"
