"""Shared test setup: integration tests run only against a live control plane."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

collect_ignore: list[str] = []
try:
    import harbor.environments.base  # noqa: F401
except ImportError:
    # Harbor needs Python >= 3.12; the dev venv is 3.11. This file runs under Harbor, in the tools
    # image, from packages/cli/src/e2e/harbor.test.ts: not collected here rather than skipped.
    collect_ignore.append("test_harbor_environment.py")
try:
    import hud.eval  # noqa: F401
except ImportError:
    # HUD cannot share a venv with verifiers (mcp < 2 against mcp == 2.0.0): tests/hud/ runs in
    # python/.venv-hud, from test_hud.py and integration/test_hud_live.py.
    collect_ignore.append("hud")
QUICKSTART_COMPOSE = REPO / "examples" / "quickstart" / "compose.yaml"
# The pytest of the venv HUD is installed in (scripts/setup-python).
HUD_PYTEST = REPO / "python" / ".venv-hud" / "bin" / "pytest"


def run_hud_pytest(marker: str, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Runs python/tests/hud with HUD's venv (it cannot share this one: mcp < 2 vs mcp == 2.0.0).

    Args:
        marker: The ``-m`` expression (``integration`` or ``not integration``).
        extra_env: Variables added to this process's environment, without its DENV_ and HUD_ ones.

    Returns:
        The finished pytest run, its output captured.
    """
    assert HUD_PYTEST.is_file(), f"{HUD_PYTEST} is missing: run scripts/setup-python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DENV_", "HUD_"))}
    env.update(extra_env)
    argv = [
        str(HUD_PYTEST),
        "python/tests/hud",
        "-m",
        marker,
        "-q",
        "-p",
        "no:cacheprovider",
        "-rfE",
    ]
    return subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False
    )


INTEGRATION_VARS = ("DENV_TEST_URL", "DENV_TEST_TOKEN")

# The commands the docs show, as the integration tests run them (from the repository root).
INSPECT_EVAL_ARGS = ["eval", "python/tests/inspect_task/task.py", "--model", "mockllm/model"]
CONFORMANCE_ARGS = [
    "--pyargs",
    "denv.conformance",
    "--denv-url",
    "{url}",
    "--denv-token",
    "{token}",
    "--denv-project",
    "{project}",
]


@dataclass(frozen=True)
class Live:
    """The control plane the integration tests use."""

    url: str
    token: str
    project: str


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing = [name for name in INTEGRATION_VARS if not os.environ.get(name)]
    if not missing:
        return
    skip = pytest.mark.skip(
        reason=(
            f"integration test: set {' and '.join(missing)} to a denv control plane with a "
            "denvd host (DENV_TEST_PROJECT names the project, default quickstart)"
        )
    )
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def live() -> Live:
    return Live(
        url=os.environ["DENV_TEST_URL"],
        token=os.environ["DENV_TEST_TOKEN"],
        project=os.environ.get("DENV_TEST_PROJECT") or "quickstart",
    )


@pytest.fixture
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No DENV_* variables and an empty config home, so tests see only what they set."""
    for name in ("DENV_URL", "DENV_TOKEN", "DENV_PROJECT", "DENV_CONFIG", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path
