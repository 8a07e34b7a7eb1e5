"""HUD's own runner on a live denv: the quickstart of docs/blog/hud.md, graded on forks.

``Taskset.run`` (hud 0.6.21) runs ``FIX_TOTALS`` twice at once on ``DenvRuntime`` with HUD's own
OpenAI-compatible tool agent, each against a scripted model on loopback
(tests/integration/scripted_model.py): one calls the ``denv`` MCP capability's ``bash`` with the
quickstart's fix, the other answers without doing anything. Each rollout forks the version into
a sandbox; HUD snapshots the actor's session (a denv snapshot), closes the actor, places the
verifier on a fork of the snapshot and grades there: 1.0 for the fix, 0.0 for nothing. Every
sandbox is destroyed and every snapshot deleted. Run from the repository root, by
tests/integration/test_hud_live.py, which deploys the quickstart first (``DENV_TEST_HUD_VERSION``).
"""

from __future__ import annotations

import asyncio
import os

import pytest
from hud.agents.openai_compatible import OpenAIChatAgent
from hud.agents.types import OpenAIChatConfig
from hud.eval import RuntimeConfig, Taskset
from integration.scripted_model import ScriptedModel
from scripted_agent import offline_hud

from conftest import Live
from denv import Client
from denv.hud import DenvRuntime

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    offline_hud(monkeypatch)


async def test_hud_grades_the_quickstart_on_a_fork_of_each_rollout(live: Live) -> None:
    from quickstart_env import FIX_TOTALS, quickstart  # reads the answer key from the cwd

    version = os.environ.get("DENV_TEST_HUD_VERSION")
    task = FIX_TOTALS
    if live.project != "quickstart":
        assert task.verifier is not None
        verifier = task.verifier.model_copy(
            update={"runtime_config": RuntimeConfig(image=live.project)}
        )
        task = task.model_copy(update={"verifier": verifier})
    runtime = DenvRuntime(
        quickstart, project=live.project, version=version, url=live.url, token=live.token
    )
    with Client(live.url, live.token) as client:
        before = {d.id for d in client.list_deployments(live.project)}
        versions_before = {v.id for v in client.list_versions(live.project)}

    taskset = Taskset("quickstart", [task])
    with ScriptedModel(["solve"]) as solving, ScriptedModel(["idle"]) as idle:
        solver, nothing = (
            OpenAIChatAgent(
                OpenAIChatConfig(model="scripted", base_url=model.base_url, api_key="scripted")
            )
            for model in (solving, idle)
        )
        solved, left_alone = await asyncio.gather(
            taskset.run(solver, runtime=runtime), taskset.run(nothing, runtime=runtime)
        )
    (good,), (bad,) = solved.runs, left_alone.runs
    assert good.reward == 1.0, (good.grade, good.trace)
    assert bad.reward == 0.0, (bad.grade, bad.trace)
    assert not good.grade.is_error and not bad.grade.is_error
    assert good.grade.info["wrong"] == []
    assert len(bad.grade.info["wrong"]) > 0
    # The model's bash call ran the fix in the actor's sandbox as the agent user, through HUD's
    # tool agent and MCP client; the idle model was offered the same bash and did not call it.
    (answer,) = solving.tool_results
    assert answer.startswith("exit code: 0\n"), answer
    assert "(uid 1000)" in answer
    assert idle.tool_results == []
    assert [t["function"]["name"] for t in idle.requests[0]["tools"]] == ["bash"]

    with Client(live.url, live.token) as client:
        new = [d for d in client.list_deployments(live.project) if d.id not in before]
        left = [s.id for s in client.list_sandboxes() if s.id.startswith(f"{live.project}/")]
        versions_after = {v.id for v in client.list_versions(live.project)}
    snapshots = [d for d in new if d.kind == "snapshot"]
    assert len(snapshots) == 2, [(d.kind, d.environment) for d in new]
    # The verifiers graded other sandboxes than the ones the agents acted in.
    actors = {d.environment for d in snapshots}
    assert {good.grade.info["fork"], bad.grade.info["fork"]}.isdisjoint(actors)
    assert left == []
    assert versions_after == versions_before
