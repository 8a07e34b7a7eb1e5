"""HUD on denv, live: tests/hud/test_hud_eval_live.py run in python/.venv-hud against this stack.

HUD cannot share this venv with verifiers (mcp < 2 against mcp == 2.0.0), so the quickstart is
deployed here (as the other integration tests deploy it) and HUD's own runner runs in HUD's
venv, against the same control plane, with the version it forks.
"""

from __future__ import annotations

import asyncio

import pytest

from conftest import QUICKSTART_COMPOSE, Live, run_hud_pytest
from denv.inspect import DenvSandboxConfig
from denv.inspect._config import ensure_version, resolve_settings

pytestmark = pytest.mark.integration


def test_hud_runs_the_quickstart_on_denv(live: Live) -> None:
    config = DenvSandboxConfig(
        project=live.project, compose=str(QUICKSTART_COMPOSE), url=live.url, token=live.token
    )
    version = asyncio.run(ensure_version(resolve_settings(config)))
    run = run_hud_pytest(
        "integration",
        {
            "DENV_TEST_URL": live.url,
            "DENV_TEST_TOKEN": live.token,
            "DENV_TEST_PROJECT": live.project,
            "DENV_TEST_HUD_VERSION": version,
        },
    )
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-3000:]
    assert "1 passed" in run.stdout
    assert "skipped" not in run.stdout
