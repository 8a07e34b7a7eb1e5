"""The quickstart as a HUD environment on denv: the module docs/blog/hud.md shows (run from the
repository root: the answer key is read from examples/quickstart).

``quickstart`` builds the HUD environment of one placement from its denv sandbox: an actor
template (the prompt) and a verifier template that grades the world it is placed on, the shop's
totals read as the agent user and compared with the quickstart's answer key, which stays on
this machine. ``FIX_TOTALS`` is the task row: its verifier has a runtime of its own, so HUD
grades it on a fork of a snapshot of the actor's sandbox.
"""

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import hud
from hud.eval import RuntimeConfig, Task

from denv.hud import DenvSandbox

ANSWERS = json.loads(Path("examples/quickstart/tests/expected.json").read_text())["users"]
TOTAL = (
    "import json, sys, urllib.request as u; "
    "print(json.load(u.urlopen('http://127.0.0.1:8080/total?user=' + sys.argv[1]))['total_cents'])"
)


def quickstart(sandbox: DenvSandbox) -> hud.Environment:
    env = hud.Environment("quickstart")

    @env.template()
    async def fix_totals() -> AsyncGenerator[Any, Any]:
        yield "The shop API in /workspace/app reports wrong order totals. Fix it."
        yield {"score": 0.0, "content": "graded by totals_are_right, on a fork"}

    @env.template()
    async def totals_are_right() -> AsyncGenerator[Any, Any]:
        yield "grade the shop's totals"
        wrong = []
        for user, answer in ANSWERS.items():
            got = await sandbox.exec(["python3", "-c", TOTAL, user])
            if got.stdout_text.strip() != str(answer["total_cents"]):
                wrong.append(user)
        yield {"score": 0.0 if wrong else 1.0, "info": {"wrong": wrong, "fork": sandbox.id}}

    return env


FIX_TOTALS = Task(
    env="quickstart",
    id="fix_totals",
    verifier=Task(
        env="quickstart", id="totals_are_right", runtime_config=RuntimeConfig(image="quickstart")
    ),
)
