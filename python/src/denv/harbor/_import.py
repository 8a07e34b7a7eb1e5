"""``denv import harbor``: a denv project folder from a Harbor task folder (no Harbor import).

The one Harbor task -> denv project mapping: the Harbor adapter (:mod:`denv.harbor`) and
``denv import harbor`` (which runs ``python -m denv.harbor._import``) share the compose merge
(:func:`denv.harbor._compose.merge_harbor_compose`) and the generated Dockerfile
(:func:`denv.harbor._task.denv_dockerfile`). What this module adds is what a project folder
needs beyond the adapter's deploy: the build contexts under ``./environment``, the ``x-denv``
verifier (the task's image built again, which puts the agent's work back and runs Harbor's
``tests/test.sh``), and egress per phase from ``network_mode``.

Layout of a Harbor task: ``task.toml``, ``instruction.md``, ``environment/{Dockerfile |
docker-compose.yaml with service main}``, ``tests/test.sh``, ``solution/solve.sh``. In a Harbor
container: ``/logs/verifier/reward.txt|json``, ``/tests``, ``/solution``.

Usage: ``python -m denv.harbor._import DIR OUT [--project P] [--agent-sandbox gvisor|none]
[--json]``. What cannot be mapped exits 2 with one line on stderr naming the file and the key
(3 when OUT holds something).
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from .. import messages as M
from .._importing import ImportRefused, finish, importer_parser
from ._compose import merge_harbor_compose
from ._task import (
    AGENT_UID,
    COMPOSE_NAMES,
    DEFAULT_WORKDIR,
    GENERATED_DOCKERFILE,
    OWNER_ARG,
    VERIFIER_UID,
    AgentPolicy,
    denv_dockerfile,
    dockerfile_workdir,
    is_root,
    project_name,
)

_TOML_AT = re.compile(r"\s*\(at line (\d+), column \d+\)$|\s*\(at end of document\)$")


class HarborImportError(ImportRefused):
    """A task ``denv import harbor`` cannot map, or an OUT it cannot write (see ImportRefused)."""


@dataclass(frozen=True)
class ImportResult:
    """What :func:`import_task` wrote.

    Attributes:
        directory: OUT, absolute.
        project: The compose name.
        workdir: The agent's working directory.
        services: The compose services, ``main`` first.
        files: OUT's entries, sorted.
        notes: What merging the task's compose file over Harbor's base mapped or dropped.
    """

    directory: str
    project: str
    workdir: str
    services: list[str]
    files: list[str]
    notes: list[str]


def verifier_command(paths: Sequence[str]) -> list[str]:
    """The verifier's command: the submission put back, then Harbor's ``test.sh``.

    The submission goes back where the agent left it (the workdir, or in ``separate`` mode the
    task's artifacts: a folder's contents into the folder, a file as the file).

    Args:
        paths: The submission's absolute paths.

    Returns:
        ``bash -c SCRIPT``.
    """

    def q(p: str) -> str:
        return "'" + p.replace("'", "'\\''") + "'"

    restore = [
        f"if [ -d {q('/submission' + p)} ]; then mkdir -p {q(p)} && cp -R "
        f"--preserve=mode,timestamps {q('/submission' + p)}/. {q(p)}/; elif [ -e "
        f"{q('/submission' + p)} ]; then cp --preserve=mode,timestamps {q('/submission' + p)} "
        f"{q(p)}; fi;"
        for p in paths
    ]
    return ["bash", "-c", " ".join([*restore, "exec bash /tests/test.sh"])]


def import_task(
    task_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    project: str | None = None,
    *,
    agent_sandbox: str = "gvisor",
    labels: tuple[str, str] | None = None,
) -> ImportResult:
    """Writes OUT, a denv project folder, from the Harbor task folder DIR.

    OUT gets ``environment/`` (the task's, with a generated ``Dockerfile.denv``),
    ``compose.yaml`` (the task's compose file merged over Harbor's base, or one service
    ``main``, with ``x-denv``), ``tests/``, ``solution/``, ``instruction.md`` and ``task.toml``.
    Nothing is written when the task is refused.

    Args:
        task_dir: The Harbor task folder.
        out_dir: The folder to write (missing or empty).
        project: The compose name (default: the task folder's name as a denv name).
        agent_sandbox: ``gvisor`` (the agent is root inside gVisor, as Harbor's is root) or
            ``none`` (the agent is uid 1000).
        labels: How refusals name DIR and OUT (default: as given).

    Returns:
        What was written.

    Raises:
        HarborImportError: One line naming the file and the key.
    """
    src, out = Path(task_dir), Path(out_dir)
    dir_label, out_label = labels or (str(task_dir).rstrip("/") or "/", str(out_dir))
    if agent_sandbox not in ("gvisor", "none"):
        raise HarborImportError(f"agent_sandbox={agent_sandbox!r}: expected gvisor or none")
    if project is None:
        project = project_name(src.resolve().name, prefix="")
    toml_label = f"{dir_label}/task.toml"
    _need(src / "task.toml", toml_label)
    _need(src / "instruction.md", f"{dir_label}/instruction.md")
    _need(src / "tests" / "test.sh", f"{dir_label}/tests/test.sh")
    toml = _read_toml(src / "task.toml", toml_label)
    verifier = _table(toml.get("verifier"))
    agent = _table(toml.get("agent"))
    env_cfg = _table(toml.get("environment"))
    artifacts = _separate_artifacts(toml, toml_label, src, dir_label)
    gpus = env_cfg.get("gpus")
    if _number(gpus) and gpus > 0:
        raise HarborImportError(
            M.import_unsupported(toml_label, "environment.gpus", "denv does not offer GPUs")
        )
    agent_egress = _phase_egress(toml, "agent", toml_label)
    verifier_egress = _phase_egress(toml, "verifier", toml_label)
    # Harbor's agent is the image's user, root in nearly every task: root in gVisor's kernel
    # here (x-denv.agent.sandbox), unless the import is asked for a non-root agent.
    sandboxed = agent_sandbox == "gvisor"
    asked_user = None if agent.get("user") is None else _text(agent["user"])
    if asked_user is not None and is_root(asked_user) and not sandboxed:
        raise HarborImportError(
            M.import_unsupported(
                toml_label,
                "agent.user",
                "root without --agent-sandbox gvisor (the agent is never root outside a "
                "sandbox, protection 1)",
            )
        )
    agent_user = asked_user or ("root" if sandboxed else AGENT_UID)
    root_agent = is_root(agent_user)
    verifier_user = (
        _text(verifier["user"])
        if verifier.get("user") is not None
        else ("root" if root_agent else VERIFIER_UID)
    )
    env_dir = src / "environment"
    compose_name = next((n for n in COMPOSE_NAMES if (env_dir / n).is_file()), None)
    docker_image = env_cfg.get("docker_image")
    docker_image = docker_image if isinstance(docker_image, str) else None
    has_dockerfile = (env_dir / "Dockerfile").is_file()
    if compose_name is None and not has_dockerfile and not docker_image:
        raise HarborImportError(M.harbor_no_environment(dir_label))
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise HarborImportError(M.import_not_empty(out_label), "conflict")

    notes: list[str] = []
    top: dict[str, Any] = {}
    if compose_name is not None:
        label = f"{dir_label}/environment/{compose_name}"
        try:
            parsed = yaml.safe_load((env_dir / compose_name).read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise HarborImportError(f"{label}: not YAML ({' '.join(str(exc).split())})") from None
        if not isinstance(parsed, dict):
            raise HarborImportError(
                M.import_unsupported(label, "services", "expected a compose mapping")
            )
        # Harbor runs the task's compose file merged over its own base, which gives `main`
        # its build.
        merged = merge_harbor_compose(
            parsed,
            has_dockerfile=has_dockerfile,
            docker_image=docker_image,
            cpus=env_cfg["cpus"] if _number(env_cfg.get("cpus")) else None,
            memory_mb=env_cfg["memory_mb"] if _number(env_cfg.get("memory_mb")) else None,
        )
        notes = list(merged.notes)
        top = dict(merged.document)
        services: dict[str, Any] = top.pop("services")
        _prefix_build_contexts(services, label)
        main: dict[str, Any] = services["main"]
        build, dockerfile = _main_build(main, src, dir_label, label)
    else:
        dockerfile = (
            (env_dir / "Dockerfile").read_text(encoding="utf-8")
            if has_dockerfile
            else f"FROM {docker_image}\n"
        )
        build = {"context": "./environment", "dockerfile": GENERATED_DOCKERFILE}
        main = {}
        services = {"main": main}
    workdir_toml = env_cfg.get("workdir")
    workdir = (
        workdir_toml
        if isinstance(workdir_toml, str)
        else dockerfile_workdir(dockerfile) or DEFAULT_WORKDIR
    )
    # In separate mode the artifacts' folders exist in both images, owned by the image's user
    # (the agent writes them; the verifier puts them back from /submission).
    artifact_dirs = tuple(
        d
        for d in dict.fromkeys(posixpath.dirname(p) for p in artifacts or [])
        if d not in ("/", workdir)
    )
    main["build"] = build
    main.setdefault("command", ["sleep", "infinity"])
    main.setdefault("init", True)
    main["working_dir"] = workdir
    policy = AgentPolicy(
        user=agent_user, sandbox="gvisor" if root_agent else None, egress=agent_egress
    )
    submission = artifacts if artifacts is not None else [workdir]
    verifier_env = _table(verifier.get("env"))
    x_denv = policy.x_denv(workdir)
    x_denv["verifier"] = {
        "build": build
        if root_agent
        else {**build, "args": {**_table(build.get("args")), OWNER_ARG: verifier_user}},
        "user": verifier_user,
        "egress": verifier_egress,
        "command": verifier_command(submission),
        "timeout": math.ceil(verifier["timeout_sec"])
        if _number(verifier.get("timeout_sec"))
        else 600,
        "tests": "./tests",
        "submission": submission,
        **({"environment": {k: _text(v) for k, v in verifier_env.items()}} if verifier_env else {}),
    }
    compose = {"name": project, "services": services, **top, "x-denv": x_denv}
    who = "root in gVisor's kernel" if root_agent else f"uid {agent_user}"
    header = (
        f"# Written by 'denv import harbor' from {src.resolve().name}: the agent works in "
        f"'main' as {who};\n# the verifier ({verifier_user}) is the task's image built again, "
        "which puts the agent's work back and runs\n# Harbor's tests/test.sh; the reward is "
        f"/logs/verifier/reward.txt|json. Egress: agent {agent_egress}, verifier "
        f"{verifier_egress}.\n"
        + "".join(f"# Merged over Harbor's base compose: {n}\n" for n in notes)
    )

    # Everything is checked: write OUT.
    out.mkdir(parents=True, exist_ok=True)
    if env_dir.is_dir():
        shutil.copytree(env_dir, out / "environment", symlinks=True)
    else:
        (out / "environment").mkdir()
    (out / build["context"] / build["dockerfile"]).write_text(
        denv_dockerfile(
            dockerfile, workdir, artifact_dirs, root=root_agent, workdir_owner_arg=not root_agent
        ),
        encoding="utf-8",
    )
    text = yaml.dump(compose, Dumper=_Dumper, sort_keys=False, width=10_000)
    (out / "compose.yaml").write_text(header + text, encoding="utf-8")
    shutil.copytree(src / "tests", out / "tests", symlinks=True)
    if (src / "solution").is_dir():
        shutil.copytree(src / "solution", out / "solution", symlinks=True)
    shutil.copyfile(src / "instruction.md", out / "instruction.md")
    shutil.copyfile(src / "task.toml", out / "task.toml")
    return ImportResult(
        directory=os.path.abspath(out),
        project=project,
        workdir=workdir,
        services=list(services),
        files=sorted(os.listdir(out)),
        notes=notes,
    )


# ---------------------------------------------------------------------------- helpers


class _Dumper(yaml.SafeDumper):
    """YAML without anchors: the verifier's build is written out, not ``*id001``."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _need(file: Path, label: str) -> None:
    if not file.exists():
        raise HarborImportError(M.harbor_missing_file(label))


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value: Any) -> str:
    """A TOML value as the string compose takes (``true``, not ``True``)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _read_toml(file: Path, label: str) -> dict[str, Any]:
    """task.toml, parsed by tomllib; a syntax error as ``FILE:LINE: what``."""
    if sys.version_info < (3, 11):
        raise HarborImportError(f"{label}: reading task.toml needs Python >= 3.11 (tomllib)")
    import tomllib  # type: ignore[import-not-found,unused-ignore]  # (mypy targets 3.10)

    text = file.read_text(encoding="utf-8")
    try:
        doc: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = _TOML_AT.search(message)
        line = at.group(1) if at and at.group(1) else str(max(1, text.count("\n") + 1))
        what = message[: at.start()] if at else message
        raise HarborImportError(f"{label}:{line}: {what}") from None
    return doc


def _separate_artifacts(
    toml: dict[str, Any], toml_label: str, task_dir: Path, dir_label: str
) -> list[str] | None:
    """What a ``separate`` verifier receives of the agent's work: the task's ``artifacts``.

    None for a ``shared`` verifier.
    """
    verifier = _table(toml.get("verifier"))
    mode = verifier.get("environment_mode")
    if mode is not None and mode not in ("shared", "separate"):
        raise HarborImportError(
            M.import_unsupported(
                toml_label,
                "verifier.environment_mode",
                f'\'{_text(mode)}\' (expected "shared" or "separate")',
            )
        )
    own_environment = verifier.get("environment") is not None
    if mode != "separate" and not own_environment:
        return None
    if own_environment or (task_dir / "tests" / "Dockerfile").exists():
        raise HarborImportError(
            M.import_unsupported(
                toml_label if own_environment else f"{dir_label}/tests/Dockerfile",
                "verifier.environment" if own_environment else "tests/Dockerfile",
                "a verifier environment of its own (denv's verifier is the task's image built "
                "again)",
            )
        )
    artifacts = toml.get("artifacts", [])
    paths = artifacts if isinstance(artifacts, list) else [artifacts]
    for p in paths:
        if not isinstance(p, str) or not p.startswith("/") or ".." in p.split("/"):
            raise HarborImportError(
                M.import_unsupported(
                    toml_label,
                    "artifacts",
                    f"{json.dumps(p)} (a separate verifier's artifacts must be absolute paths)",
                )
            )
    return [p.rstrip("/") if len(p) > 1 else p for p in paths]


def _phase_egress(toml: dict[str, Any], phase: str, toml_label: str) -> str:
    """Harbor's network_mode of a phase as denv's egress.

    ``[agent]`` or ``[verifier]`` over ``[environment]``; Harbor's default is public. public ->
    the host's package mirrors through denvd's proxy, no-network -> deny; allowlist is refused
    (denv reaches no host but the mirrors).
    """
    own = _table(toml.get(phase)).get("network_mode")
    mode = own if own is not None else _table(toml.get("environment")).get("network_mode")
    mode = "public" if mode is None else mode
    if mode == "no-network":
        return "deny"
    if mode == "public":
        return "mirrors"
    raise HarborImportError(
        M.import_unsupported(
            toml_label,
            f"{phase}.network_mode" if own is not None else "environment.network_mode",
            "'allowlist' (an rl-environment reaches no host but the package mirrors)"
            if mode == "allowlist"
            else f'\'{_text(mode)}\' (expected "public" or "no-network")',
        )
    )


def _prefix_build_contexts(services: dict[str, Any], label: str) -> None:
    """Build contexts are relative to environment/; the project root is OUT."""
    for name, service in services.items():
        if not isinstance(service, dict) or service.get("build") is None:
            continue
        build = service["build"]
        b = {"context": build} if isinstance(build, str) else dict(_table(build))
        context = b.get("context")
        context = context if isinstance(context, str) else "."
        joined = posixpath.normpath(posixpath.join("environment", context))
        if context.startswith("/") or "$" in context or joined.split("/")[0] != "environment":
            raise HarborImportError(
                M.import_unsupported(
                    label,
                    f"services.{name}.build.context",
                    f"'{context}' is not a folder inside environment/",
                )
            )
        service["build"] = {**b, "context": f"./{joined}"}


def _main_build(
    main: dict[str, Any], task_dir: Path, dir_label: str, label: str
) -> tuple[dict[str, Any], str]:
    """Main's build of ``Dockerfile.denv`` (next to its Dockerfile) and that Dockerfile's text."""
    build = main.get("build")
    if isinstance(build, dict):
        context = str(build["context"])
        dockerfile = build.get("dockerfile")
        dockerfile = dockerfile if isinstance(dockerfile, str) else "Dockerfile"
        path = task_dir / context[2:] / dockerfile
        if not path.is_file():
            raise HarborImportError(
                M.harbor_missing_file(f"{dir_label}/{posixpath.join(context[2:], dockerfile)}")
            )
        generated = posixpath.join(posixpath.dirname(dockerfile), GENERATED_DOCKERFILE)
        return {**build, "dockerfile": generated}, path.read_text(encoding="utf-8")
    if isinstance(main.get("image"), str):
        image = main.pop("image")
        return {"context": "./environment", "dockerfile": GENERATED_DOCKERFILE}, f"FROM {image}\n"
    raise HarborImportError(
        M.import_unsupported(label, "services.main", "has neither build nor image")
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m denv.harbor._import DIR OUT [--project P] [--agent-sandbox S] [--json]``.

    Args:
        argv: The arguments (default ``sys.argv[1:]``).

    Returns:
        0; 2 for a task that cannot be mapped, 3 for an OUT that holds something (one line on
        stderr).
    """
    parser = importer_parser("harbor", "a Harbor task folder")
    parser.add_argument("--agent-sandbox", choices=("gvisor", "none"), default="gvisor")
    args = parser.parse_args(argv)
    return finish(
        lambda: import_task(args.dir, args.out, args.project, agent_sandbox=args.agent_sandbox),
        as_json=args.json,
    )


if __name__ == "__main__":
    sys.exit(main())
