"""``denv import karotte``: a denv project folder from a Karotte environment folder.

A Karotte environment (what ``karotte create-env`` writes, karotte 3.0.100) is one image per run
(``Containerfile``) and a Python package ``environment`` (``src/environment``) whose
``get_tasks()`` returns ``karotte.Task`` classes; each task's steps carry judges. ``karotte run
--no-containerized`` runs a task inside an already-started image of it, as root, with the student
demoted to ``KAROTTE_DEMOTE_ID``.

The mapping: service ``main`` is that image (``sleep infinity``; ``karotte run`` arrives through
``denv exec --user root``), the agent is root inside gVisor's kernel (Karotte's harness needs root
to demote the student, kill its processes and read the root-only answer key; root there holds
nothing on the host), egress is denied (denv is the outer harness that isolates the network, so
Karotte's own firewall may report itself off), the caps are Karotte's default sandbox (4 GiB,
2 CPUs, twice its student process limit), and the verifier is the same image built again, root in
its own container, running ``denv-verifier/grade.py`` (:mod:`denv.karotte._grade`) over what the
run left in ``/out``: Karotte's own judges, re-run on the fork.

With ``--answer-key verifier`` the answer key is the verifier's only: ``main`` builds from
``Containerfile.denv`` (the environment's, then ``/root_data`` and ``/intermediate_data``
emptied), the verifier from the environment's own ``Containerfile``.

Usage: ``python -m denv.karotte._import DIR OUT [--project P] [--answer-key image|verifier]
[--json]``. What cannot be mapped
exits 2 with one line on stderr naming the file and the key (3 when OUT holds something).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .. import messages as M
from .._importing import ImportRefused, finish, importer_parser
from ..harbor._task import project_name

#: Karotte's default sandbox (karotte/hardware.py: DEFAULT_SANDBOX_MEMORY_BYTES, DEFAULT_VM_CPUS).
MEMORY = "4g"
CPUS = 2
#: karotte/confinement.py STUDENT_PROCESS_LIMIT (2048), twice: the student's and the harness's.
PIDS = 4096
#: Where the run's transcript and artifacts go (root-only in the agent's container).
OUT = "/out"
VERIFIER_DIR = "denv-verifier"
#: ``--answer-key verifier``: main builds from this, the environment's Containerfile plus one step.
AGENT_CONTAINERFILE = "Containerfile.denv"
#: Where Karotte's template keeps what only root may read (environment/paths.py of the template).
KEY_DIRS = ("/root_data", "/intermediate_data")
VERIFIER_TIMEOUT = 600
#: Never copied into OUT: local state of a checkout, not part of the environment.
SKIP = {".venv", ".git", "out", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
_ENV_LINE = re.compile(r"^\s*ENV\s+(.*)$", re.IGNORECASE)
_PAIR = re.compile(r"""([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|'[^']*'|[^\s\\]*)""")


class KarotteImportError(ImportRefused):
    """An environment ``denv import karotte`` cannot map, or an OUT it cannot write."""


@dataclass(frozen=True)
class ImportResult:
    """What :func:`import_environment` wrote.

    Attributes:
        directory: OUT, absolute.
        project: The compose name.
        workdir: The student's working directory (``KAROTTE_WORKDIR``).
        student_uid: The uid Karotte demotes the student to (``KAROTTE_DEMOTE_ID``).
        services: The compose services.
        files: OUT's entries, sorted.
        notes: What the mapping decided that the user should know.
    """

    directory: str
    project: str
    workdir: str
    student_uid: int
    services: list[str]
    files: list[str]
    notes: list[str]


def containerfile_env(text: str) -> dict[str, str]:
    """The ``ENV KEY=VALUE`` pairs of a Containerfile (continuation lines joined).

    Args:
        text: The Containerfile.

    Returns:
        Each key's last value, quotes removed.
    """
    joined = re.sub(r"\\\s*\n", " ", text)
    env: dict[str, str] = {}
    for line in joined.splitlines():
        match = _ENV_LINE.match(line)
        if match is None:
            continue
        for key, value in _PAIR.findall(match[1]):
            env[key] = value.strip("\"'")
    return env


def _read_toml(file: Path, label: str) -> dict[str, Any]:
    if sys.version_info < (3, 11):
        raise KarotteImportError(f"{label}: reading it needs Python >= 3.11 (tomllib)")
    import tomllib  # type: ignore[import-not-found,unused-ignore]  # (mypy targets 3.10)

    try:
        doc: dict[str, Any] = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise KarotteImportError(f"{label}: {exc}") from None
    return doc


def _check_containerfile(text: str, label: str) -> dict[str, str]:
    """Refuses what denv's build cannot run; returns the image's ENV."""
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if len(words) > 1 and words[0].upper() in ("RUN", "COPY", "ADD"):
            flag = next((w for w in words[1:] if w.startswith(("--mount", "--chmod"))), None)
            if flag is not None:
                key = f"{words[0].upper()} {flag.split('=')[0]} (line {number})"
                raise KarotteImportError(
                    M.import_unsupported(
                        label,
                        key,
                        "denv builds with Docker's classic builder, which has no BuildKit "
                        "mounts, secrets or --chmod; install from files in the build context",
                    )
                )
    env = containerfile_env(text)
    if "KAROTTE_CONTAINERIZED" not in env:
        raise KarotteImportError(
            M.import_unsupported(
                label,
                "ENV KAROTTE_CONTAINERIZED",
                "karotte run --no-containerized runs only in an image that sets it",
            )
        )
    demote = env.get("KAROTTE_DEMOTE_ID", "1000")
    if not demote.isdigit() or int(demote) == 0:
        raise KarotteImportError(
            M.import_unsupported(
                label,
                "ENV KAROTTE_DEMOTE_ID",
                f"the student must be a non-root uid, not {demote!r}",
            )
        )
    workdir = env.get("KAROTTE_WORKDIR", "/workdir")
    if not workdir.startswith("/") or "$" in workdir:
        raise KarotteImportError(
            M.import_unsupported(
                label, "ENV KAROTTE_WORKDIR", f"expected an absolute path, not {workdir!r}"
            )
        )
    return env


def _check_manifest(src: Path, label: str) -> None:
    """A CLI coding agent calls its provider from inside the image: egress is denied there."""
    manifest = src / ".manifest.json"
    if not manifest.is_file():
        return
    try:
        agents = json.loads(manifest.read_text(encoding="utf-8")).get("agents") or []
    except (ValueError, AttributeError):
        raise KarotteImportError(
            M.import_unsupported(label, "agents", "not a JSON object with a list of agents")
        ) from None
    if agents:
        raise KarotteImportError(
            M.import_unsupported(
                label,
                "agents",
                f"CLI agents ({', '.join(map(str, agents))}) call their model provider from "
                "inside the image, and an rl-environment has no egress (protection 5); use "
                "karotte's builtin agent with its fake model, or a model reached outside",
            )
        )


def compose_document(project: str, workdir: str, answer_key: str = "image") -> dict[str, Any]:
    """The project's ``compose.yaml`` (see the module docstring for the mapping).

    Args:
        project: The compose name.
        workdir: The student's working directory.
        answer_key: ``image`` (Karotte's layout: root-only in the run's image) or ``verifier``
            (``main`` builds from ``Containerfile.denv``, without :data:`KEY_DIRS`' contents).

    Returns:
        The document.
    """
    quiet = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    build = {"context": ".", "dockerfile": "Containerfile"}
    agent_file = AGENT_CONTAINERFILE if answer_key == "verifier" else "Containerfile"
    return {
        "name": project,
        "services": {
            "main": {
                "build": {**build, "dockerfile": agent_file},
                "command": ["sleep", "infinity"],
                "init": True,
                "working_dir": workdir,
                "environment": {"KAROTTE_SANDBOX": "gvisor", **quiet},
                "mem_limit": MEMORY,
                "cpus": CPUS,
                "pids_limit": PIDS,
            }
        },
        "x-denv": {
            "kind": "rl-environment",
            "agent": {
                "service": "main",
                "user": "root",
                "workdir": workdir,
                "sandbox": "gvisor",
                # What Karotte's own docker:gvisor runtime adds, both of gVisor's kernel:
                # SYS_ADMIN builds each student session's PID namespace, SYS_PTRACE lets the
                # memory watchdog read the student's /proc/PID/smaps.
                "capabilities": ["SYS_ADMIN", "SYS_PTRACE"],
            },
            "egress": "deny",
            "verifier": {
                "build": dict(build),
                "user": "root",
                "egress": "deny",
                "services": False,
                "environment": dict(quiet),
                "command": ["/root/.venv/bin/python", "/tests/grade.py", OUT],
                "timeout": VERIFIER_TIMEOUT,
                "tests": f"./{VERIFIER_DIR}",
                "submission": [OUT],
            },
        },
    }


def agent_containerfile(containerfile: str) -> str:
    """``Containerfile.denv``: the environment's Containerfile, then its answer key taken out.

    Args:
        containerfile: The environment's Containerfile.

    Returns:
        The Containerfile ``main`` builds with ``--answer-key verifier``.
    """
    dirs = " ".join(KEY_DIRS)
    return (
        containerfile.rstrip("\n")
        + "\n\n# Added by 'denv import karotte --answer-key verifier': what only root may read"
        + "\n# stays in the verifier's image (built from Containerfile); here they are empty.\n"
        + f"USER root\nRUN rm -rf {dirs} && mkdir -m 0700 {dirs}\n"
    )


def _header(name: str, uid: int, workdir: str) -> str:
    return (
        f"# Written by 'denv import karotte' from {name}: 'main' is the environment's image;\n"
        "# run 'karotte run --no-containerized' in it as root (gVisor's kernel), with the\n"
        f"# student uid {uid} in {workdir}. The verifier is the same image built again, root\n"
        f"# in its own container: {VERIFIER_DIR}/grade.py re-runs Karotte's judges over {OUT}\n"
        "# (the run's transcript and saved submissions). Egress: deny.\n"
    )


def import_environment(
    env_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    project: str | None = None,
    *,
    answer_key: str = "image",
    labels: tuple[str, str] | None = None,
) -> ImportResult:
    """Writes OUT, a denv project folder, from the Karotte environment folder DIR.

    OUT gets DIR's files (not ``.venv``, ``.git``, ``out``, caches), ``compose.yaml`` with
    ``x-denv``, and ``denv-verifier/grade.py``. Nothing is written when DIR is refused.

    Args:
        env_dir: The Karotte environment folder.
        out_dir: The folder to write (missing or empty).
        project: The compose name (default: DIR's name as a denv name).
        answer_key: ``image`` (default: where Karotte keeps it, root-only in the run's image) or
            ``verifier`` (only in the verifier's image: ``main`` builds from
            ``Containerfile.denv``, which empties ``/root_data`` and ``/intermediate_data``; the
            run's own grading then cannot read them).
        labels: How refusals name DIR and OUT (default: as given).

    Returns:
        What was written.

    Raises:
        KarotteImportError: One line naming the file and the key.
    """
    src, out = Path(env_dir), Path(out_dir)
    dir_label, out_label = labels or (str(env_dir).rstrip("/") or "/", str(out_dir))
    if answer_key not in ("image", "verifier"):
        raise KarotteImportError(f"answer_key={answer_key!r}: expected image or verifier")
    for rel in ("pyproject.toml", "Containerfile", "src/environment/__init__.py"):
        if not (src / rel).is_file():
            raise KarotteImportError(M.karotte_missing_file(f"{dir_label}/{rel}"))
    pyproject_label = f"{dir_label}/pyproject.toml"
    name = (_read_toml(src / "pyproject.toml", pyproject_label).get("project") or {}).get("name")
    if name != "environment":
        raise KarotteImportError(
            M.import_unsupported(
                pyproject_label,
                "project.name",
                f"karotte loads tasks from the package 'environment', not {name!r}",
            )
        )
    env = _check_containerfile(
        (src / "Containerfile").read_text(encoding="utf-8"), f"{dir_label}/Containerfile"
    )
    _check_manifest(src, f"{dir_label}/.manifest.json")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise KarotteImportError(M.import_not_empty(out_label), "conflict")

    uid = int(env.get("KAROTTE_DEMOTE_ID", "1000"))
    workdir = env.get("KAROTTE_WORKDIR", "/workdir")
    project = project or project_name(src.resolve().name, prefix="")
    shutil.copytree(
        src, out, ignore=lambda _d, names: [n for n in names if n in SKIP], dirs_exist_ok=True
    )
    (out / VERIFIER_DIR).mkdir(exist_ok=True)
    grader = Path(__file__).with_name("_grade.py").read_text(encoding="utf-8")
    (out / VERIFIER_DIR / "grade.py").write_text(grader, encoding="utf-8")
    if answer_key == "verifier":
        containerfile = (src / "Containerfile").read_text(encoding="utf-8")
        (out / AGENT_CONTAINERFILE).write_text(agent_containerfile(containerfile), encoding="utf-8")
    doc = compose_document(project, workdir, answer_key)
    text = _header(src.resolve().name, uid, workdir) + yaml.safe_dump(doc, sort_keys=False)
    (out / "compose.yaml").write_text(text, encoding="utf-8")
    notes = [
        "the agent (Karotte's harness) is root inside gVisor; the student is uid "
        f"{uid}; the verifier grades {OUT}"
    ]
    if any("RubricJudge" in f.read_text(errors="replace") for f in src.glob("src/**/*.py")):
        notes.append(
            "RubricJudge asks a model to grade: neither the run nor the verifier reaches one "
            "(egress deny), so a rubric step fails here"
        )
    if not (src / "wheels").is_dir():
        notes.append(
            "denv builds reach Debian mirrors and the host's pip index only: a Containerfile that "
            "downloads uv, Python or packages from elsewhere fails to build"
        )
    return ImportResult(
        directory=str(out.resolve()),
        project=project,
        workdir=workdir,
        student_uid=uid,
        services=["main"],
        files=sorted(p.name for p in out.iterdir()),
        notes=notes,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m denv.karotte._import DIR OUT [--project P] [--answer-key K] [--json]``.

    Args:
        argv: The arguments (default ``sys.argv[1:]``).

    Returns:
        0; 2 for an environment that cannot be mapped, 3 for an OUT that holds something (one
        line on stderr).
    """
    parser = importer_parser("karotte", "a Karotte environment folder")
    parser.add_argument("--answer-key", choices=("image", "verifier"), default="image")
    args = parser.parse_args(argv)
    return finish(
        lambda: import_environment(args.dir, args.out, args.project, answer_key=args.answer_key),
        as_json=args.json,
    )


if __name__ == "__main__":
    sys.exit(main())
