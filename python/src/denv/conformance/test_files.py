"""Files: tar uploads and downloads, single files, large binary round trips, permissions."""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import tarfile

import pytest

from denv import ForbiddenError, InvalidRequestError, NotFoundError
from denv.conformance import DenvSandbox

pytestmark = pytest.mark.denv_conformance

MIB = 1024 * 1024


def _tar(entries: list[tuple[str, bytes | None, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in entries:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_write_and_read_a_file(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    path = sb.scratch("deep/er/note.txt")
    sb.client.write_file(sb.id, path, "great #content\r\nwith newlines\n")
    assert sb.client.read_file(sb.id, path) == b"great #content\r\nwith newlines\n"
    assert sb.client.exec(sb.id, ["cat", path]).stdout == b"great #content\r\nwith newlines\n"


def test_empty_file(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    path = sb.scratch("empty")
    sb.client.write_file(sb.id, path, b"")
    assert sb.client.read_file(sb.id, path) == b""


def test_overwrite(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    path = sb.scratch("twice")
    sb.client.write_file(sb.id, path, b"first, and longer")
    sb.client.write_file(sb.id, path, b"second")
    assert sb.client.read_file(sb.id, path) == b"second"


def test_large_binary_round_trip(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    data = os.urandom(50 * MIB)
    path = sb.scratch("large.bin")
    sb.client.write_file(sb.id, path, data)
    size = sb.client.exec(sb.id, ["wc", "-c", path]).stdout_text.split()[0]
    assert int(size) == len(data)
    digest = sb.client.exec(sb.id, ["sha256sum", path])
    if digest.exit_code == 0:
        assert digest.stdout_text.split()[0] == hashlib.sha256(data).hexdigest()
    assert sb.client.read_file(sb.id, path) == data
    sb.client.exec(sb.id, ["rm", "-f", path])


def test_put_and_get_a_tree(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    dest = posixpath.dirname(sb.scratch("x"))
    archive = _tar(
        [
            ("tree", None, 0o755),
            ("tree/run.sh", b"#!/bin/sh\necho ran\n", 0o755),
            ("tree/sub", None, 0o750),
            ("tree/sub/data.bin", b"\x00\x01\x02", 0o600),
        ]
    )
    written = sb.client.put_files(sb.id, dest, archive)
    assert written.entries == 4
    assert written.bytes == len(b"#!/bin/sh\necho ran\n") + 3
    assert sb.client.exec(sb.id, [f"{dest}/tree/run.sh"]).stdout == b"ran\n"
    modes = sb.client.exec(
        sb.id, ["stat", "-c", "%a %n", "run.sh", "sub", "sub/data.bin"], cwd=f"{dest}/tree"
    )
    assert modes.stdout_text.split("\n")[:3] == ["755 run.sh", "750 sub", "600 sub/data.bin"]

    got = sb.client.get_files(sb.id, f"{dest}/tree/sub")
    with tarfile.open(fileobj=io.BytesIO(got)) as tar:
        names = sorted(m.name.rstrip("/") for m in tar.getmembers())
        assert names == ["sub", "sub/data.bin"]
        member = tar.extractfile("sub/data.bin")
        assert member is not None
        assert member.read() == b"\x00\x01\x02"


def test_files_belong_to_the_agent_user(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    path = sb.scratch("owned")
    sb.client.write_file(sb.id, path, b"x", mode=0o640)
    uid = sb.client.exec(sb.id, ["id", "-u"]).stdout_text.strip()
    stat = sb.client.exec(sb.id, ["stat", "-c", "%u %a", path]).stdout_text.strip()
    assert stat == f"{uid} 640"


def test_missing_file_is_not_found(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    with pytest.raises(NotFoundError):
        sb.client.read_file(sb.id, sb.scratch("nonexistent"))


def test_unreadable_file_is_forbidden(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    path = sb.scratch("secret")
    sb.client.write_file(sb.id, path, b"x")
    assert sb.client.exec(sb.id, ["chmod", "000", path]).exit_code == 0
    with pytest.raises(ForbiddenError):
        sb.client.read_file(sb.id, path)


def test_upload_keeps_permission_bits_exactly(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    for mode in (0o000, 0o400, 0o711):
        path = sb.scratch(f"mode-{mode:03o}")
        sb.client.write_file(sb.id, path, b"x", mode=mode)
        got = sb.client.exec(sb.id, ["stat", "-c", "%a", path]).stdout_text.strip()
        assert int(got, 8) == mode, f"uploaded with mode {mode:03o}, got {got}"


def test_unwritable_folder_is_forbidden(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    with pytest.raises(ForbiddenError):
        sb.client.write_file(sb.id, "/etc/denv-conformance-should-not-exist", b"x")


def test_a_folder_is_not_a_file(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    path = sb.scratch("folder/file")
    sb.client.write_file(sb.id, path, b"x")
    with pytest.raises(InvalidRequestError, match="directory"):
        sb.client.read_file(sb.id, posixpath.dirname(path))
