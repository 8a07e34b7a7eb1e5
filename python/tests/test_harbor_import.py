"""``denv import harbor``: a Harbor task folder as a denv project folder (denv.harbor._import).

The cases of the former TypeScript importer's tests, with the same messages.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import denv
from conftest import REPO
from denv import messages
from denv.harbor._import import HarborImportError, import_task, main

HELLO = REPO / "examples" / "harbor-hello"
SHOP = REPO / "examples" / "harbor-shop"
MULTI = REPO / "examples" / "harbor-multi"
FIXTURE = REPO / "python" / "tests" / "harbor_merge"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _copy(src: Path, tmp_path: Path) -> Path:
    task = tmp_path / "task"
    shutil.copytree(src, task)
    return task


def _compose(out: Path) -> Any:
    return _load(out / "compose.yaml")


def test_dockerfile_task_root_in_gvisor_network_mode_by_phase(tmp_path: Path) -> None:
    out = tmp_path / "hello-root"
    import_task(HELLO, out, "hello")
    x = _compose(out)["x-denv"]
    assert x["agent"] == {"service": "main", "user": "root", "workdir": "/app", "sandbox": "gvisor"}
    # examples/harbor-hello says network_mode = "no-network": no egress in either phase.
    assert [x["egress"], x["verifier"]["egress"], x["verifier"]["user"]] == ["deny", "deny", "root"]
    assert x["verifier"]["build"] == {"context": "./environment", "dockerfile": "Dockerfile.denv"}
    df = (out / "environment" / "Dockerfile.denv").read_text()
    assert (
        "RUN set -e; mkdir -p /app /logs/agent /logs/artifacts /logs/verifier /tests /solution\n"
        in df
    )
    assert "chown" not in df
    # Harbor's default network_mode (public) per phase: the package mirrors through the proxy.
    task = _copy(HELLO, tmp_path)
    toml = "\n".join(
        line
        for line in (task / "task.toml").read_text().split("\n")
        if not line.startswith("network_mode = ")
    )
    (task / "task.toml").write_text(
        toml.replace("[agent]\n", '[agent]\nnetwork_mode = "no-network"\n')
    )
    pub = tmp_path / "hello-public"
    import_task(task, pub, "hello")
    p = _compose(pub)["x-denv"]
    assert [p["egress"], p["verifier"]["egress"]] == ["deny", "mirrors"]


def test_dockerfile_task_without_sandbox(tmp_path: Path) -> None:
    out = tmp_path / "hello-denv"
    r = import_task(HELLO, out, "hello", agent_sandbox="none")
    assert (r.project, r.workdir, r.services) == ("hello", "/app", ["main"])
    c = _compose(out)
    assert c["name"] == "hello"
    assert c["services"]["main"]["build"] == {
        "context": "./environment",
        "dockerfile": "Dockerfile.denv",
    }
    assert c["services"]["main"]["working_dir"] == "/app"
    assert c["x-denv"]["agent"] == {"service": "main", "user": "1000", "workdir": "/app"}
    verifier = c["x-denv"]["verifier"]
    assert verifier["build"] == {
        "context": "./environment",
        "dockerfile": "Dockerfile.denv",
        "args": {"DENV_WORKDIR_OWNER": "1001"},
    }
    assert (verifier["user"], verifier["timeout"], verifier["tests"]) == ("1001", 120, "./tests")
    assert verifier["submission"] == ["/app"]
    assert "exec bash /tests/test.sh" in verifier["command"][-1]
    df = (out / "environment" / "Dockerfile.denv").read_text()
    assert df.startswith("FROM debian:bookworm-slim\nWORKDIR /app\n")
    assert "ARG DENV_WORKDIR_OWNER=1000" in df
    for f in ("instruction.md", "task.toml", "tests/test.sh", "solution/solve.sh"):
        assert (out / f).exists(), f


def test_compose_task_keeps_the_other_services(tmp_path: Path) -> None:
    out = tmp_path / "shop-denv"
    r = import_task(SHOP, out, "shop")
    assert r.services == ["main", "db"]
    c = _compose(out)
    assert c["services"]["db"]["build"] == {"context": "./environment/db"}
    assert c["services"]["main"]["build"] == {
        "context": "./environment",
        "dockerfile": "Dockerfile.denv",
    }
    assert c["services"]["main"]["depends_on"] == {"db": {"condition": "service_healthy"}}
    assert c["volumes"] == {"shopdata": {}}
    assert c["x-denv"]["agent"]["workdir"] == "/app"


def _toml(text: str) -> Callable[[Path], None]:
    return lambda d: (d / "task.toml").write_text(text)


def _own_image(d: Path) -> None:
    (d / "task.toml").write_text('[verifier]\nenvironment_mode = "separate"\n')
    (d / "tests" / "Dockerfile").write_text("FROM x\n")


def _no_main(d: Path) -> None:
    # Harbor's base gives main its build from environment/Dockerfile: without one, nothing does.
    (d / "environment" / "Dockerfile").unlink()
    (d / "environment" / "docker-compose.yaml").write_text("services:\n  app: {image: x}\n")


OWN_VERIFIER = "a verifier environment of its own (denv's verifier is the task's image built again)"

REFUSALS: list[tuple[str, Callable[[Path], None], str]] = [
    (
        "unknown verifier mode",
        _toml('[verifier]\nenvironment_mode = "elsewhere"\n'),
        messages.import_unsupported(
            "T/task.toml",
            "verifier.environment_mode",
            '\'elsewhere\' (expected "shared" or "separate")',
        ),
    ),
    (
        "separate verifier with an environment of its own",
        _toml('[verifier.environment]\ndocker_image = "v"\n'),
        f"T/task.toml: 'verifier.environment' cannot be mapped: {OWN_VERIFIER}",
    ),
    (
        "separate verifier with an image of its own",
        _own_image,
        f"T/tests/Dockerfile: 'tests/Dockerfile' cannot be mapped: {OWN_VERIFIER}",
    ),
    (
        "separate verifier with a relative artifact",
        _toml('artifacts = ["out.txt"]\n[verifier]\nenvironment_mode = "separate"\n'),
        "T/task.toml: 'artifacts' cannot be mapped: \"out.txt\" (a separate verifier's artifacts "
        "must be absolute paths)",
    ),
    (
        "gpus",
        _toml("[environment]\ngpus = 1\n"),
        "T/task.toml: 'environment.gpus' cannot be mapped: denv does not offer GPUs",
    ),
    (
        "allowlist",
        _toml('[verifier]\nnetwork_mode = "allowlist"\n'),
        "T/task.toml: 'verifier.network_mode' cannot be mapped: 'allowlist' (an rl-environment "
        "reaches no host but the package mirrors)",
    ),
    (
        "bad toml",
        _toml('[agent]\nuser = "root\n'),
        "T/task.toml:2: ",
    ),
    (
        "no tests",
        lambda d: shutil.rmtree(d / "tests"),
        "T/tests/test.sh: missing; a Harbor task needs it",
    ),
    (
        "no environment",
        lambda d: shutil.rmtree(d / "environment"),
        "T/environment: no Dockerfile, no docker-compose.yaml and no [environment] docker_image "
        "in task.toml",
    ),
    (
        "compose without a main to build",
        _no_main,
        "T/environment/docker-compose.yaml: 'services.main' cannot be mapped: has neither build "
        "nor image",
    ),
    (
        "a build context outside environment/",
        lambda d: (d / "environment" / "docker-compose.yaml").write_text(
            "services:\n  db: {build: ../db}\n"
        ),
        "T/environment/docker-compose.yaml: 'services.db.build.context' cannot be mapped: '../db' "
        "is not a folder inside environment/",
    ),
]


@pytest.mark.parametrize(("name", "mutate", "message"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_file_and_the_key(
    tmp_path: Path, name: str, mutate: Callable[[Path], None], message: str
) -> None:
    task = _copy(HELLO, tmp_path)
    mutate(task)
    out = tmp_path / "o"
    with pytest.raises(HarborImportError) as caught:
        import_task(task, out, "p", labels=("T", "O"))
    assert str(caught.value).startswith(message), name
    assert "\n" not in str(caught.value)
    assert not out.exists()  # a refused task writes nothing


def test_bad_toml_names_the_line(tmp_path: Path) -> None:
    task = _copy(HELLO, tmp_path)
    (task / "task.toml").write_text('[agent]\nuser = "root\n')
    with pytest.raises(HarborImportError, match=r"^T/task\.toml:2: \S") as caught:
        import_task(task, tmp_path / "o", "p", labels=("T", "O"))
    assert "(at line" not in str(caught.value)


def test_separate_verifier_gets_the_artifacts_back(tmp_path: Path) -> None:
    task = _copy(HELLO, tmp_path)
    (task / "task.toml").write_text(
        'artifacts = ["/app/hello.txt", "/srv/out/"]\n\n[verifier]\nenvironment_mode = "separate"\n'
    )
    out = tmp_path / "o"
    import_task(task, out, "p", agent_sandbox="none")
    verifier = _compose(out)["x-denv"]["verifier"]
    assert verifier["submission"] == ["/app/hello.txt", "/srv/out"]
    script = verifier["command"][2]
    assert (
        "elif [ -e '/submission/app/hello.txt' ]; then cp --preserve=mode,timestamps "
        "'/submission/app/hello.txt' '/app/hello.txt'; fi;"
    ) in script
    assert (
        "if [ -d '/submission/srv/out' ]; then mkdir -p '/srv/out' && cp -R "
        "--preserve=mode,timestamps '/submission/srv/out'/. '/srv/out'/;"
    ) in script
    assert script.endswith("exec bash /tests/test.sh")
    # /srv exists in both images, owned by the image's user (the workdir /app already is).
    dockerfile = (out / "environment" / "Dockerfile.denv").read_text()
    assert "mkdir -p /app /srv /logs/agent" in dockerfile
    assert "chown -R ${DENV_WORKDIR_OWNER}:${DENV_WORKDIR_OWNER} /app /srv;" in dockerfile


def test_refuses_a_non_empty_out(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "x").write_text("")
    with pytest.raises(HarborImportError, match=r"^O is not empty") as caught:
        import_task(HELLO, out, "p", labels=("T", "O"))
    assert str(caught.value) == messages.import_not_empty("O")
    assert caught.value.code == "conflict"


def test_refuses_a_root_agent_without_a_sandbox(tmp_path: Path) -> None:
    task = _copy(HELLO, tmp_path)
    (task / "task.toml").write_text('[agent]\nuser = "root"\n')
    with pytest.raises(HarborImportError) as caught:
        import_task(task, tmp_path / "o", "p", agent_sandbox="none", labels=("T", "O"))
    assert str(caught.value) == (
        "T/task.toml: 'agent.user' cannot be mapped: root without --agent-sandbox gvisor (the "
        "agent is never root outside a sandbox, protection 1)"
    )


def test_reads_task_toml_as_toml(tmp_path: Path) -> None:
    # Inline tables, multi-line strings and comments as TOML says.
    task = _copy(HELLO, tmp_path)
    (task / "task.toml").write_text(
        'version = "1.0"\n[environment]\nworkdir = "/w" # c\nnetwork_mode = """public"""\n'
        "[verifier]\nenv = { A = 1, B = true }\ntimeout_sec = 1.5\n"
    )
    out = tmp_path / "o"
    r = import_task(task, out, "p")
    assert r.workdir == "/w"
    verifier = _compose(out)["x-denv"]["verifier"]
    assert verifier["environment"] == {"A": "1", "B": "true"}
    assert (verifier["timeout"], verifier["egress"]) == (2, "mirrors")


# ------------------------------------------------ compose tasks that extend Harbor's base


def test_the_shared_fixture_builds_main_and_records_the_drops(tmp_path: Path) -> None:
    out = tmp_path / "fixture-denv"
    r = import_task(FIXTURE, out, "fixture")
    assert r.services == ["main", "cache"]
    assert r.notes == _load(FIXTURE / "expected-compose.yaml")["notes"]
    c = _compose(out)
    main = c["services"]["main"]
    assert main["build"] == {"context": "./environment", "dockerfile": "Dockerfile.denv"}
    assert (main["cpus"], main["mem_limit"], main["working_dir"]) == (2, "1024m", "/app")
    assert main["volumes"] == ["data:/data"]
    assert "image" not in main
    assert c["services"]["cache"]["build"] == {"context": "./environment/cache"}
    assert "pull_policy" not in c["services"]["cache"]
    assert (
        "# Merged over Harbor's base compose: services.cache.pull_policy: dropped"
        in (out / "compose.yaml").read_text()
    )


def test_harbor_multi_whose_main_has_no_build(tmp_path: Path) -> None:
    out = tmp_path / "multi-denv"
    r = import_task(MULTI, out, "multi")
    assert r.services == ["main", "kv"]
    c = _compose(out)
    assert c["services"]["main"]["build"] == {
        "context": "./environment",
        "dockerfile": "Dockerfile.denv",
    }
    assert c["services"]["main"]["depends_on"] == {"kv": {"condition": "service_healthy"}}
    assert c["services"]["kv"]["build"] == {"context": "./environment/kv"}


def test_a_compose_file_without_main_gets_harbors_main(tmp_path: Path) -> None:
    task = _copy(HELLO, tmp_path)
    (task / "environment" / "docker-compose.yaml").write_text("services:\n  app: {image: x}\n")
    r = import_task(task, tmp_path / "o", "p")
    c = _compose(Path(r.directory))
    assert list(c["services"]) == ["main", "app"]
    assert c["services"]["main"]["command"] == ["sh", "-c", "sleep infinity"]


# ---------------------------------------------------------------------------- entry point


def test_main_prints_the_result_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([str(HELLO), "out", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == {
        "directory": str(tmp_path / "out"),
        "project": "harbor-hello",
        "workdir": "/app",
        "services": ["main"],
        "files": [
            "compose.yaml",
            "environment",
            "instruction.md",
            "solution",
            "task.toml",
            "tests",
        ],
        "notes": [],
    }


def test_main_exits_2_with_one_line(tmp_path: Path) -> None:
    task = _copy(HELLO, tmp_path)
    (task / "task.toml").write_text("[environment]\ngpus = 1\n")
    done = subprocess.run(
        [sys.executable, "-m", "denv.harbor._import", "task", "o", "--project", "p"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(denv.__file__).parents[1])},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert (
        done.stderr
        == "task/task.toml: 'environment.gpus' cannot be mapped: denv does not offer GPUs\n"
    )
    assert done.stdout == ""
