"""HUD tasks -> Harbor tasks -> a denv project, offline: HUD's own Harbor exporter
(``hud.integrations.harbor.export``, hud 0.6.21) writes the task folder, and the denv CLI's
``denv import harbor`` (node, the built CLI, with this venv's Python as ``DENV_PYTHON``) makes the
project folder ``denv deploy`` takes. Nothing is built or deployed here: the exported image
installs hud from PyPI when it is built (docs/blog/hud.md, section 3, says what is not run).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from hud.integrations.harbor import export

REPO = Path(__file__).resolve().parents[3]
CLI = REPO / "packages" / "cli" / "dist" / "main.js"
SOURCE = Path(__file__).resolve().parent / "harbor_env" / "env.py"


def test_a_hud_task_exported_to_harbor_imports_as_a_denv_project(tmp_path: Path) -> None:
    (task,) = asyncio.run(export(str(SOURCE), tmp_path / "harbor", answer_file="/env/answer.txt"))
    assert task.name == "count-759529a8"  # the id and a hash of the args: the blog names it
    toml = (task / "task.toml").read_text()
    assert 'hud_task = "count"' in toml
    instruction = (task / "instruction.md").read_text()
    assert instruction.startswith("How many times does 'r' occur in 'strawberry'?")
    assert "write your final answer to `/env/answer.txt`" in instruction
    assert "hud task grade count" in (task / "tests" / "test.sh").read_text()

    assert CLI.is_file(), f"{CLI} is missing: build the CLI first (npm run -s build)"
    env = {**os.environ, "DENV_PYTHON": sys.executable}
    run = subprocess.run(
        ["node", str(CLI), "import", "harbor", str(task), "--out", "project", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    answer = json.loads(run.stdout)
    assert answer["project"] == task.name
    assert answer["services"] == ["main"]
    compose = yaml.safe_load((tmp_path / "project" / "compose.yaml").read_text())
    denv = compose["x-denv"]
    assert denv["agent"]["service"] == "main"
    # denv's verifier is HUD's grader: Harbor's tests/test.sh (`hud task grade`) in the task's
    # image, on a fork, with the agent's workdir (where the answer file is) put back.
    assert denv["verifier"]["command"][-1].endswith("exec bash /tests/test.sh")
    assert denv["verifier"]["submission"] == ["/env"]
    assert denv["verifier"]["tests"] == "./tests"
    dockerfile = (tmp_path / "project" / "environment" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["/hud_entrypoint.sh"]' in dockerfile
