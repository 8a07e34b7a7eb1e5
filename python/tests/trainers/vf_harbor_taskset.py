"""verifiers' Harbor taskset over a task folder `denv export harbor` wrote; prints one JSON object.

Run in the tools image's /opt/vf (verifiers 0.4.0 with the Harbor its `harbor` extra pins,
0.24.0) by packages/cli/src/e2e/trainers.test.ts, after the commands of docs/blog/verifiers.md
(section 2) put the task in Harbor's cache and ran ``vf-eval harbor`` over it, in the same
folder:

    /opt/vf/bin/python vf_harbor_taskset.py DATASET

Reports what verifiers' own taskset makes of the cached dataset (its parsing with Harbor's
models) and each rollout of the run in ./outputs (from its traces.jsonl): ok, and its errors.
"""

import json
import sys
from pathlib import Path

from verifiers.v1.tasksets.harbor.taskset import HarborConfig, HarborTaskset


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


tasks = list(HarborTaskset(HarborConfig(dataset=sys.argv[1])).load())
fields = {"name", "prompt", "image", "upload_environment", "network_allow", "verifier"}
traces = [
    json.loads(line)
    for path in Path("outputs").rglob("traces.jsonl")
    for line in path.read_text().splitlines()
]
print(
    json.dumps(
        {
            "tasks": [t.data.model_dump(mode="json", include=fields) for t in tasks],
            "rollouts": [{"ok": t["ok"], "errors": errors(t)} for t in traces],
        }
    )
)
