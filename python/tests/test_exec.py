import base64

import pytest

import denv
from denv._exec import decode_exec_response, exec_request, request_size


def test_request_argv_and_options() -> None:
    body = exec_request(
        ["ls", "-l"],
        service="db",
        user="1000",
        cwd="/tmp",
        env={"A": "1"},
        stdin=b"\x00\xff",
        timeout=2.5,
        tty=False,
        output_limit=100,
    )
    assert body == {
        "cmd": ["ls", "-l"],
        "service": "db",
        "user": "1000",
        "cwd": "/tmp",
        "env": {"A": "1"},
        "stdin": base64.b64encode(b"\x00\xff").decode(),
        "timeout": 2.5,
        "tty": False,
        "output_limit": 100,
    }


def test_request_shell_and_empty_stdin() -> None:
    assert exec_request(shell="echo hi", stdin=b"") == {"shell": "echo hi", "stdin": ""}


@pytest.mark.parametrize(
    ("cmd", "shell", "message"),
    [
        (None, None, "exactly one of 'cmd'"),
        (["ls"], "ls", "exactly one of 'cmd'"),
        ("ls -l", None, "argv list"),
        ([], None, "'cmd' is empty"),
    ],
)
def test_request_refuses(cmd: list[str] | str | None, shell: str | None, message: str) -> None:
    with pytest.raises(denv.InvalidRequestError, match=message):
        exec_request(cmd, shell=shell)  # type: ignore[arg-type]


def test_request_refuses_non_positive_timeout() -> None:
    with pytest.raises(denv.InvalidRequestError, match="timeout"):
        exec_request(["x"], timeout=0)


def test_decode_utf8() -> None:
    res = decode_exec_response(
        {
            "exit_code": 3,
            "stdout": "café\n",
            "stderr": "oops",
            "encoding": "utf8",
            "timed_out": False,
            "truncated": True,
            "duration_ms": 12,
        }
    )
    assert res == denv.ExecResult(3, "café\n".encode(), b"oops", False, True, 12)
    assert not res.ok
    assert res.stdout_text == "café\n"


def test_decode_base64_applies_to_both_streams() -> None:
    res = decode_exec_response(
        {
            "exit_code": 0,
            "stdout": base64.b64encode(b"\xff\x00").decode(),
            "stderr": base64.b64encode(b"plain").decode(),
            "encoding": "base64",
            "timed_out": False,
            "truncated": False,
            "duration_ms": 1,
        }
    )
    assert res.stdout == b"\xff\x00"
    assert res.stderr == b"plain"
    assert res.stdout_text == "\ufffd\x00"
    assert res.ok


def test_decode_timeout() -> None:
    res = decode_exec_response(
        {
            "exit_code": 124,
            "stdout": "",
            "stderr": "",
            "encoding": "utf8",
            "timed_out": True,
            "truncated": False,
            "duration_ms": 1000,
        }
    )
    assert res.timed_out
    assert not res.ok


def test_decode_refuses_bad_base64_and_unknown_encoding() -> None:
    with pytest.raises(denv.InvalidRequestError, match="base64"):
        decode_exec_response({"exit_code": 0, "stdout": "!!", "encoding": "base64"})
    with pytest.raises(denv.InvalidRequestError, match="encoding"):
        decode_exec_response({"exit_code": 0, "encoding": "latin1"})


def test_request_size_grows_with_stdin() -> None:
    small = request_size(exec_request(["cat"], stdin=b"x"))
    big = request_size(exec_request(["cat"], stdin=b"x" * 1_000_000))
    assert small < 2048 < 1_000_000 < big
