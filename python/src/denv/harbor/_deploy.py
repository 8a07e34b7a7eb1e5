"""Deploy once per content: the task's project is deployed only when its source changed."""

from __future__ import annotations

import asyncio
import hashlib
import logging

from .._async_client import AsyncClient
from .._errors import DenvError, InternalError, NotFoundError
from .._tar import source_archive, source_hash
from ._task import TaskSource

logger = logging.getLogger("denv.harbor")

#: Evidence keys of a deploy's ``resolve source`` phase: the source's content hash (when the
#: control plane records the ``X-Denv-Source-Sha256`` header) and the SHA-256 of the uploaded
#: archive (hex), which the control plane records today.
SOURCE_EVIDENCE_KEY = "source_sha256"
ARCHIVE_EVIDENCE_KEY = "sha256"

_locks: dict[tuple[int, str, str], asyncio.Lock] = {}


def archive_sha256(source: TaskSource) -> str:
    """The SHA-256 (hex) of the archive a deploy of ``source`` uploads.

    The archive is deterministic for an unchanged folder (sorted entries, anonymised owners,
    the files' mtimes; generated files have mtime 0).

    Args:
        source: The task source.

    Returns:
        64 hex digits.
    """
    h = hashlib.sha256()
    with source_archive(source.folder, dict(source.extra_files)) as archive:
        for chunk in iter(lambda: archive.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


async def deployed_version(
    client: AsyncClient, project: str, digest: str, archive_digest: str
) -> str | None:
    """The project's current version when its newest deploy was of this exact source.

    Args:
        client: A client.
        project: The project.
        digest: The source's content hash (:func:`denv.source_hash`).
        archive_digest: The SHA-256 of its archive (:func:`archive_sha256`).

    Returns:
        ``PROJECT@vN``, or None when the source must be deployed.
    """
    ref = f"{project}/alpha"
    try:
        env = await client.get_environment(ref)
    except NotFoundError:
        return None
    if not env.version:
        return None
    try:
        deployments = await client.list_deployments(project)
    except DenvError as exc:
        logger.debug("cannot list deployments of %s: %s", project, exc)
        return None
    for dep in deployments:
        if dep.environment != ref or dep.status != "succeeded":
            continue
        if dep.kind not in ("deploy", "rollback"):
            continue
        if dep.kind == "deploy":
            phase = dep.phase("resolve source")
            evidence = phase.evidence if phase is not None and phase.evidence else {}
            if (
                evidence.get(SOURCE_EVIDENCE_KEY) == digest
                or evidence.get(ARCHIVE_EVIDENCE_KEY) == archive_digest
            ):
                return env.version
        return None
    return None


async def ensure_deployed(
    client: AsyncClient, url: str, project: str, source: TaskSource, *, force: bool = False
) -> str:
    """The version to fork for a task: its source deployed at most once.

    Creates the project (kind ``rl-environment``) when missing, and deletes it again when its
    first deploy fails; deploys to ``alpha`` when ``force``, or when the newest deploy was of
    another source.

    Args:
        client: A client.
        url: The control plane URL (part of the lock key).
        project: The project.
        source: What to deploy.
        force: Deploy even when the source is unchanged (``--force-build``).

    Returns:
        ``PROJECT@vN``.

    Raises:
        DenvError: The deploy failed (its code's subclass).
    """
    extra = dict(source.extra_files)
    digest = await asyncio.to_thread(source_hash, source.folder, extra)
    lock = _locks.setdefault((id(asyncio.get_running_loop()), url, project), asyncio.Lock())
    async with lock:
        created = False
        try:
            await client.get_project(project)
        except NotFoundError:
            logger.warning("denv: creating project %s", project)
            await client.create_project(
                project, kind="rl-environment", compose_path=source.compose_name
            )
            created = True
        if not force and not created:
            archive_digest = await asyncio.to_thread(archive_sha256, source)
            version = await deployed_version(client, project, digest, archive_digest)
            if version is not None:
                return version
        logger.warning("denv: deploying %s to %s/alpha (source %s)", source.folder, project, digest)
        try:
            await client.deploy(
                source.folder, project=project, environment="alpha", extra_files=extra
            )
        except DenvError:
            if created:
                # A refused first deploy (the compose file refused, a failed build) would leave
                # an empty project behind: undo its creation, and say so if that fails too.
                try:
                    await client.delete_project(project)
                except DenvError as undo:
                    logger.warning(
                        "denv: project %s (created for this deploy) is left: %s", project, undo
                    )
                else:
                    logger.warning(
                        "denv: project %s deleted again: its first deploy failed", project
                    )
            raise
        env = await client.get_environment(f"{project}/alpha")
        if not env.version:
            raise InternalError(f"the deploy of {project} succeeded but {env.id} names no version")
        return env.version
