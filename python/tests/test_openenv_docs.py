"""The OpenEnv pages show the commands the integration tests run, and name what exists."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from conftest import REPO


def _support() -> ModuleType:
    path = REPO / "python" / "tests" / "integration" / "openenv_support.py"
    spec = importlib.util.spec_from_file_location("openenv_support_for_docs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


support = _support()
PAGES = [support.HOW_TO, support.BLOG]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.parent.name)
def test_pages_show_the_commands_the_tests_run(page: Path) -> None:
    text = page.read_text()
    for args in (support.CREATE_ARGS, support.DEPLOY_ARGS, support.EXPORT_ARGS):
        assert f"{support.shown(args)}\n" in text, support.shown(args)
    assert f"{support.FETCH_WHEELS}\n" in text


def test_every_denv_command_shown_is_one_the_tests_run() -> None:
    allowed = {support.shown(a) for a in (support.CREATE_ARGS, support.DEPLOY_ARGS)}
    allowed.add(support.shown(support.EXPORT_ARGS))
    for page in PAGES:
        for line in page.read_text().splitlines():
            if line.startswith("denv "):
                assert line in allowed, f"{page.name}: {line}"


def test_the_how_to_has_the_snippets_the_tests_run() -> None:
    blocks = support.python_blocks(support.HOW_TO)
    assert len(blocks) == 3
    assert "from_docker_image" in blocks[0]
    assert "provider.fork()" in blocks[1]
    assert "client.connect()" in blocks[2]


def test_the_example_is_what_the_pages_describe() -> None:
    example = REPO / "examples" / "openenv-counter"
    manifest = (example / "openenv.yaml").read_text()
    for line in ("spec_version: 1", "type: space", "runtime: fastapi", "app: server.app:app"):
        assert f"{line}\n" in manifest
    assert "port: 8000\n" in manifest
    assert "create_app(" in (example / "server" / "app.py").read_text()
    assert "FROM debian:bookworm-slim" in (example / "server" / "Dockerfile").read_text()
