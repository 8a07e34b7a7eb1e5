"""DenvEnvironment itself, with Harbor installed, against the fake control plane: what a
refused run leaves behind (nothing), and the merged compose file a compose task deploys.

Harbor needs Python >= 3.12; run these where ``denv[harbor]`` is installed (the tools image of
deploy/tools-image, or ``PYTHONPATH=src:tests python -m pytest tests/test_harbor_environment.py``
from a 3.12+ venv with Harbor).
"""

from __future__ import annotations

import asyncio
import io
import logging
import tarfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from harbor.models.task.config import (  # type: ignore[import-not-found]
    EnvironmentConfig,
    NetworkMode,
    NetworkPolicy,
)
from harbor.models.trial.paths import TrialPaths  # type: ignore[import-not-found]

import denv
from conftest import REPO
from denv.harbor import DenvEnvironment
from denv.messages import harbor_public_network
from fakecp import FakeControlPlane, error

MULTI = REPO / "examples" / "harbor-multi"


def _environment(
    tmp_path: Path,
    fake: FakeControlPlane,
    monkeypatch: pytest.MonkeyPatch,
    *,
    network: NetworkMode = NetworkMode.NO_NETWORK,
    refuse_deploys: bool = False,
    **ek: Any,
) -> DenvEnvironment:
    def handle(request: httpx.Request) -> httpx.Response:
        if refuse_deploys and request.method == "POST" and request.url.path.endswith("/deploy"):
            fake.requests.append(request)
            return error(400, "invalid_compose", "service 'main': 'image' is missing")
        return fake.handle(request)

    def client(url: str, token: str | None, project: str | None) -> denv.AsyncClient:
        return denv.AsyncClient(url, token, project, transport=httpx.MockTransport(handle))

    monkeypatch.setattr("denv.harbor._environment.AsyncClient", client)
    return DenvEnvironment(
        environment_dir=MULTI / "environment",
        environment_name="harbor-multi",
        session_id="harbor-multi__abc__env",
        trial_paths=TrialPaths(tmp_path / "trial"),
        task_env_config=EnvironmentConfig(workdir="/app"),
        network_policy=NetworkPolicy(network_mode=network),
        url="http://cp",
        token=fake.token,
        **ek,
    )


def test_a_public_task_is_refused_before_anything_exists_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_config: Path
) -> None:
    fake = FakeControlPlane()
    with pytest.raises(ValueError, match="internet") as caught:
        _environment(
            tmp_path, fake, monkeypatch, network=NetworkMode.PUBLIC, public_network="refuse"
        )
    assert str(caught.value) == harbor_public_network("harbor-multi")
    assert (fake.projects, fake.requests) == ({}, [])


@pytest.mark.parametrize(
    ("network", "ek", "egress"),
    [
        (NetworkMode.PUBLIC, {}, "mirrors"),
        (NetworkMode.PUBLIC, {"public_network": "deny"}, "deny"),
        (NetworkMode.NO_NETWORK, {}, "deny"),
    ],
)
def test_network_mode_maps_onto_egress_by_phase_and_the_agent_is_root_in_gvisor(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    isolated_config: Path,
    network: NetworkMode,
    ek: dict[str, str],
    egress: str,
) -> None:
    fake = FakeControlPlane()
    env = _environment(tmp_path, fake, monkeypatch, network=network, **ek)
    assert env._source is not None
    files = dict(env._source.extra_files)
    x_denv = yaml.safe_load(files["docker-compose.yaml"])["x-denv"]
    assert x_denv["egress"] == egress
    assert x_denv["agent"] == {
        "service": "main",
        "user": "root",
        "workdir": "/app",
        "sandbox": "gvisor",
    }
    # Harbor's root housekeeping and the agent's root commands go through as root.
    assert env._user("root") == "root" and env._user(None) is None


def test_a_root_verifier_user_without_the_sandbox_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_config: Path
) -> None:
    fake = FakeControlPlane()
    with pytest.raises(ValueError, match="verifier_user='0'") as caught:
        _environment(tmp_path, fake, monkeypatch, agent_sandbox="none", verifier_user="0")
    assert "\n" not in str(caught.value)
    assert (fake.projects, fake.requests) == ({}, [])


def test_a_refused_deploy_leaves_no_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_config: Path
) -> None:
    fake = FakeControlPlane()
    env = _environment(tmp_path, fake, monkeypatch, refuse_deploys=True)
    with pytest.raises(denv.DenvError, match="'image' is missing"):
        asyncio.run(env.start(force_build=False))
    asyncio.run(env.stop(delete=True))
    assert fake.projects == {}
    assert [e for e in fake.environments.values() if e["sandbox"]] == []


def test_a_compose_task_deploys_its_merge_over_harbors_base(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    isolated_config: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeControlPlane()
    with caplog.at_level(logging.INFO):
        env = _environment(tmp_path, fake, monkeypatch)
    asyncio.run(env.start(force_build=False))
    assert env.sandbox is not None
    assert fake.projects["harbor-harbor-multi"]["compose_path"] == "docker-compose.yaml"
    post = next(r for r in fake.requests if r.url.path.endswith("/deploy"))
    with tarfile.open(fileobj=io.BytesIO(fake.bodies[fake.requests.index(post)])) as tar:
        compose_file = tar.extractfile("docker-compose.yaml")
        assert compose_file is not None
        compose = yaml.safe_load(compose_file.read())
        assert "Dockerfile.denv" in tar.getnames()
    assert compose["name"] == "harbor-harbor-multi"
    assert compose["services"]["main"]["build"] == {"context": ".", "dockerfile": "Dockerfile.denv"}
    assert compose["services"]["kv"]["build"] == {"context": "./kv"}
    asyncio.run(env.stop(delete=True))
