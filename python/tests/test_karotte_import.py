"""``denv import karotte`` (denv.karotte._import) and the pure parts of its verifier (_grade).

The live run (build, ``karotte run`` in a fork, ``denv verify``) is
packages/cli/src/e2e/karotte.test.ts; the CLI around this module is
packages/cli/src/karotte-import.test.ts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from denv import messages
from denv.karotte import _grade
from denv.karotte._import import (
    KarotteImportError,
    agent_containerfile,
    containerfile_env,
    import_environment,
    main,
)

HELLO = REPO / "examples" / "karotte-hello"
KAROTTE_TS = (REPO / "packages" / "spec" / "src" / "messages" / "karotte.ts").read_text()


def ts_template(name: str) -> str:
    match = re.search(rf"\b{name}: \([^)]*\) =>\s*`([^`]*)`", KAROTTE_TS)
    assert match, f"{name} not found in messages/karotte.ts"
    return match[1]


def render(template: str, **values: object) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: str(values[m[1]]), template)


def copy_hello(tmp_path: Path) -> Path:
    env = tmp_path / "env"
    shutil.copytree(HELLO, env)
    return env


def test_messages_mirror_spec() -> None:
    assert messages.karotte_missing_file("E/Containerfile") == render(
        ts_template("missingFile"), file="E/Containerfile"
    )
    # unsupported and not_empty are every importer's (test_messages.py checks them).


def test_imports_the_example(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = import_environment(HELLO, out)
    assert result.project == "karotte-hello"
    assert (result.workdir, result.student_uid, result.services) == ("/workdir", 1000, ["main"])
    assert result.files == [
        "Containerfile",
        "compose.yaml",
        "denv-verifier",
        "pyproject.toml",
        "root_data",
        "shared_data",
        "src",
        "student_data",
    ]
    doc = yaml.safe_load((out / "compose.yaml").read_text())
    main_service = doc["services"]["main"]
    assert main_service["build"] == {"context": ".", "dockerfile": "Containerfile"}
    assert main_service["command"] == ["sleep", "infinity"]
    assert (main_service["mem_limit"], main_service["cpus"], main_service["pids_limit"]) == (
        "4g",
        2,
        4096,
    )
    assert main_service["environment"]["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    x = doc["x-denv"]
    assert x["agent"] == {
        "service": "main",
        "user": "root",
        "workdir": "/workdir",
        "sandbox": "gvisor",
        "capabilities": ["SYS_ADMIN", "SYS_PTRACE"],
    }
    assert x["egress"] == "deny"
    verifier = x["verifier"]
    assert verifier["command"] == ["/root/.venv/bin/python", "/tests/grade.py", "/out"]
    assert (verifier["tests"], verifier["submission"], verifier["services"]) == (
        "./denv-verifier",
        ["/out"],
        False,
    )
    grader = (out / "denv-verifier" / "grade.py").read_text()
    assert grader == Path(_grade.__file__).read_text()
    # The environment's files as they are: the answer key, the tasks.
    assert (out / "root_data" / "expected.txt").read_text() == "7\n"
    assert (out / "src/environment/tasks/count_words/score.py").is_file()


def test_leaves_local_state_out(tmp_path: Path) -> None:
    env = copy_hello(tmp_path)
    for junk in (".venv/bin", "out", ".git", "src/environment/__pycache__"):
        (env / junk).mkdir(parents=True)
    (env / "wheels").mkdir()
    result = import_environment(env, tmp_path / "o", project="p")
    assert result.project == "p"
    assert "wheels" in result.files
    for junk in (".venv", "out", ".git", "src/environment/__pycache__"):
        assert not (tmp_path / "o" / junk).exists()
    assert not any("fails to build" in n for n in result.notes)


def test_answer_key_only_in_the_verifier(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = import_environment(HELLO, out, answer_key="verifier")
    assert "Containerfile.denv" in result.files
    original = (HELLO / "Containerfile").read_text()
    agent = (out / "Containerfile.denv").read_text()
    assert agent == agent_containerfile(original)
    assert agent.startswith(original.rstrip("\n"))
    assert agent.endswith(
        "USER root\nRUN rm -rf /root_data /intermediate_data && "
        "mkdir -m 0700 /root_data /intermediate_data\n"
    )
    doc = yaml.safe_load((out / "compose.yaml").read_text())
    assert doc["services"]["main"]["build"]["dockerfile"] == "Containerfile.denv"
    assert doc["x-denv"]["verifier"]["build"]["dockerfile"] == "Containerfile"
    assert not (tmp_path / "plain" / "Containerfile.denv").exists()
    with pytest.raises(KarotteImportError, match="expected image or verifier"):
        import_environment(HELLO, tmp_path / "x", answer_key="both")


def test_notes_rubric_judges(tmp_path: Path) -> None:
    env = copy_hello(tmp_path)
    assert not any("RubricJudge" in n for n in import_environment(env, tmp_path / "a").notes)
    step = env / "src/environment/tasks/count_words/__init__.py"
    step.write_text(step.read_text() + "\nfrom karotte.judges import RubricJudge\n")
    notes = import_environment(env, tmp_path / "b").notes
    assert any(n.startswith("RubricJudge asks a model to grade") for n in notes)


def test_reads_the_image_env_with_continuation_lines() -> None:
    text = (
        "FROM x\nENV KAROTTE_CONTAINERIZED=1 \\\n  KAROTTE_WORKDIR=/work \\\n"
        '  KAROTTE_DEMOTE_ID="2000" \\\n  PATH="/opt/uv/:$PATH"\nENV OTHER=1\n'
    )
    env = containerfile_env(text)
    assert env["KAROTTE_WORKDIR"] == "/work"
    assert env["KAROTTE_DEMOTE_ID"] == "2000"
    assert env["OTHER"] == "1"


def refusal(env: Path, out: Path) -> str:
    with pytest.raises(KarotteImportError) as caught:
        import_environment(env, out, labels=("E", "O"))
    assert not out.exists()
    return str(caught.value)


@pytest.mark.parametrize("rel", ["pyproject.toml", "Containerfile", "src/environment/__init__.py"])
def test_refuses_a_missing_file(tmp_path: Path, rel: str) -> None:
    env = copy_hello(tmp_path)
    (env / rel).unlink()
    assert refusal(env, tmp_path / "o") == messages.karotte_missing_file(f"E/{rel}")


def test_refuses_another_package(tmp_path: Path) -> None:
    env = copy_hello(tmp_path)
    pyproject = env / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('name = "environment"', 'name = "env2"'))
    assert refusal(env, tmp_path / "o") == messages.import_unsupported(
        "E/pyproject.toml",
        "project.name",
        "karotte loads tasks from the package 'environment', not 'env2'",
    )


BUILDKIT = (
    "denv builds with Docker's classic builder, which has no BuildKit mounts, secrets or "
    "--chmod; install from files in the build context"
)


@pytest.mark.parametrize(
    ("line", "key"),
    [
        # Karotte's own template installs its venvs this way (a uv_env build secret).
        ("RUN --mount=type=secret,id=uv_env uv sync", "RUN --mount (line 2)"),
        ("COPY --chmod=444 shared_data/ /workdir/shared/", "COPY --chmod (line 2)"),
    ],
)
def test_refuses_buildkit_steps(tmp_path: Path, line: str, key: str) -> None:
    env = copy_hello(tmp_path)
    (env / "Containerfile").write_text(f"FROM x\n{line}\nENV KAROTTE_CONTAINERIZED=1\n")
    assert refusal(env, tmp_path / "o") == messages.import_unsupported(
        "E/Containerfile", key, BUILDKIT
    )


@pytest.mark.parametrize(
    ("env_lines", "key", "reason"),
    [
        (
            "ENV KAROTTE_WORKDIR=/workdir",
            "ENV KAROTTE_CONTAINERIZED",
            "karotte run --no-containerized runs only in an image that sets it",
        ),
        (
            "ENV KAROTTE_CONTAINERIZED=1 KAROTTE_DEMOTE_ID=0",
            "ENV KAROTTE_DEMOTE_ID",
            "the student must be a non-root uid, not '0'",
        ),
        (
            "ENV KAROTTE_CONTAINERIZED=1 KAROTTE_WORKDIR=work",
            "ENV KAROTTE_WORKDIR",
            "expected an absolute path, not 'work'",
        ),
    ],
)
def test_refuses_an_image_karotte_cannot_run_in(
    tmp_path: Path, env_lines: str, key: str, reason: str
) -> None:
    env = copy_hello(tmp_path)
    (env / "Containerfile").write_text(f"FROM x\n{env_lines}\n")
    assert refusal(env, tmp_path / "o") == messages.import_unsupported(
        "E/Containerfile", key, reason
    )


def test_refuses_cli_agents(tmp_path: Path) -> None:
    env = copy_hello(tmp_path)
    (env / ".manifest.json").write_text(json.dumps({"agents": ["claude_code"]}))
    got = refusal(env, tmp_path / "o")
    assert got.startswith("E/.manifest.json: 'agents' cannot be mapped: CLI agents (claude_code)")
    (env / ".manifest.json").write_text(json.dumps({"agents": []}))
    assert import_environment(env, tmp_path / "o").project == "env"


def test_main_prints_json_and_exits_2_or_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    assert main([str(HELLO), str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["directory"] == str(out.resolve())
    assert main([str(HELLO), str(out)]) == 3
    assert capsys.readouterr().err == messages.import_not_empty(str(out)) + "\n"
    assert main([str(tmp_path / "nothing"), str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert err == messages.karotte_missing_file(f"{tmp_path / 'nothing'}/pyproject.toml") + "\n"


def test_grade_without_a_transcript_is_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_grade, "SUBMISSION", tmp_path / "submission")
    monkeypatch.setattr(_grade, "REWARD", tmp_path / "logs/verifier/reward.json")
    assert _grade.main(["grade.py", "/out"]) == 0
    assert json.loads((tmp_path / "logs/verifier/reward.json").read_text()) == {
        "reward": 0.0,
        "steps_passed": 0.0,
    }
    assert "the run did not finish" in capsys.readouterr().out


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to the student's uid needs root")
def test_grade_puts_saved_submissions_back_as_the_student(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    (artifacts / "tree").mkdir(parents=True)
    (artifacts / "answer.txt").write_text("7\n")
    (artifacts / "tree" / "a").write_text("a")
    target = tmp_path / "workdir"
    paths = (target / "answer.txt", target / "tree", target / "missing.txt")
    _grade.restore(artifacts, paths, 1000)
    assert (target / "answer.txt").read_text() == "7\n"
    assert (target / "tree" / "a").read_text() == "a"
    assert not (target / "missing.txt").exists()
    for p in (target / "answer.txt", target / "tree", target / "tree" / "a"):
        assert p.stat().st_uid == 1000
