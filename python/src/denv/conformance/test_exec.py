"""Exec semantics: exit codes, output streams, argv and shell forms, cwd, env."""

from __future__ import annotations

import pytest

from denv.conformance import DenvSandbox

pytestmark = pytest.mark.denv_conformance


def test_exit_codes(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    assert sb.client.exec(sb.id, ["true"]).exit_code == 0
    res = sb.client.exec(sb.id, ["sh", "-c", "exit 3"])
    assert res.exit_code == 3
    assert not res.ok
    assert not res.timed_out


def test_stdout_and_stderr_are_separate(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(sb.id, ["sh", "-c", "echo out; echo err >&2"])
    assert res.stdout == b"out\n"
    assert res.stderr == b"err\n"
    assert res.duration_ms >= 0


def test_shell_form(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(sb.id, shell="echo $((6 * 7)) | tr -d '\\n'")
    assert res.stdout == b"42"


def test_argv_is_not_split_by_a_shell(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(sb.id, ["printf", "%s|", "a b", "$HOME", "'q'"])
    assert res.stdout == b"a b|$HOME|'q'|"


def test_binary_output_round_trips(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(sb.id, ["printf", "\\377\\000\\001abc\\303\\050"])
    assert res.stdout == b"\xff\x00\x01abc\xc3\x28"


def test_utf8_output(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    text = "café résumé €100 中文 😀"
    octal = "".join(f"\\{b:03o}" for b in text.encode())
    res = sb.client.exec(sb.id, ["printf", octal])
    assert res.stdout.decode("utf-8") == text


def test_missing_program_is_127(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(sb.id, ["denv-conformance-no-such-program"])
    assert res.exit_code == 127


def test_not_executable_is_126(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(sb.id, ["/etc/passwd"])
    assert res.exit_code == 126


def test_default_cwd_is_the_agent_workdir(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    assert sb.client.exec(sb.id, ["pwd"]).stdout_text.strip() == sb.workdir


def test_cwd(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    assert sb.client.exec(sb.id, ["pwd"], cwd="/tmp").stdout_text.strip() == "/tmp"


def test_env(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(
        sb.id, ["sh", "-c", 'printf "%s|%s" "$A" "$B"'], env={"A": "x y", "B": "$HOME"}
    )
    assert res.stdout == b"x y|$HOME"


def test_output_limit_truncates(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(sb.id, ["head", "-c", "5000", "/dev/zero"], output_limit=1000)
    assert res.truncated
    assert len(res.stdout) == 1000
    assert res.exit_code == 0


def test_large_argv(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    chunk = "x" * (64 * 1024)
    res = sb.client.exec(sb.id, ["printf", "%s", *([chunk] * 16)])
    assert res.exit_code == 0, res.stderr_text
    assert res.stdout == (chunk * 16).encode()


def test_streaming_route_streams_output(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    seen: list[bytes] = []
    res = sb.client.exec_stream(
        sb.id, ["sh", "-c", "echo one; echo two >&2; exit 5"], on_stdout=seen.append
    )
    assert res.exit_code == 5
    assert res.stdout == b"one\n"
    assert res.stderr == b"two\n"
    assert b"".join(seen) == b"one\n"
