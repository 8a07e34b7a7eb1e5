"""Standard input: text, binary with NULs, empty, and large (streamed)."""

from __future__ import annotations

import hashlib

import pytest

from denv.conformance import DenvSandbox

pytestmark = pytest.mark.denv_conformance

MIB = 1024 * 1024


def test_text(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    text = "$HOME `whoami` 'single' \"double\" \\backslash\nnewline\n"
    res = sb.client.exec(sb.id, ["cat"], stdin=text)
    assert res.stdout_text == text


def test_binary_with_nuls(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    payload = bytes(range(256)) * 16 + b"\x00\x00\xc3\x28"
    res = sb.client.exec(sb.id, ["cat"], stdin=payload)
    assert res.exit_code == 0, res.stderr_text
    assert res.stdout == payload


def test_empty_stdin_is_eof(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(sb.id, ["cat"], stdin=b"", timeout=30)
    assert not res.timed_out
    assert res.stdout == b""


def test_large_stdin(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    payload = b"a" * (50 * MIB)
    res = sb.client.exec(sb.id, ["wc", "-c"], stdin=payload, timeout=300)
    assert res.exit_code == 0, res.stderr_text
    assert int(res.stdout_text.split()[0]) == len(payload)


def test_large_binary_stdin_streamed_in_chunks(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    blocks = [bytes([i % 256]) * MIB for i in range(20)]
    digest = hashlib.sha256(b"".join(blocks)).hexdigest()
    res = sb.client.exec_stream(
        sb.id, ["sh", "-c", "sha256sum | cut -d' ' -f1"], stdin=iter(blocks), timeout=300
    )
    if res.exit_code == 127:
        pytest.skip("the image has no sha256sum")
    assert res.stdout_text.strip() == digest
