"""The package as PyPI would carry it: `python -m build` makes an sdist and a wheel (from that
sdist), their metadata is what pyproject.toml declares, the wheel holds every module of the
source, and a fresh venv installs the wheel and imports it."""

from __future__ import annotations

import email
import re
import subprocess
import sys
import tarfile
import venv
import zipfile
from email.message import Message
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import REPO

PYTHON = REPO / "python"
PYPROJECT = tomllib.loads((PYTHON / "pyproject.toml").read_text())["project"]


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(PYTHON)],
        check=True,
        capture_output=True,
    )
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


def wheel_metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as z:
        (name,) = (n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(z.read(name))


def test_names_the_distribution_denv_client_and_the_import_denv(dists: tuple[Path, Path]) -> None:
    sdist, wheel = dists
    assert PYPROJECT["name"] == "denv-client"
    assert sdist.name == f"denv_client-{PYPROJECT['version']}.tar.gz"
    assert wheel.name == f"denv_client-{PYPROJECT['version']}-py3-none-any.whl"
    meta = wheel_metadata(wheel)
    assert meta["Name"] == "denv-client"
    assert meta["Summary"] == PYPROJECT["description"]
    assert meta["Requires-Python"] == PYPROJECT["requires-python"]


def requirement(text: str) -> tuple[str, str, str, str]:
    """Extra, name, version specifiers and the rest of the marker of a requirement line."""
    req = Requirement(text)
    marker = str(req.marker or "")
    found = re.search(r'extra == "([^"]+)"', marker)
    rest = re.sub(r'\s*(and\s+)?extra == "[^"]+"', "", marker).strip()
    if rest.startswith("(") and rest.endswith(")"):
        rest = rest[1:-1]
    return found.group(1) if found else "", canonicalize_name(req.name), str(req.specifier), rest


def test_extras_and_dependencies_are_pyprojects(dists: tuple[Path, Path]) -> None:
    meta = wheel_metadata(dists[1])
    extras: dict[str, list[str]] = PYPROJECT["optional-dependencies"]
    assert sorted(meta.get_all("Provides-Extra") or []) == sorted(extras)
    got = sorted(requirement(line) for line in meta.get_all("Requires-Dist") or [])
    declared = [requirement(d) for d in PYPROJECT["dependencies"]]
    for extra, deps in extras.items():
        declared += [(extra, *requirement(d)[1:]) for d in deps]
    assert got == sorted(declared)
    assert ("harbor", "harbor", "==0.26.0", 'python_version >= "3.12"') in got
    hud = ("hud", "hud", "==0.6.21", 'python_version >= "3.11" and python_version < "3.13"')
    assert hud in got


def test_the_wheel_holds_every_module_and_the_entry_points(dists: tuple[Path, Path]) -> None:
    source = sorted(
        str(p.relative_to(PYTHON / "src"))
        for p in (PYTHON / "src" / "denv").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    with zipfile.ZipFile(dists[1]) as z:
        names = z.namelist()
        (ep,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = z.read(ep).decode()
    assert sorted(n for n in names if n.startswith("denv/")) == source
    assert "denv/py.typed" in source
    assert "[inspect_ai]\ndenv = denv.inspect._registry" in entry_points
    assert "[pytest11]\ndenv-conformance = denv.conformance.plugin" in entry_points
    with tarfile.open(dists[0]) as t:
        members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
    assert {"README.md", "pyproject.toml", "PKG-INFO"} <= members
    assert sorted(m for m in members if m.startswith("src/denv/")) == [f"src/{s}" for s in source]


def test_a_fresh_venv_installs_the_wheel(dists: tuple[Path, Path], tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(dists[1])],
        check=True,
        capture_output=True,
    )
    shown = subprocess.run(
        [
            str(py),
            "-c",
            "import importlib.metadata as m, denv, denv.conformance;"
            "print(m.version('denv-client'), denv.__version__, denv.Client.__name__)",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    assert shown.stdout.split() == [PYPROJECT["version"], PYPROJECT["version"], "Client"]


IMPORT_BOTH = "import {adapter}, {framework}; print({adapter}.__name__, {framework}.__name__)"
FOUND = "import importlib.util as u, sys; print([m for m in sys.argv[1:] if u.find_spec(m)])"

# Each extra, what it makes importable: the adapter module and the framework it adapts.
EXTRAS = {
    "inspect": ("denv.inspect", "inspect_ai"),
    "openenv": ("denv.openenv", "openenv"),
    "verifiers": ("denv.verifiers", "verifiers"),
    "hud": ("denv.hud", "hud"),
}


def test_every_extra_is_covered() -> None:
    # harbor needs Python >= 3.12: deploy/tools-image installs the wheel with it into a fresh
    # Python 3.13 venv (from wheels only, so a requirement it cannot satisfy fails the build).
    assert sorted(PYPROJECT["optional-dependencies"]) == sorted([*EXTRAS, "harbor", "dev"])


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_a_fresh_venv_installs_the_wheel_with_each_extra(
    extra: str, dists: tuple[Path, Path], tmp_path: Path
) -> None:
    # uv (the verifiers extra's own, in the suite's venv) installs from PyPI through its cache,
    # which the suite's venv filled: each extra alone, in its own venv, as a user would get it.
    uv = Path(sys.executable).parent / "uv"
    env_dir = tmp_path / extra
    py = env_dir / "bin" / "python"
    subprocess.run([str(uv), "venv", "-q", "--python", sys.executable, str(env_dir)], check=True)
    installed = subprocess.run(
        [str(uv), "pip", "install", "-q", "--python", str(py), f"{dists[1]}[{extra}]"],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    checked = subprocess.run(
        [str(uv), "pip", "check", "--python", str(py)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    adapter, framework = EXTRAS[extra]
    shown = subprocess.run(
        [str(py), "-c", IMPORT_BOTH.format(adapter=adapter, framework=framework)],
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == [adapter, framework]
    # What the other extras bring stays out: each extra is its own.
    others = [f for e, (_, f) in EXTRAS.items() if e != extra]
    absent = subprocess.run(
        [str(py), "-c", FOUND, *others],
        capture_output=True,
        text=True,
        check=True,
    )
    assert absent.stdout.strip() == "[]"
