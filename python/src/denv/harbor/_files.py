"""Folder uploads and downloads as tar archives (the files API's format)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path, PurePosixPath


def tar_dir(folder: Path) -> bytes:
    """A tar of a folder's contents (paths relative to it), regular files and folders."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for root, dirs, files in os.walk(folder):
            dirs.sort()
            rel_root = Path(root).relative_to(folder)
            for name in dirs:
                info = tarfile.TarInfo(str(rel_root / name).removeprefix("./"))
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            for name in sorted(files):
                path = Path(root) / name
                if not path.is_file() or path.is_symlink():
                    continue
                info = tarfile.TarInfo(str(rel_root / name).removeprefix("./"))
                info.size = path.stat().st_size
                info.mode = path.stat().st_mode & 0o777
                with path.open("rb") as f:
                    tar.addfile(info, f)
    return buf.getvalue()


def extract_contents(archive: bytes, target: Path) -> None:
    """Extracts a download (the folder under its base name) into ``target``'s contents."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = []
        for member in tar.getmembers():
            parts = PurePosixPath(member.name).parts
            if len(parts) <= 1:
                continue
            member.name = str(PurePosixPath(*parts[1:]))
            members.append(member)
        tar.extractall(target, members=members, filter="data")
