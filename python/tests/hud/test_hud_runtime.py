"""denv.hud against the fake control plane, with HUD's own runner (hud 0.6.21, not mocked).

``Taskset.run`` places each rollout with ``DenvRuntime``: a sandbox per placement, the
environment built for it and served on loopback, the ``denv`` MCP capability whose ``bash``
runs in the sandbox. A task whose verifier has a runtime of its own is graded on a fork of a
snapshot of the actor's sandbox (HUD's snapshot_session / restore_session).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hud
import pytest
from hud.agents.openai_compatible import OpenAIChatAgent
from hud.agents.types import OpenAIChatConfig
from hud.eval import RuntimeConfig, Task, Taskset
from integration.scripted_model import ScriptedModel
from scripted_agent import FIX, ScriptedAgent, offline_hud

import denv
from denv.hud import (
    DenvEndpoint,
    DenvRuntime,
    DenvSandbox,
    no_version,
    not_a_denv_archive,
    not_a_version,
    read_archive,
    unsupported_config,
)
from fakecp import FakeControlPlane, exec_response

ANSWER = "/workspace/answer.txt"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    offline_hud(monkeypatch)


@pytest.fixture
def fake() -> FakeControlPlane:
    cp = FakeControlPlane()
    cp.add_project("quickstart")
    cp.add_environment("quickstart/alpha", cp.add_version("quickstart", 1))

    def on_exec(env_id: str, req: dict[str, Any]) -> dict[str, Any]:
        # The scripted agent's bash: `echo WORD > FILE` writes the file in that sandbox.
        command = req["cmd"][2] if req.get("cmd", [])[:2] == ["bash", "-c"] else ""
        if command.startswith("echo ") and " > " in command:
            word, path = command[5:].split(" > ")
            cp.put(env_id, path, f"{word}\n".encode())
            return exec_response(0, f"wrote {path} in {env_id}\n".encode())
        return exec_response(127, stderr=b"not scripted\n")

    cp.on_exec = on_exec
    return cp


def client(fake: FakeControlPlane) -> denv.AsyncClient:
    return denv.AsyncClient("http://cp.test", fake.token, transport=fake.async_transport())


def build(sandbox: DenvSandbox) -> hud.Environment:
    env = hud.Environment("quickstart")

    @env.template()
    async def write_answer() -> Any:
        yield f"Write 42 to {ANSWER}."
        yield 0.0  # the actor's own grade is a record; the verifier's is the one that counts

    @env.template()
    async def check_answer() -> Any:
        yield "grade"
        try:
            text = (await sandbox.read_file(ANSWER)).decode()
        except denv.NotFoundError:
            text = ""
        yield {"score": 1.0 if text == "42\n" else 0.0, "info": {"graded_on": sandbox.id}}

    return env


def graded_task(**verifier: Any) -> Task:
    check = Task(env="quickstart", id="check_answer", runtime_config=RuntimeConfig(**verifier))
    return Task(env="quickstart", id="write_answer", verifier=check)


async def test_the_verifier_grades_a_fork_of_the_actors_snapshot(fake: FakeControlPlane) -> None:
    runtime = DenvRuntime(build, project="quickstart", client=client(fake))
    solver = ScriptedAgent(f"echo 42 > {ANSWER}")
    job = await Taskset("t", [graded_task(image="quickstart")]).run(solver, runtime=runtime)
    (run,) = job.runs
    assert run.reward == 1.0, run.trace
    # The bash tool ran in the actor's sandbox, through HUD's client and the MCP capability.
    assert solver.results == [f"exit code: 0\nstdout:\nwrote {ANSWER} in quickstart/fork-0\n"]
    # The verifier graded fork-1, a sandbox of the snapshot (v2) of the actor's fork-0.
    assert run.grade.info == {"graded_on": "quickstart/fork-1"}
    sandboxes = [
        json.loads(body)
        for r, body in zip(fake.requests, fake.bodies, strict=True)
        if r.method == "POST" and r.url.path == "/v1/sandboxes"
    ]
    assert [s.get("version") for s in sandboxes] == [None, "quickstart@v2"]
    snapshots = [r.url.path for r in fake.requests if r.url.path.endswith("/snapshot")]
    assert snapshots == ["/v1/environments/quickstart/fork-0/snapshot"]
    # Nothing is left: both sandboxes destroyed, the snapshot deleted.
    assert sorted(fake.environments) == ["quickstart/alpha"]
    assert sorted(fake.versions) == ["quickstart@v1"]


async def test_a_do_nothing_agent_gets_zero(fake: FakeControlPlane) -> None:
    runtime = DenvRuntime(build, project="quickstart", client=client(fake))
    job = await Taskset("t", [graded_task(image="quickstart")]).run(
        ScriptedAgent(None), runtime=runtime
    )
    (run,) = job.runs
    assert run.reward == 0.0
    assert not run.grade.is_error, run.trace
    assert sorted(fake.environments) == ["quickstart/alpha"]


async def test_rollouts_run_at_once_each_on_its_own_fork(fake: FakeControlPlane) -> None:
    runtime = DenvRuntime(build, project="quickstart", client=client(fake))
    rows = [graded_task(image="quickstart")]
    job = await Taskset("t", rows).run(
        ScriptedAgent(f"echo 42 > {ANSWER}"), runtime=runtime, group=3
    )
    assert [r.reward for r in job.runs] == [1.0, 1.0, 1.0]
    graded = {r.grade.info["graded_on"] for r in job.runs}
    assert len(graded) == 3
    assert sorted(fake.environments) == ["quickstart/alpha"]


async def test_a_verifier_without_a_runtime_of_its_own_grades_beside_the_actor(
    fake: FakeControlPlane,
) -> None:
    # HUD's rule: same env and no runtime_config -> the verifier shares the actor's placement.
    runtime = DenvRuntime(build, project="quickstart", client=client(fake))
    task = Task(
        env="quickstart",
        id="write_answer",
        verifier=Task(env="quickstart", id="check_answer"),
    )
    job = await Taskset("t", [task]).run(ScriptedAgent(f"echo 42 > {ANSWER}"), runtime=runtime)
    (run,) = job.runs
    assert run.reward == 1.0
    assert run.grade.info == {"graded_on": "quickstart/fork-0"}
    assert not [r for r in fake.requests if r.url.path.endswith("/snapshot")]


async def test_restore_into_a_placement_of_another_version_replaces_its_sandbox(
    fake: FakeControlPlane, tmp_path: Path
) -> None:
    # Outside HUD's rollout (no snapshot handed over), a restore forks the archive's version
    # and moves the placement's handle to the fork.
    runtime = DenvRuntime(build, project="quickstart", client=client(fake), keep_snapshots=True)
    row = Task(env="quickstart", id="check_answer")
    async with runtime(row) as actor:
        assert isinstance(actor, DenvEndpoint)
        await actor.sandbox.write_file(ANSWER, "42\n")
        async with actor.snapshot_session("sess-1") as archive:
            assert archive is not None
            assert read_archive(archive) == "quickstart@v2"
            saved = tmp_path / "session.json"
            saved.write_text(archive.read_text())
    assert "quickstart@v2" in fake.versions  # kept
    async with runtime(row) as verifier:
        assert isinstance(verifier, DenvEndpoint)
        first = verifier.sandbox.id
        await verifier.restore_session("sess-1", saved)
        assert verifier.sandbox.id != first
        assert first not in fake.environments
        assert await verifier.sandbox.read_file(ANSWER) == b"42\n"
        # Restoring the same snapshot again is a no-op.
        again = verifier.sandbox.id
        await verifier.restore_session("sess-1", saved)
        assert verifier.sandbox.id == again
    assert sorted(fake.environments) == ["quickstart/alpha"]


async def test_snapshots_are_deleted_unless_kept(fake: FakeControlPlane) -> None:
    runtime = DenvRuntime(build, project="quickstart", client=client(fake))
    async with runtime(Task(env="quickstart", id="check_answer")) as actor:
        assert isinstance(actor, DenvEndpoint)
        async with actor.snapshot_session("sess-1") as archive:
            assert archive is not None
            assert "quickstart@v2" in fake.versions
        assert "quickstart@v2" not in fake.versions
        with pytest.raises(ValueError, match="single path component"):
            async with actor.snapshot_session("../x"):
                pass


def refusal(call: Callable[[], object]) -> str:
    """The message of the ValueError ``call`` raises."""
    try:
        call()
    except ValueError as err:
        return str(err)
    raise AssertionError("not refused")


async def test_refusals(fake: FakeControlPlane, tmp_path: Path) -> None:
    runtime = DenvRuntime(build, client=client(fake))
    bare = Task(env="quickstart", id="write_answer")
    assert refusal(lambda: runtime.resolve(bare)) == no_version(bare.slug)
    docker = bare.model_copy(update={"runtime_config": RuntimeConfig(image="redis:7")})
    assert refusal(lambda: runtime.resolve(docker)) == not_a_version("redis:7")
    sized = bare.model_copy(
        update={"runtime_config": RuntimeConfig.model_validate({"resources": {"cpu": 2}})}
    )
    assert refusal(lambda: runtime.resolve(sized)) == unsupported_config("resources")
    other = tmp_path / "session.tar.gz"
    other.write_bytes(b"\x1f\x8b")
    assert refusal(lambda: read_archive(other)) == not_a_denv_archive(str(other))
    bad = "Not A Project"
    assert refusal(lambda: DenvRuntime(build, project=bad)) == not_a_version(bad)


def test_the_messages() -> None:
    assert not_a_version("x") == (
        "runtime_config.image 'x' is not a denv version: DenvRuntime forks a version of a denv "
        "project, so give PROJECT or PROJECT@vN (deploy the image's compose project with "
        "'denv deploy' first)"
    )
    assert unsupported_config("compose") == (
        "DenvRuntime does not take runtime_config.compose: a denv sandbox runs its version as "
        "deployed (services and limits come from the project's compose file); deploy it with "
        "'denv deploy' and name the version in runtime_config.image"
    )
    assert no_version("t") == (
        "task 't' names no denv version to fork: give DenvRuntime(project=...) or the row's "
        "runtime_config.image (PROJECT or PROJECT@vN)"
    )
    assert not_a_denv_archive("p") == (
        "p is not a denv session snapshot: DenvEndpoint.restore_session restores what a "
        "DenvEndpoint snapshotted (a denv version), not another runtime's archive"
    )


async def test_a_template_can_grade_with_the_projects_denv_verifier(
    fake: FakeControlPlane,
) -> None:
    def graded_by_denv(sandbox: DenvSandbox) -> hud.Environment:
        env = hud.Environment("quickstart")

        @env.template()
        async def task() -> Any:
            yield "Do the task."
            yield (await sandbox.verify()).reward

        return env

    runtime = DenvRuntime(graded_by_denv, project="quickstart", client=client(fake))
    job = await Taskset("t", [Task(env="quickstart", id="task")]).run(
        ScriptedAgent(None), runtime=runtime
    )
    (run,) = job.runs
    assert run.reward == 1.0  # the fake's verifier grades 1.0
    verified = [r.url.path for r in fake.requests if r.url.path.endswith("/verify")]
    assert verified == ["/v1/environments/quickstart/fork-0/verify"]


async def test_huds_own_tool_agent_calls_bash_in_the_sandbox(fake: FakeControlPlane) -> None:
    # HUD's OpenAI-compatible agent (its ToolAgent loop) finds the denv capability's bash among
    # its MCP tools and calls it; the "model" is the scripted one on loopback, which calls bash
    # with the quickstart's fix on its first turn and answers "done" after.
    executed: list[tuple[str, str]] = []

    def on_exec(env_id: str, req: dict[str, Any]) -> dict[str, Any]:
        executed.append((env_id, req["cmd"][2]))
        return exec_response(0, b"fix.sh: patched\n")

    fake.on_exec = on_exec
    runtime = DenvRuntime(build, project="quickstart", client=client(fake))
    with ScriptedModel(["solve"]) as model:
        agent = OpenAIChatAgent(
            OpenAIChatConfig(model="scripted", base_url=model.base_url, api_key="scripted")
        )
        job = await Taskset("t", [graded_task(image="quickstart")]).run(agent, runtime=runtime)
    (run,) = job.runs
    assert not run.grade.is_error, run.trace
    assert executed == [("quickstart/fork-0", FIX)]
    assert model.tool_results == ["exit code: 0\nstdout:\nfix.sh: patched\n"]
    assert [t["function"]["name"] for t in model.requests[0]["tools"]] == ["bash"]
    assert run.trace.content == "done"
