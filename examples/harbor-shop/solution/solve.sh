#!/bin/bash
# The oracle's answer: sum every order's cents per customer in the database.
set -euo pipefail
psql -h db -U shop -d postgres -At -F ' ' \
  -c "SELECT customer, sum(cents) FROM orders GROUP BY customer ORDER BY customer" > /app/revenue.txt
