"""Protection 3: special files in uploads are refused with the exact message; nothing is written."""

from __future__ import annotations

import io
import posixpath
import tarfile

import pytest

from denv import SpecialFileError, messages
from denv.conformance import DenvSandbox

pytestmark = pytest.mark.denv_conformance

R = messages.SPECIAL_FILE_REASONS


def _entry(kind: str) -> tuple[tarfile.TarInfo, bytes | None]:
    if kind == "fifo":
        info = tarfile.TarInfo("pipe")
        info.type = tarfile.FIFOTYPE
        return info, None
    if kind == "device":
        info = tarfile.TarInfo("null")
        info.type = tarfile.CHRTYPE
        info.devmajor, info.devminor = 1, 3
        return info, None
    if kind == "setid":
        info = tarfile.TarInfo("tool")
        info.mode = 0o4755
        info.size = 2
        return info, b"#!"
    if kind == "symlink_escapes":
        info = tarfile.TarInfo("link")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        return info, None
    if kind == "absolute":
        info = tarfile.TarInfo("/abs.txt")
        info.size = 1
        return info, b"x"
    if kind == "climbs":
        info = tarfile.TarInfo("../up.txt")
        info.size = 1
        return info, b"x"
    raise AssertionError(kind)


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("fifo", "pipe"),
        ("device", "null"),
        ("setid", "tool"),
        ("symlink_escapes", "link"),
        ("absolute", "/abs.txt"),
        ("climbs", "../up.txt"),
    ],
)
def test_special_file_is_refused(denv_sandbox: DenvSandbox, kind: str, name: str) -> None:
    sb = denv_sandbox
    dest = posixpath.dirname(sb.scratch("x"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        ok = tarfile.TarInfo("ok.txt")
        ok.size = 2
        tar.addfile(ok, io.BytesIO(b"ok"))
        info, data = _entry(kind)
        tar.addfile(info, io.BytesIO(data) if data is not None else None)
    with pytest.raises(SpecialFileError) as caught:
        sb.client.put_files(sb.id, dest, buf.getvalue())
    assert caught.value.message == messages.special_file(name, R[kind])
    assert caught.value.status == 422
    # The archive is checked whole before anything is written.
    assert sb.client.exec(sb.id, ["test", "-e", f"{dest}/ok.txt"]).exit_code != 0
