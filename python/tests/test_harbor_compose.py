"""A Harbor task's compose file merged over Harbor's base compose, as Harbor's docker backend
does (denv.harbor._compose), and the adapter's refusals that must leave nothing behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import denv
from conftest import REPO
from denv.harbor import DenvHarborOptions, task_source
from denv.harbor._compose import merge_compose, merge_harbor_compose
from denv.harbor._deploy import ensure_deployed
from denv.harbor._options import parse_ek_options
from fakecp import FakeControlPlane, error

FIXTURE = REPO / "python" / "tests" / "harbor_merge"
MULTI = REPO / "examples" / "harbor-multi"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_the_shared_fixture_merges_to_the_expected_document() -> None:
    # The same file is the expectation of `denv import harbor` (test_harbor_import.py).
    expected = _load(FIXTURE / "expected-compose.yaml")
    merged = merge_harbor_compose(
        _load(FIXTURE / "environment" / "docker-compose.yaml"),
        has_dockerfile=True,
        cpus=2,
        memory_mb=1024,
    )
    assert merged.document == expected["document"]
    assert list(merged.notes) == expected["notes"]


def test_compose_merge_follows_docker_compose_rules() -> None:
    base = {
        "services": {
            "a": {
                "build": ".",
                "command": ["sh", "-c", "sleep infinity"],
                "environment": ["A=1", "B=2"],
                "volumes": ["v:/data", "w:/w"],
                "dns": ["1.1.1.1"],
                "healthcheck": {"test": ["CMD", "a"], "interval": "1s"},
                "depends_on": ["b"],
            }
        }
    }
    over = {
        "services": {
            "a": {
                "build": {"dockerfile": "D"},
                "command": ["run"],
                "environment": {"B": "3", "C": None},
                "volumes": [{"type": "volume", "source": "x", "target": "/data"}],
                "dns": ["8.8.8.8", "1.1.1.1"],
                "healthcheck": {"test": ["CMD", "b"]},
                "depends_on": {"c": {"condition": "service_healthy"}},
            },
            "b": {"image": "b"},
        }
    }
    a = merge_compose(base, over)["services"]["a"]
    assert a["build"] == {"context": ".", "dockerfile": "D"}
    assert a["command"] == ["run"]
    assert a["environment"] == {"A": "1", "B": "3", "C": None}
    assert a["volumes"] == [{"type": "volume", "source": "x", "target": "/data"}, "w:/w"]
    assert a["dns"] == ["1.1.1.1", "8.8.8.8"]
    assert a["healthcheck"] == {"test": ["CMD", "b"], "interval": "1s"}
    assert a["depends_on"] == {
        "b": {"condition": "service_started"},
        "c": {"condition": "service_healthy"},
    }
    assert base["services"]["a"]["environment"] == ["A=1", "B=2"]  # inputs untouched


def test_a_main_without_build_gets_harbors_build_and_a_second_service_stays() -> None:
    src = task_source(FIXTURE / "environment", "merge-fixture", cpus=2, memory_mb=1024)
    assert src.compose_name == "docker-compose.yaml"
    assert src.workdir == "/app"  # the Dockerfile's WORKDIR
    files = dict(src.extra_files)
    assert set(files) == {"docker-compose.yaml", "Dockerfile.denv"}
    compose = yaml.safe_load(files["docker-compose.yaml"])
    assert compose["name"] == "merge-fixture"
    main = compose["services"]["main"]
    assert main["build"] == {"context": ".", "dockerfile": "Dockerfile.denv"}
    assert (main["init"], main["working_dir"], main["cpus"]) == (True, "/app", 2)
    assert "image" not in main and main["volumes"] == ["data:/data"]
    assert compose["services"]["cache"]["build"] == {"context": "./cache"}
    assert compose["x-denv"]["agent"] == {"service": "main", "user": "1000", "workdir": "/app"}
    assert files["Dockerfile.denv"].decode().startswith("FROM debian:bookworm-slim\nWORKDIR /app\n")
    assert len(src.notes) == 4 and any("pull_policy" in n for n in src.notes)


def test_the_multi_container_example_merges(tmp_path: Path) -> None:
    src = task_source(MULTI / "environment", "harbor-harbor-multi")
    compose = yaml.safe_load(dict(src.extra_files)["docker-compose.yaml"])
    assert sorted(compose["services"]) == ["kv", "main"]
    assert compose["services"]["main"]["build"]["dockerfile"] == "Dockerfile.denv"


def test_a_prebuilt_image_main_and_a_main_built_elsewhere(tmp_path: Path) -> None:
    (tmp_path / "docker-compose.yaml").write_text("services:\n  main:\n    environment: [A=1]\n")
    src = task_source(tmp_path, "p", docker_image="python:3.13-slim", workdir="/work")
    files = dict(src.extra_files)
    assert files["Dockerfile.denv"].decode().startswith("FROM python:3.13-slim\n")
    main = yaml.safe_load(files["docker-compose.yaml"])["services"]["main"]
    assert main["build"] == {"context": ".", "dockerfile": "Dockerfile.denv"}
    assert main["environment"] == {"A": "1"} and src.workdir == "/work"

    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "Containerfile").write_text("FROM debian:bookworm-slim\n")
    (tmp_path / "docker-compose.yaml").write_text(
        "services:\n  main:\n    build: {context: ./app, dockerfile: Containerfile}\n"
    )
    files = dict(task_source(tmp_path, "p").extra_files)
    main = yaml.safe_load(files["docker-compose.yaml"])["services"]["main"]
    assert main["build"] == {"context": "./app", "dockerfile": "Dockerfile.denv"}
    assert "app/Dockerfile.denv" in files


def test_a_compose_task_that_cannot_be_merged_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "docker-compose.yaml").write_text("services:\n  main:\n    init: true\n")
    with pytest.raises(ValueError, match=r"services\.main has neither build nor image"):
        task_source(tmp_path, "p")  # no Dockerfile, no docker_image
    (tmp_path / "docker-compose.yaml").write_text("services:\n  main:\n    build: ./app\n")
    with pytest.raises(ValueError, match=r"services\.main\.build: no Dockerfile app/Dockerfile"):
        task_source(tmp_path, "p")
    (tmp_path / "docker-compose.yaml").write_text("- a list\n")
    with pytest.raises(ValueError, match="expected a compose mapping"):
        task_source(tmp_path, "p")


# ---------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("spelling", ["0", "00", "+0", "-0", "root", "0:0", "root:root", 0])
def test_a_root_verifier_user_is_refused_without_the_sandbox(spelling: object) -> None:
    with pytest.raises(ValueError, match="verifier_user") as caught:
        parse_ek_options(DenvHarborOptions, {"agent_sandbox": "none", "verifier_user": spelling})
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"denv.harbor:DenvEnvironment --ek: verifier_user={spelling!r}: ")
    assert "root needs agent_sandbox=gvisor" in message
    # In gVisor's kernel a root verifier, on its own fork, is what Harbor's tests expect.
    assert parse_ek_options(DenvHarborOptions, {"verifier_user": spelling}).verifier == str(
        spelling
    )
    assert parse_ek_options(DenvHarborOptions, {"verifier_user": "1002"}).verifier_user == "1002"


def _refusing_deploys(fake: FakeControlPlane) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/deploy"):
            fake.requests.append(request)
            return error(
                400,
                "invalid_compose",
                "service 'main': 'image' is missing: give 'image' or 'build'",
            )
        return fake.handle(request)

    return httpx.MockTransport(handle)


async def test_a_refused_first_deploy_leaves_no_project(isolated_config: Path) -> None:
    fake = FakeControlPlane()
    src = task_source(MULTI / "environment", "harbor-harbor-multi")
    async with denv.AsyncClient("http://cp", "t0k", transport=_refusing_deploys(fake)) as client:
        with pytest.raises(denv.DenvError, match="'image' is missing"):
            await ensure_deployed(client, "http://cp", "harbor-harbor-multi", src)
    assert fake.projects == {}
    methods = [(r.method, r.url.path) for r in fake.requests]
    assert ("DELETE", "/v1/projects/harbor-harbor-multi") in methods


async def test_a_refused_deploy_of_an_existing_project_keeps_it(isolated_config: Path) -> None:
    fake = FakeControlPlane()
    fake.add_project("harbor-harbor-multi", "docker-compose.yaml")
    src = task_source(MULTI / "environment", "harbor-harbor-multi")
    async with denv.AsyncClient("http://cp", "t0k", transport=_refusing_deploys(fake)) as client:
        with pytest.raises(denv.DenvError):
            await ensure_deployed(client, "http://cp", "harbor-harbor-multi", src)
    assert list(fake.projects) == ["harbor-harbor-multi"]
