"""A real ``inspect eval`` of a tiny task with ``sandbox=("denv", ".../compose.yaml")``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from inspect_ai.event import InfoEvent
from inspect_ai.log import list_eval_logs, read_eval_log

import denv
from conftest import INSPECT_EVAL_ARGS, REPO, Live

pytestmark = pytest.mark.integration

INSPECT = Path(sys.executable).parent / "inspect"


def test_inspect_eval_records_the_environment(live: Live, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DENV_URL": live.url,
        "DENV_TOKEN": live.token,
        "DENV_PROJECT": live.project,
        "INSPECT_DISPLAY": "plain",
    }
    run = subprocess.run(
        [str(INSPECT), *INSPECT_EVAL_ARGS, "--log-dir", str(tmp_path)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    logs = list_eval_logs(str(tmp_path))
    assert len(logs) == 1
    log = read_eval_log(logs[0])
    assert log.status == "success", log.error
    assert log.eval.sandbox is not None
    assert log.eval.sandbox.type == "denv"
    assert log.results is not None
    assert log.results.scores[0].metrics["accuracy"].value == 1.0

    assert log.samples is not None
    forks = set()
    for sample in log.samples:
        record = sample.store["denv"]
        assert record["project"] == live.project
        assert re.fullmatch(rf"{re.escape(live.project)}@v\d+", record["version"])
        assert record["fork"].startswith(f"{live.project}/inspect-")
        assert record["services"][0] == record["agent"]["service"]
        info = [e for e in sample.events if isinstance(e, InfoEvent) and e.source == "denv"]
        assert len(info) == 1
        assert info[0].data == record
        forks.add(record["fork"])
    assert len(forks) == len(log.samples), "each sample gets its own fork"

    with denv.Client(live.url, live.token, live.project) as client:
        left = {sb.id for sb in client.list_sandboxes()}
    assert not forks & left, "the samples' sandboxes were destroyed"
