"""Protection 5: egress is denied, the probe says so, and a connection out fails at once."""

from __future__ import annotations

import pytest

from denv.conformance import DenvSandbox

pytestmark = pytest.mark.denv_conformance

# TEST-NET-1 (RFC 5737): no route may cover it; the connect must fail before any packet.
CONNECT_OUT = r"""
if command -v python3 >/dev/null 2>&1; then
  exec python3 -c '
import socket, sys
s = socket.socket()
s.settimeout(10)
try:
    s.connect(("192.0.2.1", 80))
except OSError as e:
    print(e.strerror or e)
    sys.exit(1)
print("connected")
'
elif command -v bash >/dev/null 2>&1; then
  exec bash -c 'exec 3<>/dev/tcp/192.0.2.1/80 && echo connected'
else
  echo "no python3 or bash" >&2; exit 125
fi
"""


def test_probe_finds_no_way_out(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    result = sb.client.probe(sb.id)
    assert result.ok, result.findings
    assert result.findings == []


def test_connect_out_is_unreachable_at_once(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(sb.id, ["sh", "-c", CONNECT_OUT], timeout=30)
    if res.exit_code == 125:
        pytest.skip("the agent service has neither python3 nor bash")
    output = res.stdout_text + res.stderr_text
    assert res.exit_code != 0, output
    assert "Network is unreachable" in output
    assert res.duration_ms < 3000, f"took {res.duration_ms} ms: the connect was not refused at once"
