#!/bin/bash
# Reward 1 when /app/tracking.txt holds the code the MCP server gives for order 4242.
mkdir -p /logs/verifier
if [ "$(cat /app/tracking.txt 2>/dev/null)" = "TRK-7F3A-0042" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
