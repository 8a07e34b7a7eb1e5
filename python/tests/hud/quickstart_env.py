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
# Run in the sandbox: each user's total, as the shop's API reports it, one JSON object.
TOTALS = (
    "import json, sys, urllib.request as u; url = 'http://127.0.0.1:8080/total?user='; "
    "print(json.dumps({n: json.load(u.urlopen(url + n))['total_cents'] for n in sys.argv[1:]}))"
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
        got = await sandbox.exec(["python3", "-c", TOTALS, *ANSWERS])
        totals = json.loads(got.stdout_text) if got.ok else {}
        wrong = [u for u, answer in ANSWERS.items() if totals.get(u) != answer["total_cents"]]
        yield {"score": 0.0 if wrong else 1.0, "info": {"wrong": wrong, "fork": sandbox.id}}

    return env


FIX_TOTALS = Task(
    env="quickstart",
    id="fix_totals",
    verifier=Task(
        env="quickstart", id="totals_are_right", runtime_config=RuntimeConfig(image="quickstart")
    ),
)
