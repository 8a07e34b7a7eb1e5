#!/bin/bash
# Reward 1 when /app/revenue.txt holds every customer's total, computed here from the database.
mkdir -p /logs/verifier
expected=$(mktemp)
for id in $(redis-cli -h db SMEMBERS orders); do
  echo "HMGET order:$id customer cents"
done | redis-cli -h db | paste - - | awk '{ t[$1] += $2 } END { for (c in t) print c, t[c] }' | sort > "$expected"
if [ "$(wc -l < "$expected")" -gt 0 ] && diff -q "$expected" /app/revenue.txt >/dev/null 2>&1; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
