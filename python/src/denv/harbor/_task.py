"""From a Harbor task's ``environment/`` folder to a denv project source (no Harbor import).

A Harbor task describes its environment with ``environment/Dockerfile`` (or a prebuilt
``docker_image``, or ``environment/docker-compose.yaml``). denv deploys a compose file, so
for a Dockerfile task the adapter adds two files to the deploy archive (the task folder
itself is never modified):

- ``Dockerfile.denv``: the task's Dockerfile followed by one ``RUN`` as root that prepares
  what Harbor expects in the container for a non-root agent (see :func:`prepare_script`);
- ``compose.yaml``: one service ``main`` built from ``Dockerfile.denv``, with ``x-denv``
  naming the agent (``main``, uid 1000) and its workdir.

For a compose task the task's compose file is replaced in the archive by its merge over
Harbor's base (:func:`denv.harbor._compose.merge_harbor_compose`), whose ``main`` is built
from a ``Dockerfile.denv`` next to its Dockerfile.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from ._compose import merge_harbor_compose

#: The uid the agent runs as (denv's default agent user) and the verifier's uid.
AGENT_UID = "1000"
VERIFIER_UID = "1001"

#: Harbor's paths in the container (``harbor.models.trial.paths.EnvironmentPaths``).
LOGS_DIR = "/logs"
AGENT_LOGS = "/logs/agent"
VERIFIER_LOGS = "/logs/verifier"
ARTIFACTS_DIR = "/logs/artifacts"
TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"

#: Compose files Harbor reads in ``environment/``, and the files the adapter generates.
COMPOSE_NAMES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
GENERATED_COMPOSE = "compose.yaml"
GENERATED_DOCKERFILE = "Dockerfile.denv"
DEFAULT_WORKDIR = "/workspace"
#: The build argument naming the workdir's owner (``workdir_owner_arg``).
OWNER_ARG = "DENV_WORKDIR_OWNER"

_WORKDIR = re.compile(r"^\s*WORKDIR\s+(\S+)\s*$", re.IGNORECASE | re.MULTILINE)
_NAME_INVALID = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class AgentPolicy:
    """Who the agent is in the task's ``main`` and what its episode may reach.

    Attributes:
        user: The agent's user (``root`` as in Harbor, or uid 1000 when not sandboxed).
        sandbox: ``gvisor`` (root confined by gVisor) or None (a non-root agent).
        egress: ``deny``, or ``mirrors`` (the host's package mirrors through denvd's proxy).
    """

    user: str = AGENT_UID
    sandbox: str | None = None
    egress: str = "deny"

    def x_denv(self, workdir: str) -> dict[str, Any]:
        """The ``x-denv`` block of the generated compose file."""
        agent: dict[str, Any] = {"service": "main", "user": self.user, "workdir": workdir}
        if self.sandbox:
            agent["sandbox"] = self.sandbox
        return {"kind": "rl-environment", "agent": agent, "egress": self.egress}

    @property
    def root(self) -> bool:
        """Whether the agent is root (in its sandbox)."""
        return is_root(self.user)


@dataclass(frozen=True)
class TaskSource:
    """What the adapter deploys for one task environment.

    Attributes:
        folder: The task's ``environment/`` folder (the project source).
        compose_name: The compose file the project deploys.
        extra_files: Generated files added to the deploy archive (relative path -> bytes).
        workdir: The agent's working directory.
        notes: What the merge over Harbor's base compose mapped or dropped (logged).
    """

    folder: Path
    compose_name: str
    extra_files: tuple[tuple[str, bytes], ...]
    workdir: str
    notes: tuple[str, ...] = ()


def project_name(environment_name: str, prefix: str = "harbor-") -> str:
    """The denv project of a Harbor task: ``harbor-<task name>`` as a valid denv name.

    Args:
        environment_name: Harbor's ``environment_name`` (the task's short name).
        prefix: Prefix of the project name.

    Returns:
        Lowercase letters, digits and ``-``, at most 40 characters.
    """
    name = _NAME_INVALID.sub("-", (prefix + environment_name).lower()).strip("-")
    return name[:40].strip("-") or "harbor-task"


def dockerfile_workdir(dockerfile: str) -> str | None:
    """The last ``WORKDIR`` of a Dockerfile, when it is an absolute path without variables.

    Args:
        dockerfile: The Dockerfile's text.

    Returns:
        The path, or None.
    """
    found = _WORKDIR.findall(dockerfile)
    if not found:
        return None
    last = found[-1].strip("\"'")
    return last if last.startswith("/") and "$" not in last else None


def prepare_script(
    workdir: str,
    agent_dirs: tuple[str, ...] = (),
    *,
    root: bool = False,
    workdir_owner_arg: bool = False,
) -> str:
    """The shell run as root at the end of the image build.

    For a root agent (confined by gVisor) it only creates Harbor's folders, as Harbor's docker
    backend finds them: the image's owners stay as they are. Otherwise it creates the agent
    user (uid 1000, ``agent``) and the verifier user (uid 1001, ``verifier``) unless the image
    has them, gives the agent the workdir, ``/logs/agent``,
    ``/logs/artifacts`` and ``/solution``, and gives the verifier ``/logs/verifier`` and
    ``/tests`` (mode 755: the agent can neither plant tests nor write a reward).

    Args:
        workdir: The agent's working directory.
        agent_dirs: More folders to create for the agent user (the parents of a task's
            artifacts, in a verifier image of its own).

        root: The agent is root.
        workdir_owner_arg: The workdir and ``agent_dirs`` are owned by the build argument
            ``DENV_WORKDIR_OWNER`` instead of the agent (``denv import harbor``: one Dockerfile
            for the agent's image and the verifier's, which puts the submission back there).

    Returns:
        A ``sh`` script.
    """
    w = " ".join(shlex.quote(d) for d in (workdir, *agent_dirs))
    if root:
        return (
            f"set -e; mkdir -p {w} {AGENT_LOGS} {ARTIFACTS_DIR} {VERIFIER_LOGS} {TESTS_DIR} "
            f"{SOLUTION_DIR}"
        )
    users = " ".join(
        f"getent passwd {uid} >/dev/null 2>&1 || "
        f"useradd -m -u {uid} -U -s /bin/sh {name} 2>/dev/null || "
        f"{{ echo '{name}:x:{uid}:{uid}::/home/{name}:/bin/sh' >> /etc/passwd; "
        f"echo '{name}:x:{uid}:' >> /etc/group; mkdir -p /home/{name}; "
        f"chown {uid}:{uid} /home/{name}; }};"
        for uid, name in ((AGENT_UID, "agent"), (VERIFIER_UID, "verifier"))
    )
    owned = (
        f"chown -R ${{{OWNER_ARG}}}:${{{OWNER_ARG}}} {w}; "
        f"chown -R {AGENT_UID}:{AGENT_UID} {AGENT_LOGS} {ARTIFACTS_DIR} {SOLUTION_DIR}; "
        if workdir_owner_arg
        else f"chown -R {AGENT_UID}:{AGENT_UID} {w} {AGENT_LOGS} {ARTIFACTS_DIR} {SOLUTION_DIR}; "
    )
    return (
        f"set -e; {users} "
        f"mkdir -p {w} {AGENT_LOGS} {ARTIFACTS_DIR} {VERIFIER_LOGS} {TESTS_DIR} {SOLUTION_DIR}; "
        f"{owned}"
        f"chown {VERIFIER_UID}:{VERIFIER_UID} {VERIFIER_LOGS} {TESTS_DIR}; "
        f"chmod 755 {LOGS_DIR} {VERIFIER_LOGS} {TESTS_DIR}"
    )


def denv_dockerfile(
    dockerfile: str,
    workdir: str,
    agent_dirs: tuple[str, ...] = (),
    *,
    root: bool = False,
    workdir_owner_arg: bool = False,
) -> str:
    """The task's Dockerfile with the preparation step appended.

    Args:
        dockerfile: The task's Dockerfile text (or ``FROM <docker_image>``).
        workdir: The agent's working directory.
        agent_dirs: More folders for the agent user (see :func:`prepare_script`).
        root: The agent is root (see :func:`prepare_script`).
        workdir_owner_arg: The workdir's owner is the build argument ``DENV_WORKDIR_OWNER``
            (default the agent; see :func:`prepare_script`).

    Returns:
        The Dockerfile denv builds.
    """
    body = dockerfile.rstrip("\n")
    owner_arg = workdir_owner_arg and not root
    script = prepare_script(workdir, agent_dirs, root=root, workdir_owner_arg=owner_arg).replace(
        "\\", "\\\\"
    )
    arg = f"ARG {OWNER_ARG}={AGENT_UID}\n" if owner_arg else ""
    return (
        f"{body}\n\n# Added by denv.harbor: users and Harbor's folders for a non-root agent.\n"
        f"USER root\n{arg}RUN {script}\nWORKDIR {workdir}\n"
    )


def compose_for_dockerfile(name: str, workdir: str, agent: AgentPolicy | None = None) -> str:
    """The compose file of a Dockerfile task: service ``main`` built from ``Dockerfile.denv``.

    Args:
        name: The compose project name.
        workdir: The agent's working directory.
        agent: The agent's user, sandbox and egress (default: uid 1000, no egress).

    Returns:
        YAML text.
    """
    agent = agent or AgentPolicy()
    return yaml.safe_dump(
        {
            "name": name,
            "services": {
                "main": {
                    "build": {"context": ".", "dockerfile": GENERATED_DOCKERFILE},
                    "command": ["sleep", "infinity"],
                    "init": True,
                    "working_dir": workdir,
                }
            },
            "x-denv": agent.x_denv(workdir),
        },
        sort_keys=False,
    )


def task_source(
    environment_dir: Path,
    name: str,
    *,
    docker_image: str | None = None,
    workdir: str | None = None,
    agent_dirs: tuple[str, ...] = (),
    cpus: float | None = None,
    memory_mb: int | None = None,
    agent: AgentPolicy | None = None,
) -> TaskSource:
    """What to deploy for a Harbor task's environment folder.

    A compose task (``docker-compose.yaml`` in the folder) deploys that file merged over
    Harbor's base compose as Harbor's docker backend runs it (:func:`compose_task_source`).
    A Dockerfile task, or a task with only ``docker_image``, deploys the generated
    ``compose.yaml`` and ``Dockerfile.denv``.

    Args:
        environment_dir: The task's ``environment/`` folder.
        name: The project name (also the compose ``name``).
        docker_image: ``[environment] docker_image`` of ``task.toml``.
        workdir: ``[environment] workdir`` of ``task.toml``.
        agent_dirs: More folders the generated Dockerfile creates for the agent user.
        cpus: ``[environment] cpus`` of ``task.toml``.
        memory_mb: ``[environment] memory_mb`` of ``task.toml``.
        agent: The agent's user, sandbox and egress (default: uid 1000, no egress).

    Returns:
        The source.

    Raises:
        FileNotFoundError: Neither a Dockerfile, a compose file nor a docker_image.
        ValueError: The compose file cannot be merged (one line naming it).
    """
    for compose in COMPOSE_NAMES:
        if (environment_dir / compose).is_file():
            return compose_task_source(
                environment_dir,
                compose,
                name,
                docker_image=docker_image,
                workdir=workdir,
                agent_dirs=agent_dirs,
                cpus=cpus,
                memory_mb=memory_mb,
                agent=agent,
            )
    agent = agent or AgentPolicy()
    dockerfile_path = environment_dir / "Dockerfile"
    if dockerfile_path.is_file():
        dockerfile = dockerfile_path.read_text(encoding="utf-8")
    elif docker_image:
        dockerfile = f"FROM {docker_image}\n"
    else:
        raise FileNotFoundError(
            f"{environment_dir}: no Dockerfile, no docker-compose.yaml and no docker_image"
        )
    wd = workdir or dockerfile_workdir(dockerfile) or DEFAULT_WORKDIR
    extra = (
        (GENERATED_COMPOSE, compose_for_dockerfile(name, wd, agent).encode("utf-8")),
        (
            GENERATED_DOCKERFILE,
            denv_dockerfile(dockerfile, wd, agent_dirs, root=agent.root).encode("utf-8"),
        ),
    )
    return TaskSource(environment_dir, GENERATED_COMPOSE, extra, wd)


def compose_task_source(
    environment_dir: Path,
    compose_name: str,
    name: str,
    *,
    docker_image: str | None = None,
    workdir: str | None = None,
    agent_dirs: tuple[str, ...] = (),
    cpus: float | None = None,
    memory_mb: int | None = None,
    agent: AgentPolicy | None = None,
) -> TaskSource:
    """A compose task's source: its compose file merged over Harbor's base.

    The merged file replaces the task's in the deploy archive (same name, so a project created
    before keeps its compose path). Its ``main`` is built from ``Dockerfile.denv`` (``main``'s
    Dockerfile, or ``FROM <image>``, with :func:`prepare_script` appended), gets ``init``, the
    workdir as ``working_dir``, and ``x-denv`` names the agent unless the file has ``x-denv``.

    Args:
        environment_dir: The task's ``environment/`` folder.
        compose_name: The compose file's name in it.
        name: The project name (the compose ``name``).
        docker_image: ``[environment] docker_image`` of ``task.toml``.
        workdir: ``[environment] workdir`` of ``task.toml``.
        agent_dirs: More folders the generated Dockerfile creates for the agent user.
        cpus: ``[environment] cpus``.
        memory_mb: ``[environment] memory_mb``.
        agent: The agent's user, sandbox and egress (default: uid 1000, no egress).

    Returns:
        The source, with the merge's notes.

    Raises:
        ValueError: The file is not a compose mapping, or main has no Dockerfile or image.
    """
    agent = agent or AgentPolicy()
    label = f"{environment_dir}/{compose_name}"
    try:
        task = yaml.safe_load((environment_dir / compose_name).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{label}: not YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(task, dict):
        raise ValueError(f"{label}: expected a compose mapping with 'services'")
    merged = merge_harbor_compose(
        task,
        has_dockerfile=(environment_dir / "Dockerfile").is_file(),
        docker_image=docker_image,
        cpus=cpus,
        memory_mb=memory_mb,
    )
    doc = merged.document
    main: dict[str, Any] = doc["services"]["main"]
    build = main.get("build")
    if isinstance(build, dict):
        context = PurePosixPath(str(build.get("context", ".")))
        dockerfile = PurePosixPath(str(build.get("dockerfile", "Dockerfile")))
        path = environment_dir / context / dockerfile
        if context.is_absolute() or ".." in context.parts or not path.is_file():
            raise ValueError(
                f"{label}: services.main.build: no Dockerfile {context / dockerfile} "
                "in the environment folder"
            )
        text = path.read_text(encoding="utf-8")
        generated = dockerfile.parent / GENERATED_DOCKERFILE
    elif isinstance(main.get("image"), str):
        context, generated = PurePosixPath("."), PurePosixPath(GENERATED_DOCKERFILE)
        text = f"FROM {main.pop('image')}\n"
        build = {"context": "."}
    else:
        raise ValueError(
            f"{label}: services.main has neither build nor image, and the task has no "
            "environment/Dockerfile and no [environment] docker_image"
        )
    wd = workdir or dockerfile_workdir(text) or DEFAULT_WORKDIR
    main["build"] = {**build, "dockerfile": str(generated)}
    main.setdefault("init", True)
    main["working_dir"] = wd
    out: dict[str, Any] = {"name": name, **doc}
    out.setdefault("x-denv", agent.x_denv(wd))
    dockerfile_denv = denv_dockerfile(text, wd, agent_dirs, root=agent.root)
    header = (
        f"# Written by denv.harbor: {compose_name} merged over Harbor's base compose "
        "(docs/how-to/harbor.md).\n"
    )
    extra = (
        (compose_name, (header + yaml.safe_dump(out, sort_keys=False)).encode("utf-8")),
        (str(context / generated), dockerfile_denv.encode("utf-8")),
    )
    return TaskSource(environment_dir, compose_name, extra, wd, merged.notes)


def is_root(user: str | int | None) -> bool:
    """Whether a user is root.

    ``root``, or uid 0 however spelled (``0``, ``00``, ``+0``, ``-0``), alone or as
    ``USER:GROUP`` (``0:0``, ``root:root``).

    Args:
        user: Harbor's user argument, or an option's value.

    Returns:
        True for root.
    """
    if user is None:
        return False
    text = str(user).strip().split(":")[0]
    digits = text[1:] if text[:1] in ("+", "-") else text
    return text == "root" or (digits.isdigit() and int(digits) == 0)


def artifact_parents(tests_dir: Path) -> tuple[str, ...]:
    """The folders a task's artifacts are uploaded into, for a verifier image of its own.

    In ``separate`` mode Harbor re-creates the agent's declared artifacts at their original
    paths in the verifier's environment. With a verifier image of its own (``tests/Dockerfile``)
    those folders may not exist there, and on denv nothing runs as root to create them, so the
    image build creates them for the agent user, who writes the artifacts. The task's
    ``task.toml`` is found above ``tests_dir`` (``<task>/tests`` or
    ``<task>/steps/<step>/tests``).

    Args:
        tests_dir: The folder of the verifier image's Dockerfile.

    Returns:
        Absolute folders, sorted; empty when no ``task.toml`` or no absolute artifact.
    """
    if sys.version_info < (3, 11):  # no tomllib; Harbor, the only caller, needs 3.12
        return ()
    import tomllib  # type: ignore[import-not-found,unused-ignore]  # (mypy targets 3.10)

    for folder in (tests_dir.parent, *tests_dir.parents):
        toml = folder / "task.toml"
        if toml.is_file():
            break
    else:
        return ()
    try:
        config = tomllib.loads(toml.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return ()
    entries: list[object] = list(config.get("artifacts") or [])
    for step in config.get("steps") or []:
        if isinstance(step, dict):
            entries.extend(step.get("artifacts") or [])
    parents: set[str] = set()
    for entry in entries:
        source = entry.get("source") if isinstance(entry, dict) else entry
        if not isinstance(source, str) or not source.startswith("/"):
            continue
        parent = PurePosixPath(source).parent
        if str(parent) != "/" and ".." not in parent.parts:
            parents.add(str(parent))
    return tuple(sorted(parents))
