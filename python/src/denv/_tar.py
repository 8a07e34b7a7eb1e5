"""Tar archives: a project folder for a deploy, one file for an upload, a download's head.

A deploy's archive comes with the folder's content hash (:func:`source_hash`).
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ._errors import InvalidRequestError

#: Names never sent with a deploy: version control and caches of local tools.
EXCLUDED_NAMES = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".denv",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".DS_Store",
    }
)

CHUNK = 1024 * 1024


@dataclass(frozen=True)
class _Entry:
    rel: str
    path: Path | None
    kind: str  # "dir" | "file" | "symlink"
    mode: int
    data: bytes | None = None
    target: str = ""


def _walk(root: Path, extra: Mapping[str, bytes]) -> list[_Entry]:
    if not root.is_dir():
        raise InvalidRequestError(f"{root} is not a folder: deploy the folder of the compose file")
    entries: list[_Entry] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_NAMES)
        base = Path(dirpath)
        rel_base = base.relative_to(root).as_posix()
        for name in sorted(dirnames + filenames):
            if name in EXCLUDED_NAMES or name.endswith(".pyc"):
                continue
            path = base / name
            rel = name if rel_base == "." else f"{rel_base}/{name}"
            if rel in extra:
                continue
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                entries.append(_Entry(rel, path, "symlink", 0o777, target=os.readlink(path)))
            elif stat.S_ISDIR(st.st_mode):
                entries.append(_Entry(rel, path, "dir", stat.S_IMODE(st.st_mode)))
            elif stat.S_ISREG(st.st_mode):
                entries.append(_Entry(rel, path, "file", stat.S_IMODE(st.st_mode)))
            else:
                raise InvalidRequestError(
                    f"{path} is not a regular file, folder or symlink; "
                    "special files are refused in uploads (protection 3): remove it"
                )
    for rel, data in extra.items():
        entries.append(_Entry(rel, None, "file", 0o644, data=data))
    entries.sort(key=lambda e: e.rel)
    return entries


def _file_digest(entry: _Entry) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    if entry.data is not None:
        h.update(entry.data)
        return len(entry.data), h.hexdigest()
    assert entry.path is not None
    with entry.path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def source_hash(folder: str | os.PathLike[str], extra: Mapping[str, bytes] | None = None) -> str:
    """The content hash of a project folder, as a deploy records it.

    It covers every path, type, permission bits, file content and symlink target (not
    times or owners), so it changes exactly when what a deploy would build changes.

    Args:
        folder: The project folder (the folder of the compose file).
        extra: Files added to the archive (relative path -> content), e.g. a generated
            compose file.

    Returns:
        ``sha256:<hex>``.

    Raises:
        InvalidRequestError: The folder is missing or holds a special file.
    """
    h = hashlib.sha256()
    for e in _walk(Path(folder), extra or {}):
        if e.kind == "file":
            size, digest = _file_digest(e)
            h.update(f"f {e.rel!r} {e.mode:o} {size} {digest}\n".encode())
        elif e.kind == "dir":
            h.update(f"d {e.rel!r} {e.mode:o}\n".encode())
        else:
            h.update(f"l {e.rel!r} {e.target!r}\n".encode())
    return "sha256:" + h.hexdigest()


def write_source_tar(
    folder: str | os.PathLike[str], out: IO[bytes], extra: Mapping[str, bytes] | None = None
) -> None:
    """Writes a project folder as a tar archive (owners anonymised, caches left out).

    Args:
        folder: The project folder.
        out: Where the archive goes.
        extra: Files added to the archive (relative path -> content).

    Raises:
        InvalidRequestError: The folder is missing or holds a special file.
    """
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for e in _walk(Path(folder), extra or {}):
            info = tarfile.TarInfo(e.rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = e.mode
            if e.path is not None:
                info.mtime = int(e.path.lstat().st_mtime)
            if e.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif e.kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = e.target
                tar.addfile(info)
            elif e.data is not None:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
            else:
                assert e.path is not None
                with e.path.open("rb") as f:
                    info.size = os.fstat(f.fileno()).st_size
                    tar.addfile(info, f)


def source_archive(
    folder: str | os.PathLike[str], extra: Mapping[str, bytes] | None = None
) -> IO[bytes]:
    """A project folder as a tar archive in a temporary file (in memory while small).

    Args:
        folder: The project folder.
        extra: Files added to the archive.

    Returns:
        The archive, positioned at its start; close it when done.
    """
    spool = tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024)  # noqa: SIM115
    write_source_tar(folder, spool, extra)
    spool.seek(0)
    return spool


def iter_chunks(f: IO[bytes], size: int = CHUNK) -> Iterator[bytes]:
    """Reads a file in chunks.

    Args:
        f: The file.
        size: Chunk size.

    Yields:
        The chunks, in order.
    """
    while chunk := f.read(size):
        yield chunk


def single_file_tar(name: str, data: bytes, mode: int = 0o644) -> bytes:
    """A tar archive holding one regular file.

    Args:
        name: The entry's name (a base name).
        data: The content.
        mode: Permission bits.

    Returns:
        The archive.
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = mode
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass(frozen=True)
class TarHead:
    """The first entry of a downloaded archive.

    Attributes:
        kind: ``file``, ``dir``, ``symlink`` or ``other``.
        name: The entry's name.
        mode: Its permission bits.
        size: Its size.
        data: Its content, for a regular file.
        linkname: Its target, for a symlink.
    """

    kind: str
    name: str
    mode: int
    size: int
    data: bytes = b""
    linkname: str = ""


def first_entry(archive: bytes) -> TarHead | None:
    """The first entry of a tar archive (its content when it is a regular file).

    Args:
        archive: The archive.

    Returns:
        The entry, or None for an empty archive.

    Raises:
        InvalidRequestError: The bytes are not a tar archive.
    """
    if not any(archive[: tarfile.BLOCKSIZE]):
        return None
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            member = tar.next()
            if member is None:
                return None
            if member.isdir():
                return TarHead("dir", member.name, member.mode, 0)
            if member.issym():
                return TarHead("symlink", member.name, member.mode, 0, linkname=member.linkname)
            if member.isreg():
                f = tar.extractfile(member)
                data = f.read() if f is not None else b""
                return TarHead("file", member.name, member.mode, member.size, data=data)
            return TarHead("other", member.name, member.mode, member.size)
    except tarfile.TarError as exc:
        raise InvalidRequestError(
            f"the files API answered with an invalid tar archive: {exc}"
        ) from exc


def starts_with_directory(head: bytes) -> bool:
    """Whether a (possibly truncated) archive's first entry is a directory.

    Args:
        head: The archive's first bytes (one header block is enough).

    Returns:
        True for a directory entry.
    """
    if len(head) < tarfile.BLOCKSIZE or not any(head[: tarfile.BLOCKSIZE]):
        return False
    try:
        info = tarfile.TarInfo.frombuf(head[: tarfile.BLOCKSIZE], "utf-8", "surrogateescape")
    except tarfile.TarError:
        return False
    if info.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME):
        # A pax or long-name header comes first; look at the entry after it.
        try:
            with tarfile.open(fileobj=io.BytesIO(head), mode="r|") as tar:
                member = tar.next()
                return member is not None and member.isdir()
        except (tarfile.TarError, EOFError, OSError):
            return False
    return info.isdir()
