#!/bin/bash
# Redis with append-only data in /data. On the first start (empty volume) it generates and
# loads 20000 orders into a private server on a unix socket, then starts the real one: the
# service never answers PING before its data is complete.
set -euo pipefail
DATA=/data
ARGS=(--dir "$DATA" --appendonly yes --appendfsync everysec --save ""
      --daemonize no --logfile "" --protected-mode no)
if [ ! -e "$DATA/.seeded" ]; then
  sock=/tmp/seed.sock
  redis-server "${ARGS[@]}" --port 0 --unixsocket "$sock" --unixsocketperm 700 &
  pid=$!
  for _ in $(seq 1 200); do redis-cli -s "$sock" ping 2>/dev/null | grep -q PONG && break; sleep 0.05; done
  awk 'BEGIN { srand(7); split("ada bob cyd dee eve fay gus hal", c, " ");
    for (i = 1; i <= 20000; i++) {
      printf "HSET order:%d customer %s cents %d\n", i, c[int(rand() * 8) + 1], int(rand() * 10000) + 1;
      printf "SADD orders %d\n", i } }' | redis-cli -s "$sock" --pipe
  redis-cli -s "$sock" shutdown >/dev/null 2>&1 || true
  wait "$pid" || true
  touch "$DATA/.seeded"
fi
exec redis-server "${ARGS[@]}" --bind 0.0.0.0 --port 6379
