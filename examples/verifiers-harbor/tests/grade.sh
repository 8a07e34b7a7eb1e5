#!/bin/bash
# The verifier: /submission/workspace/total.txt must hold the sum, in cents, of the prices the
# `prices` service serves now. Writes {"reward": 1.0} or {"reward": 0.0} to
# $REWARD_DIR/reward.json (default /logs/verifier).
set -euo pipefail
dir=${REWARD_DIR:-/logs/verifier}
mkdir -p "$dir"
exec python3 - "$dir" <<'PY'
import json, pathlib, sys, urllib.request

with urllib.request.urlopen("http://prices:8080/prices.json", timeout=10) as resp:
    want = sum(item["cents"] for item in json.load(resp))
try:
    got = int(pathlib.Path("/submission/workspace/total.txt").read_text().strip())
except (OSError, ValueError):
    got = None
reward = 1.0 if got == want else 0.0
print(f"total.txt: want {want}, got {got}: reward {reward}")
(pathlib.Path(sys.argv[1]) / "reward.json").write_text(json.dumps({"reward": reward}) + "\n")
PY
