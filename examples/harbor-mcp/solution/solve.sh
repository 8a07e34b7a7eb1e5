#!/bin/bash
# The oracle: one MCP tools/call to the orders server over bash's /dev/tcp, the code out of the
# JSON-RPC answer.
set -euo pipefail
body='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order":"4242"}}}'
exec 3<>/dev/tcp/mcp-server/8000
printf 'POST /mcp HTTP/1.0\r\nHost: mcp-server\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s' "${#body}" "$body" >&3
sed '1,/^\r$/d' <&3 | sed -n 's/.*"text": "\([^"]*\)".*/\1/p' > /app/tracking.txt
