import io
import os
import tarfile
from pathlib import Path

import pytest

import denv
from denv._tar import first_entry, single_file_tar, source_archive, starts_with_directory


def project(tmp_path: Path) -> Path:
    (tmp_path / "compose.yaml").write_text("services: {}\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "app" / "run.sh").chmod(0o755)
    os.symlink("run.sh", tmp_path / "app" / "start")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.pyc").write_bytes(b"\x00")
    return tmp_path


def test_hash_is_stable_and_ignores_caches_and_times(tmp_path: Path) -> None:
    root = project(tmp_path)
    first = denv.source_hash(root)
    assert first.startswith("sha256:")
    os.utime(root / "compose.yaml", (0, 0))
    (root / ".git").mkdir()
    (root / ".git" / "index").write_bytes(b"changes all the time")
    assert denv.source_hash(root) == first


@pytest.mark.parametrize("change", ["content", "mode", "new file", "symlink target"])
def test_hash_changes_with_what_a_build_sees(tmp_path: Path, change: str) -> None:
    root = project(tmp_path)
    before = denv.source_hash(root)
    if change == "content":
        (root / "compose.yaml").write_text("services: {a: {}}\n")
    elif change == "mode":
        (root / "app" / "run.sh").chmod(0o644)
    elif change == "new file":
        (root / "app" / "new").write_text("")
    else:
        (root / "app" / "start").unlink()
        os.symlink("other", root / "app" / "start")
    assert denv.source_hash(root) != before


def test_extra_files_count(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert denv.source_hash(root, {"compose.yaml": b"x"}) != denv.source_hash(root)


def test_archive_has_the_tree_without_owners(tmp_path: Path) -> None:
    root = project(tmp_path)
    with source_archive(root, {"gen.yaml": b"g"}) as f, tarfile.open(fileobj=f) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["app", "app/run.sh", "app/start", "compose.yaml", "gen.yaml"]
    assert members["app/start"].issym() and members["app/start"].linkname == "run.sh"
    assert members["app/run.sh"].mode == 0o755
    assert all(m.uid == 0 and m.gid == 0 and m.uname == "" for m in members.values())


def test_special_files_in_the_folder_are_refused(tmp_path: Path) -> None:
    root = project(tmp_path)
    os.mkfifo(root / "pipe")
    with pytest.raises(denv.InvalidRequestError, match="protection 3"):
        denv.source_hash(root)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(denv.InvalidRequestError, match="not a folder"):
        denv.source_hash(tmp_path / "nope")


def test_first_entry_kinds() -> None:
    head = first_entry(single_file_tar("a.txt", b"abc", 0o600))
    assert head is not None
    assert (head.kind, head.name, head.data, head.mode) == ("file", "a.txt", b"abc", 0o600)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("d" * 120)  # a long name: a pax header comes first
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    data = buf.getvalue()
    head = first_entry(data)
    assert head is not None and head.kind == "dir"
    assert starts_with_directory(data[:4096])
    assert not starts_with_directory(single_file_tar("f", b"x" * 5000)[:1024])
    assert first_entry(b"\x00" * 1024) is None
    with pytest.raises(denv.InvalidRequestError):
        first_entry(b"not a tar archive" * 64)
