#!/bin/bash
# The oracle: GET /motto from kv over bash's /dev/tcp, the body after the headers.
set -euo pipefail
exec 3<>/dev/tcp/kv/8080
printf 'GET /motto HTTP/1.0\r\nHost: kv\r\n\r\n' >&3
sed '1,/^\r$/d' <&3 > /app/motto.txt
