"""verifiers' Harbor taskset over task folders `denv export harbor` wrote; prints one JSON object.

Run in the tools image's /opt/vf (verifiers 0.4.0 with the Harbor its `harbor` extra pins,
0.24.0) by packages/cli/src/e2e/trainers.test.ts, in the folder holding the task folders, with
SCRIPT the ``vf-eval harbor`` block of docs/blog/verifiers.md (section 2), EXPORTED the task as
`denv export harbor` wrote it and the repository's python/tests/integration at INTEGRATION:

    /opt/vf/bin/python vf_harbor_taskset.py DATASET SCRIPT EXPORTED INTEGRATION

Runs SCRIPT (two rollouts of the task DATASET) with a scripted model on loopback at
``$MODEL_URL`` (integration/scripted_model.py): the first rollout to ask gets ``solve``, which
calls the ``bash`` tool once with SOLVE, the other ``idle``, which answers at once. Reports what
verifiers' own taskset makes of the cached dataset (its parsing with Harbor's models), each
rollout of the run (from its traces.jsonl: the policy it got, ok, its rewards, its errors), the
tool results the model was sent back, and what verifiers' compose runtime says to EXPORTED as it
is (no-network).
"""

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from verifiers.v1.runtimes import DockerConfig
from verifiers.v1.tasksets.harbor.compose import compose_services
from verifiers.v1.tasksets.harbor.taskset import (
    HarborConfig,
    HarborTask,
    HarborTaskset,
    parse_task,
)
from verifiers.v1.utils.compile import resolve_runtime_config

sys.path.insert(0, sys.argv[4])
import scripted_model

# The solving agent's one command: the sum of the prices the `prices` service serves. (No probe
# of the outside: tests send traffic only to loopback and to what they made.)
SOLVE = """python3 - <<'PY'
import json, urllib.request
with urllib.request.urlopen("http://prices:8080/prices.json", timeout=10) as resp:
    total = sum(item["cents"] for item in json.load(resp))
with open("/workspace/total.txt", "w") as out:
    out.write(f"{total}\\n")
print("total", total)
PY
"""


def errors(node: object) -> list[dict[str, str]]:
    """Every error recorded in a trace (the episode's and its agents'), outermost first."""
    found: list[dict[str, str]] = []
    if isinstance(node, dict):
        for e in node.get("errors") or []:
            found.append({"type": e["type"], "message": e["message"]})
        for key, value in node.items():
            if key != "errors":
                found.extend(errors(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(errors(item))
    return found


async def refusal(task: HarborTask) -> str:
    """What verifiers' compose runtime (local Docker) says to ``task``."""
    config = resolve_runtime_config(DockerConfig(type="docker"), task)
    try:
        async with compose_services(config, task, trust_compose=True):
            return "started"
    except ValueError as e:
        return str(e)


scripted_model.FIX = SOLVE
with scripted_model.ScriptedModel(["solve", "idle"]) as model:
    done = subprocess.run(
        ["sh", "-c", f"set -e\n{Path(sys.argv[2]).read_text()}"],
        env={**os.environ, "MODEL_URL": model.base_url},
        stdout=sys.stderr,
    )
policies = {session: model.policies[i] for session, i in model.sessions.items()}
traces = [
    json.loads(line)
    for path in Path("outputs").rglob("traces.jsonl")
    for line in path.read_text().splitlines()
]
tasks = list(HarborTaskset(HarborConfig(dataset=sys.argv[1])).load())
exported = HarborTask(parse_task(Path(sys.argv[3]).resolve(), 0, HarborConfig()))
fields = {"name", "prompt", "image", "upload_environment", "network_allow", "verifier"}
print(
    json.dumps(
        {
            "tasks": [t.data.model_dump(mode="json", include=fields) for t in tasks],
            "exit_code": done.returncode,
            "rollouts": sorted(
                (
                    {
                        "policy": policies.get(t["traces"][0]["id"]) if t["traces"] else None,
                        "ok": t["ok"],
                        "rewards": [r.get("rewards") for r in t["traces"]],
                        "errors": errors(t),
                    }
                    for t in traces
                ),
                key=lambda r: str(r["policy"]),
            ),
            "tool_results": model.tool_results,
            "exported": asyncio.run(refusal(exported)),
        }
    )
)
