#!/bin/bash
# Reward 1 when /app/motto.txt is what kv serves under /motto, fetched again here from kv.
mkdir -p /logs/verifier
fetch() {
  exec 3<>/dev/tcp/kv/8080 || return 1
  printf 'GET /motto HTTP/1.0\r\nHost: kv\r\n\r\n' >&3
  sed '1,/^\r$/d' <&3
  exec 3<&-
}
expected=$(fetch) || expected=""
if [ -n "$expected" ] && [ "$expected" = "$(cat /app/motto.txt 2>/dev/null)" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
