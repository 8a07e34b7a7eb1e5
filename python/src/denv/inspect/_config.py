"""The configuration of the Inspect provider, and the one deploy per source it leads to."""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from .._async_client import AsyncClient
from .._base import version_id
from .._config import load_config
from .._errors import ConfigError, DenvError, InternalError, NotFoundError
from .._models import DeploymentEvent
from .._tar import source_hash
from ._state import run_state

logger = logging.getLogger("denv.inspect")

#: Compose file names Inspect finds next to a task (``config_files()``), and the Dockerfile.
COMPOSE_FILES = ["compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml"]
DOCKERFILE = "Dockerfile"

#: Evidence key of the deploy's ``resolve source`` phase holding the source's content hash.
SOURCE_EVIDENCE_KEY = "source_sha256"

_NAME_INVALID = re.compile(r"[^a-z0-9-]+")


class DenvSandboxConfig(BaseModel):
    """Configuration of the ``denv`` sandbox: what to deploy, where, and which version to fork.

    Pass it as ``sandbox=SandboxEnvironmentSpec("denv", DenvSandboxConfig(...))``; a plain
    compose path (``sandbox=("denv", "compose.yaml")``) is the same as
    ``DenvSandboxConfig(compose="compose.yaml")``. The eval log stores this configuration
    without ``token``.

    Attributes:
        project: The denv project (default: ``DENV_PROJECT`` / the config file's project,
            else the compose file's ``name``, else its folder's name).
        compose: Path of the compose file; its folder is the project source. Relative paths
            are resolved against the current directory.
        url: Control plane URL (default: ``DENV_URL`` / the config file).
        token: API token (default: ``DENV_TOKEN`` / the config file); never logged.
        version: A version to fork (``PROJECT@vN`` or ``N``) instead of deploying the source.
        environment: The environment the source is deployed to.
        ttl_sec: Seconds until a sample's sandbox is destroyed even if nothing cleans it up.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    project: str | None = None
    compose: str | None = None
    url: str | None = None
    token: str | None = Field(default=None, exclude=True, repr=False)
    version: str | None = None
    environment: str = "alpha"
    ttl_sec: int = 3600


@dataclass(frozen=True)
class Settings:
    """A resolved configuration.

    Attributes:
        url: Control plane URL.
        token: API token.
        project: The project.
        folder: The project source folder (None with ``version``).
        compose_name: The compose file's path relative to ``folder``.
        extra_files: Files added to the deploy (a generated compose file).
        kind: The project kind the compose file declares.
        version: A version to fork instead of deploying.
        environment: The environment deployed to.
        ttl_sec: Sandbox TTL.
    """

    url: str
    token: str | None
    project: str
    folder: Path | None
    compose_name: str
    extra_files: tuple[tuple[str, bytes], ...]
    kind: str
    version: str | None
    environment: str
    ttl_sec: int

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """What identifies one deployed source."""
        return (
            self.url,
            self.project,
            self.environment,
            str(self.folder or ""),
            self.version or "",
        )

    def client(self) -> AsyncClient:
        """A client of this configuration's control plane.

        Returns:
            A new client (close it with ``aclose``).
        """
        return _client_factory(self)


def _default_factory(settings: Settings) -> AsyncClient:
    return AsyncClient(settings.url, settings.token, settings.project)


#: Builds the clients the provider uses; tests replace it to talk to a fake control plane.
_client_factory = _default_factory


def slug(text: str, limit: int = 40) -> str:
    """A valid denv name made from text: lowercase letters, digits and ``-``.

    Args:
        text: Any text.
        limit: Maximum length.

    Returns:
        The name (``x`` when nothing is left).
    """
    name = _NAME_INVALID.sub("-", text.lower()).strip("-")[:limit].strip("-")
    return name or "x"


def _read_compose(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"sandbox 'denv': compose file {path} does not exist") from exc
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"sandbox 'denv': cannot read compose file {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _kind(compose: dict[str, Any]) -> str:
    xdenv = compose.get("x-denv")
    kind = xdenv.get("kind") if isinstance(xdenv, dict) else None
    return kind if kind in ("rl-environment", "service") else "rl-environment"


# Per process, not per run: the same generated compose file is the same source (Settings.key)
# for every run, so concurrent runs share its deploy lock.
_generated_dirs: dict[str, Path] = {}


def _empty_folder(tag: str) -> Path:
    # A generated compose file (from a ComposeConfig) deploys from an otherwise empty folder,
    # removed when the process exits.
    if tag not in _generated_dirs:
        path = Path(tempfile.mkdtemp(prefix="denv-inspect-"))
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        _generated_dirs[tag] = path
    return _generated_dirs[tag]


def resolve_settings(config: Any) -> Settings:
    """Resolves what Inspect passes as the sandbox configuration.

    Accepted: a compose file path, a Dockerfile path (deployed as a one-service compose
    project), a :class:`DenvSandboxConfig`, or Inspect's ``ComposeConfig`` (image-only).

    Args:
        config: The configuration Inspect passes (None when none was found).

    Returns:
        The settings.

    Raises:
        ConfigError: No configuration, an unreadable compose file, or no control plane URL.
    """
    extra: dict[str, bytes] = {}
    if config is None:
        raise ConfigError(
            "sandbox 'denv' needs a compose file: use sandbox=('denv', 'compose.yaml'), "
            "put compose.yaml next to the task, or pass DenvSandboxConfig(compose=...)"
        )
    if isinstance(config, str):
        cfg = DenvSandboxConfig(compose=config)
    elif isinstance(config, DenvSandboxConfig):
        cfg = config
    elif type(config).__name__ == "ComposeConfig" and isinstance(config, BaseModel):
        text = yaml.safe_dump(config.model_dump(exclude_none=True, by_alias=True), sort_keys=False)
        folder = _empty_folder(source_tag(text))
        extra["compose.yaml"] = text.encode("utf-8")
        cfg = DenvSandboxConfig(compose=str(folder / "compose.yaml"))
    elif isinstance(config, BaseModel):
        cfg = DenvSandboxConfig.model_validate(config.model_dump())
    else:
        raise ConfigError(f"sandbox 'denv': unsupported configuration {config!r}")

    conf = load_config(cfg.url, cfg.token, cfg.project)
    url = conf.require_url()
    if cfg.compose is None:
        if cfg.version is None:
            raise ConfigError("sandbox 'denv': DenvSandboxConfig needs compose=... or version=...")
        project = conf.require_project()
        return Settings(
            url=url,
            token=conf.token,
            project=project,
            folder=None,
            compose_name="",
            extra_files=(),
            kind="rl-environment",
            version=cfg.version,
            environment=cfg.environment,
            ttl_sec=cfg.ttl_sec,
        )

    path = Path(cfg.compose).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    folder = path.parent
    if path.name == DOCKERFILE or path.name.endswith(".Dockerfile"):
        compose_text = _dockerfile_compose(slug(folder.name), path.name)
        extra["compose.yaml"] = compose_text.encode("utf-8")
        compose: dict[str, Any] = yaml.safe_load(compose_text)
        compose_name = "compose.yaml"
    elif "compose.yaml" in extra:
        compose = yaml.safe_load(extra["compose.yaml"])
        compose_name = "compose.yaml"
    else:
        compose = _read_compose(path)
        compose_name = path.name
    name = compose.get("name")
    project = conf.project or (slug(name) if isinstance(name, str) else slug(folder.name))
    return Settings(
        url=url,
        token=conf.token,
        project=project,
        folder=folder,
        compose_name=compose_name,
        extra_files=tuple(sorted(extra.items())),
        kind=_kind(compose),
        version=cfg.version,
        environment=cfg.environment,
        ttl_sec=cfg.ttl_sec,
    )


def source_tag(text: str) -> str:
    """A short stable tag of a text.

    Args:
        text: The text.

    Returns:
        12 hex digits of its SHA-256.
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _dockerfile_compose(name: str, dockerfile: str) -> str:
    # The agent is the only service (x-denv's default rule); denv gives it uid 1000 when the
    # image runs as root.
    return yaml.safe_dump(
        {
            "name": name,
            "services": {
                "default": {
                    "build": {"context": ".", "dockerfile": dockerfile},
                    "command": ["tail", "-f", "/dev/null"],
                    "init": True,
                }
            },
        },
        sort_keys=False,
    )


