"""OpenEnv on denv, live: openenv-core's client runs episodes of examples/openenv-counter.

The project ``openenv-counter`` is deployed here (``denv projects create`` when missing, then
``denv deploy``). The episodes go through ``DenvProvider`` (a sandbox per provider, a tunnel to
port 8000); a fork taken mid-episode continues from the same disk state independently; a
directory written by ``denv export openenv`` runs an episode; the how-to's snippets run as
written.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from openenv.core.generic_client import GenericEnvClient
from openenv_support import (
    EXPORT_ARGS,
    EXPORT_DIR,
    HOW_TO,
    PROJECT,
    denv_cli,
    deploy_counter,
    python_blocks,
)

from conftest import Live
from denv import Client, NotFoundError
from denv.openenv import DenvProvider

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def version(live: Live) -> str:
    return deploy_counter(live.url, live.token)


@pytest.fixture
def denv_env(live: Live, monkeypatch: pytest.MonkeyPatch) -> Live:
    """DENV_URL and DENV_TOKEN point at the live control plane (as `denv login` would)."""
    monkeypatch.setenv("DENV_URL", live.url)
    monkeypatch.setenv("DENV_TOKEN", live.token)
    monkeypatch.delenv("DENV_PROJECT", raising=False)
    return live


def live_sandboxes(live: Live) -> set[str]:
    with Client(live.url, live.token) as client:
        return {s.id for s in client.list_sandboxes()}


async def test_an_episode_through_denv_provider(live: Live, version: str) -> None:
    provider = DenvProvider(url=live.url, token=live.token)
    env = await GenericEnvClient.from_docker_image(version, provider=provider)
    try:
        assert provider.version == version
        assert provider.sandbox is not None
        sandbox = provider.sandbox.id
        result = await env.reset(target=3)
        assert result.observation["count"] == 0
        assert result.done is False
        result = await env.step({"delta": 2})
        assert (result.observation["count"], result.reward, result.done) == (2, 0.0, False)
        result = await env.step({"delta": 1})
        assert (result.observation["count"], result.reward, result.done) == (3, 1.0, True)
        state = await env.state()
        assert (state["count"], state["step_count"]) == (3, 2)
    finally:
        await env.close()
    assert provider.sandbox is None
    assert sandbox not in live_sandboxes(live)


def test_a_fork_mid_episode_continues_independently(live: Live, version: str) -> None:
    provider = DenvProvider(url=live.url, token=live.token)
    url = provider.start_container(version)
    provider.wait_for_ready(url, timeout_s=60)
    first = GenericEnvClient(base_url=url, provider=provider).sync()
    with first:
        first.reset(target=10)
        first.step({"delta": 3})
        fork = provider.fork()
        assert fork.base_url is not None and fork.base_url != url
        assert fork.sandbox is not None and fork.sandbox.id != provider.sandbox.id
        snapshot = fork.snapshot_version
        assert snapshot is not None and snapshot != version
        fork_sandbox = fork.sandbox.id
        with GenericEnvClient(base_url=fork.base_url, provider=fork).sync() as second:
            # The fork starts from the snapshot's disk: the same episode, one step in.
            state = second.state()
            assert (state["count"], state["step_count"]) == (3, 1)
            assert state["episode_id"] == first.state()["episode_id"]
            # A step in one leaves the other's state unchanged, both ways.
            assert first.step({"delta": 1}).observation["count"] == 4
            assert second.state()["count"] == 3
            assert second.step({"delta": 5}).observation["count"] == 8
            assert first.state()["count"] == 4
            assert first.state()["step_count"] == 2
            assert second.state()["step_count"] == 2
    # Closing each client stopped its provider: sandboxes destroyed, snapshot deleted.
    assert provider.sandbox is None and fork.sandbox is None
    assert not {fork_sandbox} & live_sandboxes(live)
    with Client(live.url, live.token) as client, pytest.raises(NotFoundError):
        client.get_version(snapshot)


def load_exported(directory: Path) -> ModuleType:
    path = directory / "client.py"
    spec = importlib.util.spec_from_file_location("exported_openenv_client", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_an_exported_version_runs_an_episode(
    live: Live, version: str, tmp_path: Path
) -> None:
    args = [a.format(version=version) for a in EXPORT_ARGS]
    out = denv_cli(live.url, live.token, args, cwd=tmp_path)
    directory = tmp_path / EXPORT_DIR
    assert out["version"] == version
    assert out["service"] == "server"
    assert sorted(out["files"]) == ["README.md", "client.py", "openenv.yaml"]
    manifest: dict[str, Any] = yaml.safe_load((directory / "openenv.yaml").read_text())
    assert manifest["spec_version"] == 1
    assert manifest["name"] == PROJECT
    assert (manifest["type"], manifest["runtime"], manifest["port"]) == ("space", "fastapi", 8000)
    assert manifest["app"] == "server.app:app"
    assert manifest["denv"] == {"version": version, "service": "server", "port": 8000}
    assert live.token not in (directory / "client.py").read_text()

    exported = load_exported(directory)
    assert version == exported.VERSION
    env = await exported.connect(url=live.url, token=live.token)
    try:
        await env.reset(target=2)
        result = await env.step({"delta": 2})
        assert (result.observation["count"], result.reward, result.done) == (2, 1.0, True)
    finally:
        await env.close()


def test_the_how_to_snippets_run(
    denv_env: Live, version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = python_blocks(HOW_TO)
    assert len(blocks) >= 3
    # The page forks the project's current version and exports it into ./openenv-counter-env.
    args = [a.format(version=version) for a in EXPORT_ARGS]
    denv_cli(denv_env.url, denv_env.token, args, cwd=tmp_path)
    monkeypatch.chdir(tmp_path)
    before = live_sandboxes(denv_env)
    namespace: dict[str, Any] = {"__name__": "docs_openenv"}
    try:
        for block in blocks:
            exec(compile(block.replace(f"{PROJECT}@v1", version), str(HOW_TO), "exec"), namespace)
    finally:
        sys.modules.pop("client", None)
        if EXPORT_DIR in sys.path:
            sys.path.remove(EXPORT_DIR)
    assert live_sandboxes(denv_env) <= before


@pytest.fixture(autouse=True)
def _no_leftover_client_module() -> Iterator[None]:
    yield
    sys.modules.pop("exported_openenv_client", None)
