"""What the OpenEnv tests share: the example project, the denv commands they run, deploying it.

docs/how-to/openenv.md shows these commands (tests/test_openenv_docs.py checks that).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from denv import Client, NotFoundError

REPO = Path(__file__).resolve().parents[3]
HOW_TO = REPO / "docs" / "how-to" / "openenv.md"
BLOG = REPO / "docs" / "blog" / "openenv.md"
CLI = REPO / "packages" / "cli" / "dist" / "main.js"
PIP = REPO / "python" / ".venv" / "bin" / "pip"

PROJECT = "openenv-counter"
EXPORT_DIR = "openenv-counter-env"
# The commands, as run from the repository root (`denv` is packages/cli/dist/main.js).
FETCH_WHEELS = "examples/openenv-counter/fetch-wheels"
CREATE_ARGS = ["projects", "create", PROJECT]
DEPLOY_ARGS = ["deploy", "examples/openenv-counter", "--project", PROJECT]
EXPORT_ARGS = ["export", "openenv", "{version}", EXPORT_DIR]


def shown(args: list[str], version: str = f"{PROJECT}@v1") -> str:
    """A command line as the docs show it."""
    return "denv " + " ".join(a.format(version=version) for a in args)


def python_blocks(page: Path) -> list[str]:
    """The page's ```python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def denv_cli(
    url: str, token: str, args: list[str], *, cwd: Path = REPO, timeout: float = 900
) -> dict[str, Any]:
    """Runs the denv CLI with --json and returns its JSON answer (fails on a non-zero exit)."""
    if not CLI.is_file():
        raise AssertionError(f"{CLI} is missing: build the CLI first (npm run -s build)")
    env = {**os.environ, "DENV_URL": url, "DENV_TOKEN": token}
    env.pop("DENV_PROJECT", None)
    proc = subprocess.run(
        ["node", str(CLI), *args, "--json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"denv {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return dict(json.loads(proc.stdout))


def deploy_counter(url: str, token: str) -> str:
    """Fetches the wheels, creates the project when missing, deploys it; returns its version."""
    subprocess.run(
        [str(REPO / FETCH_WHEELS)], env={**os.environ, "PIP": str(PIP)}, check=True, timeout=600
    )
    with Client(url, token) as client:
        try:
            client.get_project(PROJECT)
        except NotFoundError:
            denv_cli(url, token, CREATE_ARGS)
        denv_cli(url, token, DEPLOY_ARGS)
        version = client.get_environment(f"{PROJECT}/alpha").version
    assert version is not None and version.startswith(f"{PROJECT}@v")
    return version