# ---------------------------------------------------------------------------- source cache


def _cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "denv" / "sources.json"


def _cache_key(settings: Settings) -> str:
    return f"{settings.url} {settings.project}/{settings.environment}"


def _cache_read() -> dict[str, Any]:
    try:
        data = json.loads(_cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cache_write(settings: Settings, digest: str, version: str) -> None:
    path = _cache_path()
    data = _cache_read()
    data[_cache_key(settings)] = {SOURCE_EVIDENCE_KEY: digest, "version": version}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        logger.debug("cannot write %s: %s", path, exc)


# ---------------------------------------------------------------------------- deploy once

# Per process, not per run (the versions are, in RunState): concurrent runs of one source
# deploy it once. asyncio locks belong to one event loop; tests run several loops in one process.
_locks: dict[tuple[int, tuple[str, str, str, str, str]], asyncio.Lock] = {}


async def current_version(client: AsyncClient, settings: Settings, digest: str) -> str | None:
    """The project's current version when it was deployed from this exact source.

    The newest deployment that changed the environment decides: a ``deploy`` whose
    ``resolve source`` evidence records this source's hash. Failing that, the local cache
    (``~/.cache/denv/sources.json``) of what this machine deployed.

    Args:
        client: A client.
        settings: The settings.
        digest: The source's content hash.

    Returns:
        The version id, or None when the source must be deployed.
    """
    ref = f"{settings.project}/{settings.environment}"
    try:
        env = await client.get_environment(ref)
    except NotFoundError:
        return None
    if not env.version:
        return None
    try:
        deployments = await client.list_deployments(settings.project)
    except DenvError as exc:
        logger.debug("cannot list deployments of %s: %s", settings.project, exc)
        deployments = []
    for dep in deployments:
        if dep.environment != ref or dep.status != "succeeded":
            continue
        if dep.kind not in ("deploy", "rollback"):
            continue
        if dep.kind == "deploy":
            phase = dep.phase("resolve source")
            evidence = phase.evidence if phase is not None and phase.evidence else {}
            if evidence.get(SOURCE_EVIDENCE_KEY) == digest:
                return env.version
        break
    cached = _cache_read().get(_cache_key(settings))
    if (
        isinstance(cached, dict)
        and cached.get(SOURCE_EVIDENCE_KEY) == digest
        and cached.get("version") == env.version
    ):
        return env.version
    return None


async def ensure_version(settings: Settings) -> str:
    """The version to fork for this configuration: deployed once per source and run.

    With ``version`` set, that version (checked to exist). Otherwise the project's current
    version when it was deployed from the same source (same content hash); else the
    source is deployed now (the project is created first when missing). The answer is kept
    for the rest of the run (:func:`~denv.inspect._state.run_state`).

    Args:
        settings: The settings.

    Returns:
        ``PROJECT@vN``.

    Raises:
        DenvError: The deploy failed (its code's subclass), or the version does not exist.
    """
    key = settings.key
    versions = run_state().versions
    if key in versions:
        return versions[key]
    lock = _locks.setdefault((id(asyncio.get_running_loop()), key), asyncio.Lock())
    async with lock:
        if key in versions:
            return versions[key]
        client = settings.client()
        try:
            version = await _ensure(client, settings)
        finally:
            await client.aclose()
        versions[key] = version
        return version


async def _ensure(client: AsyncClient, settings: Settings) -> str:
    if settings.version is not None:
        return (await client.get_version(version_id(settings.version, settings.project))).id
    assert settings.folder is not None
    extra = dict(settings.extra_files)
    digest = await asyncio.to_thread(source_hash, settings.folder, extra)
    try:
        project = await client.get_project(settings.project)
    except NotFoundError:
        logger.warning("denv: creating project %s (%s)", settings.project, settings.kind)
        project = await client.create_project(
            settings.project, kind=settings.kind, compose_path=settings.compose_name
        )
    if project.compose_path != settings.compose_name:
        raise ConfigError(
            f"project {settings.project} deploys '{project.compose_path}', but the sandbox "
            f"configuration names '{settings.compose_name}': rename one, or use another project"
        )
    version = await current_version(client, settings, digest)
    if version is not None:
        logger.info("denv: %s is deployed from this source as %s", settings.project, version)
        return version

    def log(event: DeploymentEvent) -> None:
        if event.type == "phase" and event.phase is not None:
            logger.info(
                "denv deploy %s: %s %s", settings.project, event.phase.name, event.phase.status
            )
        elif event.type == "log" and event.line:
            logger.info("denv deploy %s: %s", settings.project, event.line)

    logger.warning(
        "denv: deploying %s to %s/%s (source %s)",
        settings.folder,
        settings.project,
        settings.environment,
        digest,
    )
    await client.deploy(
        settings.folder,
        project=settings.project,
        environment=settings.environment,
        extra_files=extra,
        on_event=log,
    )
    env = await client.get_environment(f"{settings.project}/{settings.environment}")
    if not env.version:
        raise InternalError(
            f"the deploy of {settings.project} succeeded but {env.id} names no version"
        )
    _cache_write(settings, digest, env.version)
    return env.version
