"""Snapshot and fork: a fork sees the snapshot's data; writes never cross between the two."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator

import pytest

from denv import ConflictError, DenvError, Environment, NotFoundError, Version
from denv.conformance import DenvSandbox

pytestmark = pytest.mark.denv_conformance


@pytest.fixture(scope="module")
def episode(denv_sandbox: DenvSandbox) -> Iterator[tuple[DenvSandbox, str, Version, Environment]]:
    """Writes a marker, snapshots the sandbox and forks the snapshot into a second sandbox."""
    sb = denv_sandbox
    path = sb.scratch("marker.txt")
    sb.client.write_file(sb.id, path, b"before snapshot")
    version = sb.client.snapshot(sb.id)
    fork = sb.client.create_sandbox(
        sb.project, version=version.id, name=f"conformance-{secrets.token_hex(4)}", ttl_sec=1800
    )
    try:
        yield sb, path, version, fork
    finally:
        try:
            sb.client.destroy_sandbox(fork.id)
        except DenvError as exc:
            print(f"could not destroy {fork.id}: {exc}")
        with contextlib.suppress(ConflictError, NotFoundError):
            sb.client.delete_version(version.id)


def test_snapshot_is_a_version_of_the_project(
    episode: tuple[DenvSandbox, str, Version, Environment],
) -> None:
    sb, _, version, fork = episode
    assert version.project == sb.project
    assert version.id == f"{sb.project}@v{version.number}"
    assert fork.sandbox
    assert fork.id != sb.id
    assert version.id in (fork.version, fork.parent_version)


def test_fork_sees_the_snapshot(episode: tuple[DenvSandbox, str, Version, Environment]) -> None:
    sb, path, _, fork = episode
    assert sb.client.read_file(fork.id, path) == b"before snapshot"


def test_fork_writes_do_not_leak_back(
    episode: tuple[DenvSandbox, str, Version, Environment],
) -> None:
    sb, path, _, fork = episode
    sb.client.write_file(fork.id, path, b"written in the fork")
    sb.client.write_file(fork.id, path + ".fork-only", b"new in the fork")
    assert sb.client.read_file(sb.id, path) == b"before snapshot"
    with pytest.raises(NotFoundError):
        sb.client.read_file(sb.id, path + ".fork-only")


def test_later_writes_do_not_reach_the_fork(
    episode: tuple[DenvSandbox, str, Version, Environment],
) -> None:
    sb, path, _, fork = episode
    sb.client.write_file(sb.id, path + ".after", b"after the snapshot")
    with pytest.raises(NotFoundError):
        sb.client.read_file(fork.id, path + ".after")


def test_fork_passed_its_egress_probe(
    episode: tuple[DenvSandbox, str, Version, Environment],
) -> None:
    sb, _, _, fork = episode
    assert sb.client.probe(fork.id).ok
