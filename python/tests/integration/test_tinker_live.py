"""denv.tinker live (docs/blog/trainers.md, Tinker): the Tinker cookbook's Harbor recipe's way of
using sandboxes, on a live control plane and denvd: a group of two sandboxes from
``DenvSandboxFactory`` (forks of the quickstart's version), the quickstart's fix sent through the
cookbook's ``run_command`` in one, both graded by ``DenvVerifyReward`` (denv's verifier on a fork:
1.0 and 0.0), both cleaned up.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tinker_cookbook.sandbox import SandboxInterface

from conftest import QUICKSTART_COMPOSE, REPO, Live
from denv import AsyncClient, Client
from denv.inspect import DenvSandboxConfig
from denv.inspect._config import ensure_version, resolve_settings
from denv.tinker import DenvSandboxFactory, DenvVerifyReward

pytestmark = pytest.mark.integration

FIX = (REPO / "examples" / "quickstart" / "agent" / "fix.sh").read_text()


def test_a_group_of_denv_sandboxes_graded_by_denvs_verifier(live: Live) -> None:
    config = DenvSandboxConfig(
        project=live.project, compose=str(QUICKSTART_COMPOSE), url=live.url, token=live.token
    )
    asyncio.run(ensure_version(resolve_settings(config)))

    async def episode() -> tuple[list[str], str, list[float]]:
        async with AsyncClient(live.url, live.token) as client:
            factory = DenvSandboxFactory(live.project, client=client)
            group = [await factory(Path("/tasks/quickstart/environment"), 600) for _ in range(2)]
            try:
                assert all(isinstance(s, SandboxInterface) for s in group)
                # As the recipe's bash tool: one command line, its workdir, a timeout.
                fixed = await group[0].run_command(f"bash -s <<'FIX'\n{FIX}\nFIX\n", timeout=120)
                assert fixed.exit_code == 0, fixed.stderr
                rewards = [(await DenvVerifyReward(s)([]))[0] for s in group]
                return [s.sandbox_id for s in group], fixed.stdout, rewards
            finally:
                for s in group:
                    await s.cleanup()

    ids, out, rewards = asyncio.run(episode())
    assert "fix.sh: patched /workspace/app/orders.py as" in out
    assert "(uid 1000)" in out
    assert rewards == [1.0, 0.0]
    with Client(live.url, live.token) as client:
        left = {s.id for s in client.list_sandboxes()}
    assert not left & set(ids)
