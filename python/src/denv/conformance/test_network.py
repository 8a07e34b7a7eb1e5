"""Tunnels to a service port (connect, port_forward) and service logs."""

from __future__ import annotations

import contextlib
import random
import socket
import time
from collections.abc import Iterator

import pytest

from denv import DenvError, Logs
from denv.conformance import DenvSandbox

pytestmark = pytest.mark.denv_conformance

ECHO_SERVER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen()
while True:
    c, _ = s.accept()
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()
"""

LISTENING = """
import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
"""


@pytest.fixture(scope="module")
def echo_port(denv_sandbox: DenvSandbox) -> Iterator[int]:
    """An echo server on a port of the agent service, started as the agent."""
    sb = denv_sandbox
    port = random.randrange(20000, 30000)
    started = sb.client.exec(
        sb.id,
        [
            "sh",
            "-c",
            'python3 -c "$1" "$2" >/dev/null 2>&1 & echo $!',
            "sh",
            ECHO_SERVER,
            str(port),
        ],
    )
    if started.exit_code != 0 or not started.stdout_text.strip().isdigit():
        pytest.skip(f"cannot start an echo server in the agent service: {started.stderr_text}")
    pid = started.stdout_text.strip()
    deadline = time.monotonic() + 10
    while sb.client.exec(sb.id, ["python3", "-c", LISTENING, str(port)]).exit_code != 0:
        if time.monotonic() > deadline:
            pytest.fail("the echo server did not start listening")
        time.sleep(0.2)
    try:
        yield port
    finally:
        sb.client.exec(sb.id, ["kill", pid])


def test_connect(denv_sandbox: DenvSandbox, echo_port: int) -> None:
    sb = denv_sandbox
    with sb.client.connect(sb.id, sb.agent_service, echo_port) as tunnel:
        tunnel.send(b"ping\n")
        got = b""
        while len(got) < 5:
            chunk = tunnel.recv(timeout=10)
            assert chunk, "the tunnel closed before the echo"
            got += chunk
    assert got == b"ping\n"


def test_port_forward(denv_sandbox: DenvSandbox, echo_port: int) -> None:
    sb = denv_sandbox
    payload = bytes(range(256)) * 512
    with sb.client.port_forward(sb.id, sb.agent_service, echo_port) as forward:
        for _ in range(2):
            with socket.create_connection((forward.host, forward.port), timeout=10) as s:
                s.sendall(payload)
                got = b""
                while len(got) < len(payload):
                    chunk = s.recv(65536)
                    assert chunk, "the forwarded connection closed before the echo"
                    got += chunk
            assert got == payload


def test_connect_to_a_closed_port_is_an_error(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    with pytest.raises(DenvError):  # noqa: PT012 - the error may come at connect or at recv
        tunnel = sb.client.connect(sb.id, sb.agent_service, 1)
        with contextlib.closing(tunnel):
            tunnel.send(b"x")
            tunnel.recv(timeout=15)


def test_logs(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    for service in sb.environment.service_names:
        logs = sb.client.logs(sb.id, service=service, tail=10)
        assert isinstance(logs, Logs)
        assert isinstance(logs.stdout, str)
        assert isinstance(logs.stderr, str)
