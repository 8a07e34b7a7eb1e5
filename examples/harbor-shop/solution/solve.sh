#!/bin/bash
# The oracle's answer: sum every order's cents per customer from the database.
set -euo pipefail
redis-cli -h db --scan --pattern 'order:*' | while read -r key; do
  echo "HMGET $key customer cents"
done | redis-cli -h db | paste - - | awk '{ t[$1] += $2 } END { for (c in t) print c, t[c] }' | sort > /app/revenue.txt
