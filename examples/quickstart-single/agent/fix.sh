#!/bin/bash
# The scripted agent of quickstart-single: runs INSIDE the app's container (or sandbox) as the
# agent user (uid 1000), e.g.  denv exec quickstart-single/alpha -- bash -s < agent/fix.sh
# The bug: orders.py adds each order's unit price instead of qty x unit price.
set -euo pipefail
f=/workspace/app/orders.py
sed -i 's/total_cents += int(order\["price_cents"\])/total_cents += int(order["qty"]) * int(order["price_cents"])/' "$f"
grep -q 'int(order\["qty"\]) \* int(order\["price_cents"\])' "$f" || { echo "fix.sh: patch did not apply" >&2; exit 1; }
python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' "$f"
# The server re-imports orders.py per request: the fix is live now. Patient: on a loaded host
# (many episodes on two cores) one request has taken longer than 5 s.
python3 -c 'import json, urllib.request as u; print(json.loads(u.urlopen("http://127.0.0.1:8080/total?user=alice", timeout=30).read()))'
echo "fix.sh: patched $f as $(id -un) (uid $(id -u))"
