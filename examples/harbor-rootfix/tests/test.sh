#!/bin/bash
# Installs its own tools at test time (as Terminal-Bench tasks do), then checks the agent's work:
# the port fixed in the root-owned file (still root's), jq installed, the answer written with it.
mkdir -p /logs/verifier
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bc >/dev/null
port=$(sed -n 's/^port = //p' /app/config/app.ini)
if [ "$(echo "$port - 8000" | bc)" = 80 ] \
  && [ "$(stat -c %u /app/config/app.ini)" = 0 ] \
  && command -v jq >/dev/null \
  && [ "$(jq .port /app/answer.json 2>/dev/null)" = 8080 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
