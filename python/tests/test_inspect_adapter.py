"""The Inspect provider against the in-memory control plane."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from inspect_ai.event import InfoEvent
from inspect_ai.log import transcript
from inspect_ai.util import (
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentSpec,
    SandboxUnavailableError,
    SandboxUserUnsupportedError,
    store,
)
from inspect_ai.util._sandbox.limits import override_max_read_file_size

import denv
from denv.inspect import DenvSandboxConfig, DenvSandboxEnvironment
from denv.inspect import _config as config_module
from denv.inspect import _sandbox as sandbox_module
from denv.inspect import _state as state_module
from denv.inspect._config import resolve_settings
from fakecp import FakeControlPlane, Node, error, exec_response

COMPOSE = """\
name: Shop
services:
  db: {image: redis}
  app: {image: python, user: "1000"}
x-denv:
  kind: rl-environment
  agent: {service: app}
"""


@pytest.fixture
def fake(isolated_config: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeControlPlane]:
    fake = FakeControlPlane()
    monkeypatch.setenv("DENV_URL", "http://cp:7070")
    monkeypatch.setenv("DENV_TOKEN", fake.token)

    def factory(settings: config_module.Settings) -> denv.AsyncClient:
        return denv.AsyncClient(
            settings.url, settings.token, settings.project, transport=fake.transport()
        )

    monkeypatch.setattr(config_module, "_client_factory", factory)
    # No run state from an earlier (sync) test in the context the async tests copy.
    token = state_module._ownerless.set(None)
    yield fake
    state_module._ownerless.reset(token)


@pytest.fixture
def compose(tmp_path: Path) -> str:
    folder = tmp_path / "env"
    folder.mkdir()
    (folder / "compose.yaml").write_text(COMPOSE)
    return str(folder / "compose.yaml")


def deploys(fake: FakeControlPlane) -> int:
    return sum(1 for r in fake.requests if r.url.path.endswith("/deploy"))


async def end_run() -> None:
    # What Inspect calls at the end of a run; the next task_init starts a new one.
    await DenvSandboxEnvironment.task_cleanup("shutdown", None, cleanup=True)


# ---------------------------------------------------------------------------- registration


def test_registered_through_the_entry_point() -> None:
    from inspect_ai._util.entrypoints import ensure_entry_points
    from inspect_ai.util._sandbox.registry import registry_find_sandboxenv

    ensure_entry_points()
    assert registry_find_sandboxenv("denv") is DenvSandboxEnvironment
    assert DenvSandboxEnvironment.config_files()[0] == "compose.yaml"
    assert DenvSandboxEnvironment.is_docker_compatible()


def test_config_round_trips_without_the_token() -> None:
    cfg = DenvSandboxConfig(project="shop", compose="compose.yaml", token="s3cret", version="3")
    dumped = cfg.model_dump()
    assert "token" not in dumped
    assert "s3cret" not in repr(cfg)
    again = DenvSandboxEnvironment.config_deserialize(dumped)
    assert again == DenvSandboxConfig(project="shop", compose="compose.yaml", version="3")
    hash(cfg)  # Inspect keys task_init by the configuration
    spec = SandboxEnvironmentSpec("denv", cfg)
    assert "s3cret" not in spec.model_dump_json()
    with pytest.raises(ValueError, match="unknown"):
        DenvSandboxConfig(compose="x", unknown=1)  # type: ignore[call-arg]


def test_settings_from_a_compose_path(fake: FakeControlPlane, compose: str) -> None:
    s = resolve_settings(compose)
    assert (s.url, s.token, s.project, s.kind) == (
        "http://cp:7070",
        "t0k",
        "shop",
        "rl-environment",
    )
    assert s.folder == Path(compose).parent
    assert s.compose_name == "compose.yaml"


def test_settings_project_precedence(
    fake: FakeControlPlane, compose: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DENV_PROJECT", "from-env")
    assert resolve_settings(compose).project == "from-env"
    assert resolve_settings(DenvSandboxConfig(project="given", compose=compose)).project == "given"


def test_settings_from_a_dockerfile(fake: FakeControlPlane, tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM debian\n")
    s = resolve_settings(str(tmp_path / "Dockerfile"))
    generated = dict(s.extra_files)["compose.yaml"].decode()
    assert "dockerfile: Dockerfile" in generated
    assert s.compose_name == "compose.yaml"


def test_settings_from_a_compose_config(fake: FakeControlPlane) -> None:
    from inspect_ai.util import ComposeConfig

    cfg = ComposeConfig.model_validate({"services": {"default": {"image": "python:3.12"}}})
    s = resolve_settings(cfg)
    assert b"python:3.12" in dict(s.extra_files)["compose.yaml"]


def test_a_compose_configs_folder_is_removed_when_the_process_exits() -> None:
    # The generated compose file deploys from an empty folder of the process's own; none is left.
    script = (
        "from denv.inspect._config import _empty_folder\n"
        "p = _empty_folder('t')\n"
        "assert p.is_dir() and _empty_folder('t') == p\n"
        "print(p)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    folder = Path(run.stdout.strip())
    assert folder.name.startswith("denv-inspect-")
    assert not folder.exists()


def test_settings_need_a_compose_file(fake: FakeControlPlane) -> None:
    with pytest.raises(denv.ConfigError, match="needs a compose file"):
        resolve_settings(None)
    with pytest.raises(denv.ConfigError, match="does not exist"):
        resolve_settings("/nowhere/compose.yaml")


# ---------------------------------------------------------------------------- deploy once


async def test_task_init_creates_the_project_and_deploys_once(
    fake: FakeControlPlane, compose: str
) -> None:
    await DenvSandboxEnvironment.task_init("t", compose)
    assert fake.projects["shop"]["kind"] == "rl-environment"
    assert deploys(fake) == 1
    await DenvSandboxEnvironment.task_init("t", compose)
    assert deploys(fake) == 1  # kept for the run

    await end_run()  # a new run: the deploy's evidence decides
    await DenvSandboxEnvironment.task_init("t", compose)
    assert deploys(fake) == 1

    await anyio.Path(compose).write_text(COMPOSE + "# changed\n")
    await end_run()
    await DenvSandboxEnvironment.task_init("t", compose)
    assert deploys(fake) == 2


async def test_local_cache_when_the_control_plane_records_no_hash(
    fake: FakeControlPlane, compose: str
) -> None:
    await DenvSandboxEnvironment.task_init("t", compose)
    for dep in fake.deployments:
        dep["phases"][0]["evidence"] = None
    await end_run()
    await DenvSandboxEnvironment.task_init("t", compose)
    assert deploys(fake) == 1


async def test_a_rollback_after_the_deploy_means_redeploy(
    fake: FakeControlPlane, compose: str
) -> None:
    await DenvSandboxEnvironment.task_init("t", compose)
    fake.deployment("rollback", "shop/alpha")
    for dep in fake.deployments:
        dep["phases"][0]["evidence"] = None
    fake.environments["shop/alpha"]["version"] = "shop@v0"
    fake.add_version("shop", 0)
    await end_run()
    await DenvSandboxEnvironment.task_init("t", compose)
    assert deploys(fake) == 2


async def test_version_config_deploys_nothing(fake: FakeControlPlane) -> None:
    fake.add_project("shop")
    fake.add_version("shop", 4)
    cfg = DenvSandboxConfig(project="shop", version="4")
    await DenvSandboxEnvironment.task_init("t", cfg)
    assert deploys(fake) == 0
    envs = await DenvSandboxEnvironment.sample_init("t", cfg, {})
    sent = next(r for r in fake.requests if r.url.path == "/v1/sandboxes")
    assert json.loads(fake.bodies[fake.requests.index(sent)])["version"] == "shop@v4"
    await DenvSandboxEnvironment.sample_cleanup("t", cfg, envs, False)


async def test_compose_path_mismatch_is_refused(fake: FakeControlPlane, compose: str) -> None:
    fake.add_project("shop", compose_path="other.yaml")
    with pytest.raises(denv.ConfigError, match=r"other\.yaml"):
        await DenvSandboxEnvironment.task_init("t", compose)


async def test_failed_deploy_raises_its_error(fake: FakeControlPlane, compose: str) -> None:
    original = fake.route

    def failing(method: str, parts: list[str], request: Any, body: bytes) -> Any:
        if parts[-1:] == ["deploy"]:
            dep = fake.deployment(
                "deploy",
                "shop/alpha",
                status="failed",
                error={
                    "code": "invalid_compose",
                    "message": "service 'app': 'privileged' is refused",
                },
            )
            import httpx

            return httpx.Response(202, json=dep)
        return original(method, parts, request, body)

    fake.route = failing  # type: ignore[method-assign]
    with pytest.raises(denv.InvalidComposeError, match="privileged"):
        await DenvSandboxEnvironment.task_init("t", compose)


# ---------------------------------------------------------------------------- samples


@pytest.fixture
async def envs(fake: FakeControlPlane, compose: str) -> dict[str, DenvSandboxEnvironment]:
    await DenvSandboxEnvironment.task_init("my task", compose)
    made = await DenvSandboxEnvironment.sample_init("my task", compose, {})
    return {k: v for k, v in made.items() if isinstance(v, DenvSandboxEnvironment)}


async def test_sample_init_maps_services_agent_first(
    envs: dict[str, DenvSandboxEnvironment], fake: FakeControlPlane
) -> None:
    assert list(envs) == ["app", "db"]
    app = envs["app"]
    assert app.sandbox_id.startswith("shop/inspect-my-task-")
    assert len(app.sandbox_id.split("/")[1]) <= 40
    created = next(r for r in fake.requests if r.url.path == "/v1/sandboxes")
    body = json.loads(fake.bodies[fake.requests.index(created)])
    assert body == {
        "project": "shop",
        "ttl_sec": 3600,
        "version": "shop@v1",
        "name": app.sandbox_id.split("/")[1],
    }


async def test_sample_init_records_the_environment(
    envs: dict[str, DenvSandboxEnvironment],
) -> None:
    record = store().get("denv")
    assert record["project"] == "shop"
    assert record["version"] == "shop@v1"
    assert record["fork"] == envs["app"].sandbox_id
    assert record["services"] == ["app", "db"]
    assert record["agent"] == {"service": "app", "user": "1000", "workdir": "/workspace"}
    info = [e for e in transcript().events if isinstance(e, InfoEvent) and e.source == "denv"]
    assert info[-1].data == record


async def test_sample_cleanup_destroys(
    envs: dict[str, DenvSandboxEnvironment], fake: FakeControlPlane
) -> None:
    sandbox_id = envs["app"].sandbox_id
    await DenvSandboxEnvironment.sample_cleanup("my task", None, dict(envs), False)
    assert sandbox_id not in fake.environments
    with pytest.raises(ConnectionError):
        await envs["app"].connection()


async def test_task_cleanup_without_cleanup_prints_the_ids(
    envs: dict[str, DenvSandboxEnvironment],
    fake: FakeControlPlane,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sandbox_id = envs["app"].sandbox_id
    await DenvSandboxEnvironment.task_cleanup("my task", None, cleanup=False)
    out = capsys.readouterr().out
    assert sandbox_id in out
    assert "inspect sandbox cleanup denv" in out
    assert sandbox_id in fake.environments


async def test_task_cleanup_destroys_what_is_left(
    envs: dict[str, DenvSandboxEnvironment], fake: FakeControlPlane
) -> None:
    sandbox_id = envs["app"].sandbox_id
    await DenvSandboxEnvironment.task_cleanup("my task", None, cleanup=True)
    assert sandbox_id not in fake.environments


async def test_cli_cleanup(
    envs: dict[str, DenvSandboxEnvironment],
    fake: FakeControlPlane,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake.add_environment("shop/mine", "shop@v1", sandbox=True)
    transport = fake.transport()
    real = denv.AsyncClient

    def client(*args: Any, **kwargs: Any) -> denv.AsyncClient:
        return real(*args, transport=transport, **kwargs)

    monkeypatch.setattr(sandbox_module, "AsyncClient", client)
    await DenvSandboxEnvironment.cli_cleanup(None)
    assert envs["app"].sandbox_id not in fake.environments
    assert "shop/mine" in fake.environments  # not made by this provider
    await DenvSandboxEnvironment.cli_cleanup("shop/mine")
    assert "shop/mine" not in fake.environments
    assert "destroyed shop/mine" in capsys.readouterr().out


# ---------------------------------------------------------------------------- per-run state


def sandbox_id(envs: dict[str, SandboxEnvironment]) -> str:
    first = next(iter(envs.values()))
    assert isinstance(first, DenvSandboxEnvironment)
    return first.sandbox_id


async def test_concurrent_runs_keep_their_own_state(fake: FakeControlPlane, compose: str) -> None:
    # Two evals of the same task at once in one process, each driving the provider directly.
    ready, go, done = ([anyio.Event(), anyio.Event()] for _ in range(3))
    made: dict[int, str] = {}
    states: dict[int, state_module.RunState] = {}

    async def run(i: int) -> None:
        await DenvSandboxEnvironment.task_init("t", compose)
        made[i] = sandbox_id(await DenvSandboxEnvironment.sample_init("t", compose, {}))
        states[i] = state_module.run_state()
        ready[i].set()
        await go[i].wait()
        await DenvSandboxEnvironment.task_cleanup("t", compose, cleanup=True)
        done[i].set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, 0)
        tg.start_soon(run, 1)
        await ready[0].wait()
        await ready[1].wait()
        assert states[0] is not states[1]
        assert set(states[0].sandboxes) == {made[0]}
        assert set(states[1].sandboxes) == {made[1]}
        assert deploys(fake) == 1  # one source: the second run finds it deployed
        go[0].set()
        await done[0].wait()
        assert made[0] not in fake.environments
        assert made[1] in fake.environments  # not the first run's to destroy
        go[1].set()
    assert made[1] not in fake.environments
    assert state_module._ownerless.get() is None  # the runs bound their state in their tasks


@pytest.mark.parametrize("cleanup", [True, False])
async def test_a_run_as_inspect_drives_it(
    fake: FakeControlPlane, compose: str, cleanup: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    # Inspect's SandboxManager: one lifecycle scope per run, task_init("startup") (here in a
    # sibling of the samples, like a SampleSource feeder), samples in tasks of their own,
    # task_cleanup("shutdown") at the end.
    from inspect_ai.util._sandbox.lifecycle import sandbox_lifecycle_scope

    made: list[str] = []

    async def sample() -> None:
        made.append(sandbox_id(await DenvSandboxEnvironment.sample_init("my task", compose, {})))

    with sandbox_lifecycle_scope():
        async with anyio.create_task_group() as tg:
            tg.start_soon(DenvSandboxEnvironment.task_init, "startup", compose)
        async with anyio.create_task_group() as tg:
            tg.start_soon(sample)
            tg.start_soon(sample)
        # The samples forked the version task_init found: no second look at the project.
        assert sum(1 for r in fake.requests if r.url.path == "/v1/projects/shop") == 1
        await DenvSandboxEnvironment.task_cleanup("shutdown", compose, cleanup=cleanup)
    assert len(made) == 2
    out = capsys.readouterr().out
    for made_id in made:
        assert (made_id in fake.environments) is not cleanup
        assert (made_id in out) is not cleanup
    assert state_module._ownerless.get() is None


@pytest.mark.parametrize("cleanup", [True, False])
async def test_a_real_eval_destroys_or_lists_its_sandboxes(
    fake: FakeControlPlane,
    compose: str,
    cleanup: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from inspect_ai import Task, eval_async
    from inspect_ai.dataset import Sample
    from inspect_ai.solver import Generate, Solver, TaskState, solver

    @solver
    def nothing() -> Solver:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            return state

        return solve

    task = Task(
        dataset=[Sample(input="a"), Sample(input="b")],
        solver=nothing(),
        sandbox=("denv", compose),
    )
    monkeypatch.setenv("INSPECT_DISPLAY", "none")
    logs = await eval_async(
        task,
        model="mockllm/model",
        log_dir=str(tmp_path / "logs"),
        sandbox_cleanup=cleanup,
    )
    assert logs[0].status == "success"
    assert deploys(fake) == 1
    forks = [r for r in fake.requests if r.method == "POST" and r.url.path == "/v1/sandboxes"]
    assert len(forks) == 2
    left = [env for env in fake.environments if "/inspect-" in env]
    out = capsys.readouterr().out
    if cleanup:
        assert left == []
    else:  # --no-sandbox-cleanup: left running, and task_cleanup("shutdown") lists them
        assert len(left) == 2
        assert all(env in out for env in left)


# ---------------------------------------------------------------------------- exec


async def test_exec_result(envs: dict[str, DenvSandboxEnvironment], fake: FakeControlPlane) -> None:
    seen: list[dict[str, Any]] = []

    def answer(env: str, req: dict[str, Any]) -> dict[str, Any]:
        seen.append(req)
        return exec_response(3, b"out \xff", b"err")

    fake.on_exec = answer
    res = await envs["app"].exec(
        ["ls"], input="in", cwd="sub", env={"A": "1"}, user="1000", timeout=9
    )
    assert (res.success, res.returncode, res.stdout, res.stderr) == (False, 3, "out \ufffd", "err")
    assert seen[0] == {
        "cmd": ["ls"],
        "service": "app",
        "user": "1000",
        "cwd": "/workspace/sub",
        "env": {"A": "1"},
        "stdin": "aW4=",
        "timeout": 9,
        "output_limit": 10 * 1024 * 1024,
    }
    await envs["app"].exec(["ls"], cwd="/abs")
    assert seen[1]["cwd"] == "/abs"


async def test_exec_in_another_service_resolves_its_workdir(
    envs: dict[str, DenvSandboxEnvironment], fake: FakeControlPlane
) -> None:
    seen: list[dict[str, Any]] = []
    fake.on_exec = lambda env, req: (seen.append(req), exec_response(0))[1]
    await envs["db"].exec(["ls"], cwd="data")
    assert seen[-1]["cwd"] == "/srv/data"  # the fake's `pwd` in db
    assert seen[-1]["service"] == "db"


@pytest.mark.parametrize(
    ("answer", "raised", "match"),
    [
        (exec_response(124, b"partial", timed_out=True), TimeoutError, "timed out after 5"),
        (exec_response(0, b"x" * 10, truncated=True), OutputLimitExceededError, "10 MiB"),
        (
            exec_response(
                126,
                b"OCI runtime exec failed: exec failed: unable to start container "
                b'process: exec: "/etc/passwd": permission denied: unknown\r\n',
            ),
            PermissionError,
            "Permission denied",
        ),
        (error(404, "not_found", "no environment shop/x"), SandboxUnavailableError, "shop/x"),
        (error(502, "docker", "container not running"), SandboxUnavailableError, "not running"),
    ],
)
async def test_exec_errors(
    envs: dict[str, DenvSandboxEnvironment],
    fake: FakeControlPlane,
    answer: Any,
    raised: type[BaseException],
    match: str,
) -> None:
    fake.on_exec = lambda env, req: answer
    with pytest.raises(raised, match=match) as caught:
        await envs["app"].exec(["x"], timeout=5)
    if raised is TimeoutError:
        assert caught.value.truncated_output == "partial"  # type: ignore[attr-defined]


async def test_missing_program_is_a_failed_result(
    envs: dict[str, DenvSandboxEnvironment], fake: FakeControlPlane
) -> None:
    fake.on_exec = lambda env, req: exec_response(
        127,
        b'OCI runtime exec failed: exec failed: exec: "nope": executable file not found in $PATH',
    )
    res = await envs["app"].exec(["nope"])
    assert not res.success and res.returncode == 127


async def test_root_in_the_agent_service_is_unsupported(
    envs: dict[str, DenvSandboxEnvironment],
) -> None:
    with pytest.raises(SandboxUserUnsupportedError, match="protection 1"):
        await envs["app"].exec(["id"], user="root")


# ---------------------------------------------------------------------------- files


async def test_write_and_read(
    envs: dict[str, DenvSandboxEnvironment], fake: FakeControlPlane
) -> None:
    app = envs["app"]
    await app.write_file("notes/a.txt", "line\r\nline2\n")
    tree = fake.files[app.sandbox_id]
    assert tree["/workspace/notes/a.txt"].data == b"line\r\nline2\n"
    assert await app.read_file("notes/a.txt") == "line\r\nline2\n"
    await app.write_file("/tmp/b.bin", b"\xc3\x28")
    assert await app.read_file("/tmp/b.bin", text=False) == b"\xc3\x28"
    with pytest.raises(UnicodeDecodeError):
        await app.read_file("/tmp/b.bin")
    await app.write_file("empty", b"")
    assert await app.read_file("empty") == ""


async def test_read_errors(envs: dict[str, DenvSandboxEnvironment], fake: FakeControlPlane) -> None:
    app = envs["app"]
    tree = fake.files[app.sandbox_id]
    with pytest.raises(FileNotFoundError, match="nonexistent"):
        await app.read_file("nonexistent")
    with pytest.raises(IsADirectoryError, match="directory"):
        await app.read_file("/workspace")
    with pytest.raises(IsADirectoryError, match="directory"):
        await app.read_file(".")
    fake.put(app.sandbox_id, "/workspace/secret", b"x")
    fake.unreadable.add("/workspace/secret")
    with pytest.raises(PermissionError, match="secret"):
        await app.read_file("secret")
    fake.unreadable.add("/etc")  # a folder whose tar fails part-way, as /etc does
    with pytest.raises(IsADirectoryError, match="directory"):
        await app.read_file("/etc")
    tree["/workspace/link"] = Node("symlink", target="/workspace/notes.txt")
    fake.put(app.sandbox_id, "/workspace/notes.txt", b"followed")
    assert await app.read_file("link") == "followed"


async def test_read_limit(envs: dict[str, DenvSandboxEnvironment], fake: FakeControlPlane) -> None:
    app = envs["app"]
    fake.put(app.sandbox_id, "/workspace/large", b"a" * 2048)
    with (
        override_max_read_file_size(1024),
        pytest.raises(OutputLimitExceededError, match="limit of 1 KiB was exceeded"),
    ):
        await app.read_file("large")
    fake.put(app.sandbox_id, "/workspace/huge", b"a" * 300_000)
    with (
        override_max_read_file_size(1024),
        pytest.raises(OutputLimitExceededError),
    ):
        await app.read_file("huge")


async def test_write_errors(
    envs: dict[str, DenvSandboxEnvironment], fake: FakeControlPlane
) -> None:
    app = envs["app"]
    with pytest.raises(IsADirectoryError, match="directory"):
        await app.write_file("/workspace", "x")
    fake.unreadable.add("/workspace/ro.txt")
    with pytest.raises(PermissionError, match=r"ro\.txt"):
        await app.write_file("ro.txt", "x")


async def test_connection(envs: dict[str, DenvSandboxEnvironment]) -> None:
    conn = await envs["db"].connection(user="redis")
    assert conn.type == "denv"
    sandbox_id = envs["db"].sandbox_id
    assert conn.command == f"denv exec {sandbox_id} --service db --user redis -- bash -l"
    assert conn.container == sandbox_id
