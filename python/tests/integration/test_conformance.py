"""The conformance suite, run the way docs/reference/python.md shows it."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from conftest import CONFORMANCE_ARGS, QUICKSTART_COMPOSE, REPO, Live
from denv.inspect import DenvSandboxConfig
from denv.inspect._config import ensure_version, resolve_settings

pytestmark = pytest.mark.integration


def test_conformance_suite_passes(live: Live) -> None:
    # The suite forks the project's current version: deploy examples/quickstart unless the
    # project already runs that exact source.
    config = DenvSandboxConfig(
        project=live.project, compose=str(QUICKSTART_COMPOSE), url=live.url, token=live.token
    )
    asyncio.run(ensure_version(resolve_settings(config)))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *(
                a.format(url=live.url, token=live.token, project=live.project)
                for a in CONFORMANCE_ARGS
            ),
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-5000:]
