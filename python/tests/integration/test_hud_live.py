"""HUD on denv, live: tests/hud/test_hud_eval_live.py run in python/.venv-hud against this stack.

HUD cannot share this venv with verifiers (mcp < 2 against mcp == 2.0.0), so the quickstart is
deployed here (as the other integration tests deploy it) and HUD's own runner runs in HUD's
venv, against the same control plane, with the version it forks.
"""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest

from conftest import HUD_PYTEST, QUICKSTART_COMPOSE, REPO, Live
from denv.inspect import DenvSandboxConfig
from denv.inspect._config import ensure_version, resolve_settings

pytestmark = pytest.mark.integration


def test_hud_runs_the_quickstart_on_denv(live: Live) -> None:
    assert HUD_PYTEST.is_file(), f"{HUD_PYTEST} is missing: run scripts/setup-python"
    config = DenvSandboxConfig(
        project=live.project, compose=str(QUICKSTART_COMPOSE), url=live.url, token=live.token
    )
    version = asyncio.run(ensure_version(resolve_settings(config)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DENV_", "HUD_"))}
    env.update(
        DENV_TEST_URL=live.url,
        DENV_TEST_TOKEN=live.token,
        DENV_TEST_PROJECT=live.project,
        DENV_TEST_HUD_VERSION=version,
    )
    run = subprocess.run(
        [
            str(HUD_PYTEST),
            "python/tests/hud",
            "-m",
            "integration",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rfE",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-3000:]
    assert "1 passed" in run.stdout
    assert "skipped" not in run.stdout
