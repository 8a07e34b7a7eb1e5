"""The docs cannot drift: their Python snippets run here, every public name is documented, and
the commands they show are the ones the integration tests run."""

from __future__ import annotations

import inspect as pyinspect
import re
from pathlib import Path
from typing import Any

import pytest

import denv
from conftest import CONFORMANCE_ARGS, INSPECT_EVAL_ARGS, REPO
from fakecp import FakeControlPlane

PYTHON_MD = REPO / "docs" / "reference" / "python.md"
INSPECT_MD = REPO / "docs" / "how-to" / "inspect.md"


def snippets(page: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", page.read_text(), flags=re.S)


@pytest.fixture
def offline_denv(isolated_config: Path, monkeypatch: pytest.MonkeyPatch) -> FakeControlPlane:
    """denv.Client and denv.AsyncClient talk to an in-memory control plane; cwd is the repo."""
    fake = FakeControlPlane()
    monkeypatch.setenv("DENV_URL", "http://127.0.0.1:7070")
    monkeypatch.setenv("DENV_TOKEN", fake.token)
    monkeypatch.setenv("DENV_PROJECT", "quickstart")
    monkeypatch.chdir(REPO)
    sync_client, async_client = denv.Client, denv.AsyncClient

    def make_sync(*args: Any, **kwargs: Any) -> denv.Client:
        return sync_client(*args, transport=fake.transport(), **kwargs)

    def make_async(*args: Any, **kwargs: Any) -> denv.AsyncClient:
        return async_client(*args, transport=fake.transport(), **kwargs)

    monkeypatch.setattr(denv, "Client", make_sync)
    monkeypatch.setattr(denv, "AsyncClient", make_async)
    return fake


@pytest.mark.parametrize("page", [PYTHON_MD, INSPECT_MD], ids=lambda p: p.name)
def test_python_snippets_run(page: Path, offline_denv: FakeControlPlane) -> None:
    blocks = snippets(page, "python")
    assert blocks
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)


def test_every_public_name_is_documented() -> None:
    text = PYTHON_MD.read_text()
    missing = [name for name in denv.__all__ if name != "__version__" and name not in text]
    for cls in (denv.Client, denv.AsyncClient):
        for name, member in vars(cls).items():
            if not name.startswith("_") and pyinspect.isfunction(member) and f"{name}(" not in text:
                missing.append(f"{cls.__name__}.{name}")
    assert missing == []


def test_inspect_eval_command_is_the_one_the_tests_run() -> None:
    assert f"inspect {' '.join(INSPECT_EVAL_ARGS)}\n" in INSPECT_MD.read_text()


def test_conformance_command_is_the_one_the_tests_run() -> None:
    args = " ".join(CONFORMANCE_ARGS).format(url="URL", token="TOKEN", project="quickstart")
    assert f"pytest {args}\n" in PYTHON_MD.read_text()
