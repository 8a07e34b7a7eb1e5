#!/bin/bash
# The oracle's answer, as root: fix the root-owned file, install jq, write the answer with it.
set -euo pipefail
sed -i 's/^port = .*/port = 8080/' /app/config/app.ini
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends jq >/dev/null
jq -n '{port: 8080}' > /app/answer.json
