"""The WebSocket routes (exec stream, connect) against a tiny local server on loopback."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
from collections.abc import Iterator

import pytest
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.sync.server import ServerConnection, serve

import denv

TOKEN = "t0k"


def exit_frame(code: int) -> str:
    result = {
        "exit_code": code,
        "stdout": "",
        "stderr": "",
        "encoding": "utf8",
        "timed_out": False,
        "truncated": False,
        "duration_ms": 1,
    }
    return json.dumps({"type": "exit", "result": result})


def exec_stream(conn: ServerConnection) -> None:
    start = json.loads(conn.recv())
    assert start["type"] == "start"
    cmd = start["exec"].get("cmd", [])
    if cmd == ["fail"]:
        msg = denv.messages.agent_root("app")
        conn.send(json.dumps({"type": "error", "error": {"code": "agent_root", "message": msg}}))
        return
    if cmd == ["drop"]:
        conn.close(1011, json.dumps({"error": {"code": "docker", "message": "engine gone"}}))
        return
    if cmd == ["stderr"]:
        conn.send(json.dumps({"type": "stderr", "data": base64.b64encode(b"warn\n").decode()}))
        conn.send(exit_frame(3))
        return
    # cat: echo stdin back as stdout, then exit 0
    while True:
        frame = json.loads(conn.recv())
        if frame["type"] == "stdin_end":
            break
        conn.send(json.dumps({"type": "stdout", "data": frame["data"]}))
    conn.send(exit_frame(0))


def tunnel(conn: ServerConnection) -> None:
    assert conn.request is not None
    if "port=0" in conn.request.path:
        return
    for message in conn:
        assert isinstance(message, bytes)
        conn.send(message.upper())


def handler(conn: ServerConnection) -> None:
    assert conn.request is not None
    path = conn.request.path
    if path.startswith("/v1/environments/shop/alpha/exec/stream"):
        exec_stream(conn)
    elif path.startswith("/v1/environments/shop/alpha/connect"):
        tunnel(conn)


def check_auth(conn: ServerConnection, request: Request) -> Response | None:
    if request.headers.get("Authorization") != f"Bearer {TOKEN}":
        body = json.dumps({"error": {"code": "unauthorized", "message": "no token"}}).encode()
        return Response(401, "Unauthorized", Headers([("Content-Type", "application/json")]), body)
    if "/environments/shop/gone/" in request.path:
        body = json.dumps(
            {"error": {"code": "not_found", "message": "no environment shop/gone"}}
        ).encode()
        return Response(404, "Not Found", Headers([("Content-Type", "application/json")]), body)
    return None


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve(handler, "127.0.0.1", 0, process_request=check_auth, max_size=None) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        host, port = server.socket.getsockname()[:2]
        yield f"http://{host}:{port}"
        server.shutdown()


def test_exec_stream_round_trips_stdin(url: str) -> None:
    payload = bytes(range(256)) * 1024
    seen: list[bytes] = []
    with denv.Client(url, TOKEN) as client:
        res = client.exec_stream(
            "shop/alpha",
            ["cat"],
            stdin=iter([payload[:1000], payload[1000:]]),
            on_stdout=seen.append,
        )
    assert res.exit_code == 0
    assert res.stdout == payload
    assert b"".join(seen) == payload
    assert all(len(chunk) <= 64 * 1024 for chunk in seen)


def test_large_exec_goes_over_the_stream(url: str) -> None:
    payload = b"\x00" * (2 * 1024 * 1024)
    with denv.Client(url, TOKEN) as client:
        res = client.exec("shop/alpha", ["cat"], stdin=payload)
    assert res.stdout == payload


def test_exec_stream_stderr_and_exit_code(url: str) -> None:
    with denv.Client(url, TOKEN) as client:
        res = client.exec_stream("shop/alpha", ["stderr"])
    assert (res.exit_code, res.stdout, res.stderr) == (3, b"", b"warn\n")


def test_exec_stream_error_frame(url: str) -> None:
    with (
        denv.Client(url, TOKEN) as client,
        pytest.raises(denv.AgentRootError, match="protection 1"),
    ):
        client.exec_stream("shop/alpha", ["fail"])


def test_exec_stream_close_reason(url: str) -> None:
    with denv.Client(url, TOKEN) as client, pytest.raises(denv.DockerError, match="engine gone"):
        client.exec_stream("shop/alpha", ["drop"])


def test_handshake_errors_are_mapped(url: str) -> None:
    with denv.Client(url, "wrong") as client, pytest.raises(denv.UnauthorizedError):
        client.exec_stream("shop/alpha", ["cat"])
    with denv.Client(url, TOKEN) as client, pytest.raises(denv.NotFoundError, match="shop/gone"):
        client.exec_stream("shop/gone", ["cat"])


def test_unreachable_stream() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with (
        denv.Client(f"http://127.0.0.1:{port}", TOKEN) as client,
        pytest.raises(denv.DenvConnectionError),
    ):
        client.exec_stream("shop/alpha", ["cat"])


def test_tunnel(url: str) -> None:
    with denv.Client(url, TOKEN) as client, client.connect("shop/alpha", "web", 8080) as t:
        t.send(b"hello")
        assert t.recv(timeout=5) == b"HELLO"
    with denv.Client(url, TOKEN) as client, client.connect("shop/alpha", "web", 0) as t:
        assert t.recv(timeout=5) == b""


def test_port_forward(url: str) -> None:
    with denv.Client(url, TOKEN) as client, client.port_forward("shop/alpha", "web", 8080) as pf:
        assert pf.host == "127.0.0.1" and pf.port > 0
        for _ in range(2):
            with socket.create_connection((pf.host, pf.port), timeout=5) as s:
                s.sendall(b"ping")
                assert s.recv(16) == b"PING"


async def test_async_exec_stream(url: str) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        yield b"abc"
        yield b"def"

    got: list[bytes] = []

    async def on_stdout(chunk: bytes) -> None:
        got.append(chunk)

    async with denv.AsyncClient(url, TOKEN) as client:
        res = await client.exec_stream("shop/alpha", ["cat"], stdin=chunks(), on_stdout=on_stdout)
        assert res.stdout == b"abcdef" == b"".join(got)
        big = await client.exec("shop/alpha", ["cat"], stdin=b"z" * (1024 * 1024))
        assert big.stdout == b"z" * (1024 * 1024)
        with pytest.raises(denv.AgentRootError):
            await client.exec_stream("shop/alpha", ["fail"])
        with pytest.raises(denv.DockerError):
            await client.exec_stream("shop/alpha", ["drop"])
    async with denv.AsyncClient(url, "bad") as client:
        with pytest.raises(denv.UnauthorizedError):
            await client.exec_stream("shop/alpha", ["cat"])


async def test_async_tunnel_and_port_forward(url: str) -> None:
    async with denv.AsyncClient(url, TOKEN) as client:
        async with await client.connect("shop/alpha", "web", 80) as t:
            await t.send(b"abc")
            assert await t.recv() == b"ABC"
        async with await client.port_forward("shop/alpha", "web", 80) as pf:
            reader, writer = await asyncio.open_connection(pf.host, pf.port)
            writer.write(b"xyz")
            await writer.drain()
            assert await asyncio.wait_for(reader.read(16), 5) == b"XYZ"
            writer.close()
            await writer.wait_closed()


def test_failing_stdin_ends_the_stream(url: str) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"first"
        raise OSError("the disk went away")

    with denv.Client(url, TOKEN) as client, pytest.raises(OSError, match="disk went away"):
        client.exec_stream("shop/alpha", ["cat"], stdin=chunks())


async def test_async_failing_stdin_ends_the_stream(url: str) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        yield b"first"
        raise OSError("the disk went away")

    async with denv.AsyncClient(url, TOKEN) as client:
        with pytest.raises(OSError, match="disk went away"):
            await client.exec_stream("shop/alpha", ["cat"], stdin=chunks())
