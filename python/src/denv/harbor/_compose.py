"""Harbor's compose merge, into denv's compose subset (no Harbor import).

Harbor's docker backend (``harbor/environments/docker/docker.py``,
``DockerEnvironment._docker_compose_paths``, harbor 0.26.0) never runs a task's
``environment/docker-compose.yaml`` alone: it runs ``docker compose --project-directory
environment/ -f <resources> -f docker-compose-build.yaml -f environment/docker-compose.yaml
-f <env> -f <mounts> [-f egress sidecar]``, where ``docker-compose-build.yaml`` builds ``main``
from ``${CONTEXT_DIR}`` (the ``environment/`` folder, its ``Dockerfile``) with ``command: sh -c
'sleep infinity'`` and ``pull_policy: build`` (``docker-compose-prebuilt.yaml`` instead gives
``image: ${PREBUILT_IMAGE_NAME}`` for a ``docker_image`` task). Task authors therefore write a
``main`` without ``build:``. :func:`merge_harbor_compose` does that merge the way ``docker
compose -f base -f task`` does, then maps what denv's compose subset refuses or cannot use,
recording each change in ``notes``. It is the one merge: the adapter deploys it and ``denv
import harbor`` (:mod:`denv.harbor._import`) writes it; python/tests/harbor_merge/
expected-compose.yaml is what it must produce from that fixture.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Harbor's log folders in the container (``EnvironmentPaths``): with ``--mounts`` or
#: ``auto_mounting`` Harbor binds them to the trial's folders on the host.
HARBOR_LOG_TARGETS = ("/logs", "/logs/agent", "/logs/verifier", "/logs/artifacts")

#: Keys whose sequence the later file replaces (compose's "shell commands").
_REPLACED = frozenset({"command", "entrypoint"})
#: Sequences compose merges as mappings (``KEY=VALUE`` items).
_KEY_VALUE = frozenset({"environment", "labels", "extra_hosts", "sysctls", "annotations"})
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_MISSING = object()


@dataclass(frozen=True)
class MergedCompose:
    """A task's compose file merged over Harbor's base.

    Attributes:
        document: The merged compose document (``services``, ``volumes``...), in denv's subset
            as far as the merge goes (the rest is the task's, for denv's validator to judge).
        notes: What was mapped or dropped, one line each (the adapter logs them).
    """

    document: dict[str, Any]
    notes: tuple[str, ...]


def harbor_variables(cpus: float | None, memory_mb: int | None) -> dict[str, str | None]:
    """The variables Harbor's docker backend sets for compose interpolation.

    ``ComposeInfraEnvVars`` and ``legacy_log_mount_env_vars``
    (``harbor/environments/docker/compose_env.py``). A value of None has no denv equivalent:
    an entry that uses it is dropped.

    Args:
        cpus: ``[environment] cpus`` of task.toml.
        memory_mb: ``[environment] memory_mb`` of task.toml.

    Returns:
        Variable name -> its value on denv, or None.
    """
    values: dict[str, str | None] = {
        # The build context: the environment/ folder, the root of the task's paths.
        "CONTEXT_DIR": ".",
        # Harbor's tag for main's image; denv names the images it builds itself.
        "MAIN_IMAGE_NAME": None,
        "PREBUILT_IMAGE_NAME": None,
        "CPUS": _number(cpus) if cpus is not None else None,
        "MEMORY": f"{memory_mb}M" if memory_mb is not None else None,
    }
    # Host paths of Harbor's log folders: denv reads /logs from the sandbox instead.
    for suffix in ("AGENT_LOGS", "VERIFIER_LOGS", "ARTIFACTS"):
        values[f"HOST_{suffix}_PATH"] = None
        values[f"ENV_{suffix}_PATH"] = None
    return values


def harbor_base(
    *,
    has_dockerfile: bool,
    docker_image: str | None,
    cpus: float | None = None,
    memory_mb: int | None = None,
) -> dict[str, Any]:
    """Harbor's compose files under the task's, merged, as denv takes them.

    From ``docker-compose-build.yaml`` (or ``-prebuilt.yaml``) and the resources override
    (``write_resources_compose_file``: in the docker backend's default ``limit`` mode,
    ``cpus`` and ``mem_limit`` of ``main``). Left out: ``pull_policy: build`` (denv refuses
    ``pull_policy``; it builds a ``build:`` service anyway), the env override (task.toml's
    ``[environment] env``, resolved from the host's environment and possibly secret: the adapter
    passes it on each exec, as Harbor does for a Dockerfile task), the mounts override (empty
    unless ``--mounts``/``auto_mounting``), and the egress sidecar (an rl-environment has no
    egress at all).

    Args:
        has_dockerfile: ``environment/Dockerfile`` exists.
        docker_image: ``[environment] docker_image`` of task.toml.
        cpus: ``[environment] cpus``.
        memory_mb: ``[environment] memory_mb``.

    Returns:
        A compose document with service ``main``.
    """
    main: dict[str, Any] = {}
    if cpus is not None:
        main["cpus"] = cpus
    if memory_mb is not None:
        main["mem_limit"] = f"{memory_mb}m"
    # denv prefers the Dockerfile when both are given, as Harbor does with --force-build.
    # Without either Harbor's build fails; denv leaves main to the task's compose file.
    if has_dockerfile:
        main["build"] = {"context": "."}
    elif docker_image:
        main["image"] = docker_image
    main["command"] = ["sh", "-c", "sleep infinity"]
    return {"services": {"main": main}}


def merge_compose(base: Any, override: Any, key: str = "") -> Any:
    """``docker compose -f base -f override``: the compose specification's merge rules.

    Mappings merge key by key; ``command`` and ``entrypoint`` (and ``healthcheck.test``) are
    replaced; ``environment``, ``labels``... merge as mappings whatever their spelling;
    ``volumes`` entries are unique by target; ``depends_on`` and ``networks`` lists are
    mappings; ``build: PATH`` is ``build: {context: PATH}``; other sequences are appended
    (without repeating an equal item).

    Args:
        base: The earlier document (or value).
        override: The later one.
        key: The key both values are under (``services.NAME.KEY`` uses the last part).

    Returns:
        The merged value (new containers; the inputs are not modified).
    """
    name = key.rsplit(".", 1)[-1]
    base, override = normalize(base, key), normalize(override, key)
    if override is None:
        return base
    if name in _REPLACED or key.endswith("healthcheck.test"):
        return override
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            out[k] = merge_compose(base[k], v, f"{key}.{k}".lstrip(".")) if k in base else v
        return out
    if isinstance(base, list) and isinstance(override, list):
        if name == "volumes" and key.count(".") == 2:
            return _merge_volumes(base, override)
        return base + [v for v in override if v not in base]
    return override


def merge_harbor_compose(
    task: dict[str, Any],
    *,
    has_dockerfile: bool,
    docker_image: str | None = None,
    cpus: float | None = None,
    memory_mb: int | None = None,
) -> MergedCompose:
    """A task's compose document merged over Harbor's base, mapped into denv's subset.

    Harbor's variables are replaced by their denv values first (``${CONTEXT_DIR}`` is the
    environment folder); an entry that needs one denv has no value for (Harbor's image tag,
    the host paths of its log folders) is dropped with a note. After the merge,
    ``pull_policy`` is dropped (denv decides pulling and building itself) and bind mounts onto
    Harbor's log folders are dropped (denv reads ``/logs`` from the sandbox; it refuses host
    paths). The top-level ``name`` is left out: the caller names the project.

    Args:
        task: The task's ``docker-compose.yaml``, parsed.
        has_dockerfile: ``environment/Dockerfile`` exists.
        docker_image: ``[environment] docker_image`` of task.toml.
        cpus: ``[environment] cpus``.
        memory_mb: ``[environment] memory_mb``.

    Returns:
        The merged document and its notes.
    """
    notes: list[str] = []
    variables = harbor_variables(cpus, memory_mb)
    substituted = _substitute(task, variables, notes, "")
    doc = merge_compose(
        harbor_base(
            has_dockerfile=has_dockerfile, docker_image=docker_image, cpus=cpus, memory_mb=memory_mb
        ),
        substituted if isinstance(substituted, dict) else {},
    )
    doc.pop("name", None)
    services = doc.get("services")
    for name, service in (services or {}).items():
        if not isinstance(service, dict):
            continue
        if "pull_policy" in service:
            notes.append(
                f"services.{name}.pull_policy: dropped: denv builds a service with build: and "
                "pulls one with image: itself"
            )
            del service["pull_policy"]
        volumes = service.get("volumes")
        if isinstance(volumes, list):
            kept = []
            for volume in volumes:
                if _is_bind(volume) and _target(volume) in HARBOR_LOG_TARGETS:
                    notes.append(
                        f"services.{name}.volumes: {_show(volume)} dropped: a host folder for "
                        "Harbor's logs (denv reads /logs from the sandbox)"
                    )
                else:
                    kept.append(volume)
            if kept:
                service["volumes"] = kept
            else:
                del service["volumes"]
    return MergedCompose(doc, tuple(notes))


def normalize(value: Any, key: str = "") -> Any:
    """A compose value in the one spelling the merge compares (a copy).

    ``environment``, ``labels``... as mappings (``KEY`` alone maps to None); ``depends_on``
    as ``{service: {condition: service_started}}``; ``networks`` as ``{network: None}``;
    ``build: PATH`` as ``{context: PATH}``.

    Args:
        value: The value.
        key: Its dotted key from the document's top.

    Returns:
        The value, normalized all the way down.
    """
    name = key.rsplit(".", 1)[-1]
    in_service = key.count(".") == 2 and key.startswith("services.")
    if name in _KEY_VALUE or key.endswith("build.args"):
        value = _key_values(value)
    elif in_service and name == "depends_on" and isinstance(value, list):
        value = {str(v): {"condition": "service_started"} for v in value}
    elif in_service and name == "networks" and isinstance(value, list):
        value = {str(v): None for v in value}
    elif in_service and name == "build" and isinstance(value, str):
        value = {"context": value}
    if isinstance(value, dict):
        return {k: normalize(v, f"{key}.{k}".lstrip(".")) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


# ---------------------------------------------------------------------------- helpers


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _key_values(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    out: dict[str, Any] = {}
    for item in value:
        text = str(item)
        k, sep, v = text.partition("=")
        out[k] = v if sep else None
    return out


def _target(volume: Any) -> str | None:
    if isinstance(volume, dict):
        target = volume.get("target")
        return str(target).rstrip("/") or "/" if target is not None else None
    parts = str(volume).split(":")
    if len(parts) == 1:
        return parts[0].rstrip("/") or "/"
    return parts[1].rstrip("/") or "/"


def _is_bind(volume: Any) -> bool:
    if isinstance(volume, dict):
        return volume.get("type") == "bind"
    parts = str(volume).split(":")
    return len(parts) > 1 and parts[0].startswith((".", "/", "~", "$"))


def _merge_volumes(base: list[Any], override: list[Any]) -> list[Any]:
    out = [_copy(v) for v in base]
    for volume in override:
        target = _target(volume)
        at = next((i for i, v in enumerate(out) if _target(v) == target), None)
        if at is None:
            out.append(_copy(volume))
        else:
            out[at] = _copy(volume)
    return out


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value)


def _substitute(value: Any, variables: dict[str, str | None], notes: list[str], key: str) -> Any:
    """``value`` with Harbor's variables replaced; _MISSING when it needs one denv lacks."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            sub = _substitute(v, variables, notes, f"{key}.{k}".lstrip("."))
            if sub is not _MISSING:
                out[k] = sub
        return out
    if isinstance(value, list):
        items = [_substitute(v, variables, notes, key) for v in value]
        return [v for v in items if v is not _MISSING]
    if not isinstance(value, str):
        return value
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in variables:
            return match.group(0)
        found = variables[name]
        if found is None:
            missing.append(name)
            return ""
        return found

    text = _sub_unescaped(value, replace)
    if missing:
        why = _WHY.get(missing[0], _LOG_PATH)
        notes.append(f"{key}: {value} dropped: ${{{missing[0]}}} is Harbor's {why}")
        return _MISSING
    return text


_LOG_PATH = "host path of a log folder (denv reads /logs from the sandbox)"
_WHY = {
    "MAIN_IMAGE_NAME": "tag for main's image (denv names the images it builds)",
    "PREBUILT_IMAGE_NAME": "prebuilt image tag (denv uses task.toml's docker_image)",
    "CPUS": "CPU count, and task.toml gives no [environment] cpus",
    "MEMORY": "memory size, and task.toml gives no [environment] memory_mb",
}


def _sub_unescaped(text: str, replace: Callable[[re.Match[str]], str]) -> str:
    # `$$` is a literal dollar in compose: keep it (and what follows) as written.
    parts = text.split("$$")
    return "$$".join(_VARIABLE.sub(replace, part) for part in parts)
