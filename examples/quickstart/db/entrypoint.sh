#!/bin/bash
# Start Redis with its data in /data (the `dbdata` volume), append-only so every write
# is on disk (a snapshot of the volume holds every acknowledged write).
#
# First start on an empty volume: load /seed/seed.redis into a private Redis that listens
# only on a unix socket, shut it down cleanly (the AOF is fsynced), mark the volume as
# seeded, and only then start the real server. So the service never answers PING before
# its data is complete, and PID 1 is redis-server itself (it handles SIGTERM).
set -euo pipefail

DATA=/data
ARGS=(--dir "$DATA" --appendonly yes --appendfsync always --save ""
      --daemonize no --logfile "" --protected-mode no)

if [ ! -e "$DATA/.seeded" ]; then
  sock=/tmp/seed-redis.sock
  redis-server "${ARGS[@]}" --port 0 --unixsocket "$sock" --unixsocketperm 700 &
  seed_pid=$!
  for _ in $(seq 1 200); do
    redis-cli -s "$sock" ping 2>/dev/null | grep -q PONG && break
    sleep 0.05
  done
  # One command per line; comment lines are stripped. redis-cli prints server errors
  # as "ERR ..." / "WRONGTYPE ..." lines: any of them fails the seeding.
  out=$(grep -v '^[[:space:]]*\(#\|$\)' /seed/seed.redis | redis-cli -s "$sock")
  if grep -qE '^(ERR|WRONGTYPE|\(error\))' <<<"$out"; then
    echo "db-entrypoint: seeding failed:" >&2
    grep -E '^(ERR|WRONGTYPE|\(error\))' <<<"$out" >&2
    exit 1
  fi
  redis-cli -s "$sock" shutdown >/dev/null 2>&1 || true
  wait "$seed_pid" || true
  touch "$DATA/.seeded"
  echo "db-entrypoint: seeded $(grep -c '^HSET order:' /seed/seed.redis) orders into $DATA" >&2
fi

exec redis-server "${ARGS[@]}" --bind 0.0.0.0 --port 6379 "$@"
