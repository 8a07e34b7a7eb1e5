#!/bin/bash
# Reward 1 when /app/revenue.txt holds every customer's total. The expected totals are those of
# the data the database was loaded with (tests/expected.txt), not of what the database holds
# now: the agent, who can write to the database, cannot make its answer right by changing it.
mkdir -p /logs/verifier
if diff -q /tests/expected.txt /app/revenue.txt >/dev/null 2>&1; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
