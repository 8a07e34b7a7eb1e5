"""The Harbor adapter's parts that need no Harbor (it needs Python >= 3.12): the task source
it deploys, the folder transfers, and the command the docs show (the e2e test runs it)."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from denv.harbor import DenvHarborOptions, project_name, task_source
from denv.harbor._files import extract_contents, tar_dir
from denv.harbor._options import parse_ek_options
from denv.harbor._task import artifact_parents, dockerfile_workdir, is_root, prepare_script

HELLO = REPO / "examples" / "harbor-hello"


def test_project_name_is_a_valid_denv_name() -> None:
    assert project_name("harbor-hello") == "harbor-harbor-hello"
    assert project_name("Org/My_Task.v2") == "harbor-org-my-task-v2"
    assert len(project_name("x" * 100)) == 40


def test_dockerfile_workdir_is_the_last_absolute_one() -> None:
    assert dockerfile_workdir("FROM a\nWORKDIR /src\nRUN x\nworkdir /app\n") == "/app"
    assert dockerfile_workdir("FROM a\nWORKDIR $HOME\n") is None
    assert dockerfile_workdir("FROM a\n") is None


def test_dockerfile_task_gets_a_compose_file_with_service_main() -> None:
    src = task_source(HELLO / "environment", "harbor-harbor-hello")
    assert src.compose_name == "compose.yaml"
    assert src.workdir == "/app"
    files = dict(src.extra_files)
    compose = yaml.safe_load(files["compose.yaml"])
    assert compose["services"]["main"]["build"] == {"context": ".", "dockerfile": "Dockerfile.denv"}
    assert compose["x-denv"]["agent"] == {"service": "main", "user": "1000", "workdir": "/app"}
    dockerfile = files["Dockerfile.denv"].decode()
    original = (HELLO / "environment" / "Dockerfile").read_text()
    assert dockerfile.startswith(original.rstrip("\n"))
    assert "\nUSER root\nRUN " in dockerfile and dockerfile.endswith("WORKDIR /app\n")


def test_prepare_script_gives_tests_and_verifier_logs_to_the_verifier_only() -> None:
    script = prepare_script("/app")
    assert "chown 1001:1001 /logs/verifier /tests" in script
    assert "chown -R 1000:1000 /app /logs/agent /logs/artifacts /solution" in script
    assert "chmod 755 /logs /logs/verifier /tests" in script


def test_prepare_script_creates_more_agent_folders_when_asked() -> None:
    script = prepare_script("/workspace", ("/app", "/srv/out dir"))
    assert "mkdir -p /workspace /app '/srv/out dir' /logs/agent" in script
    assert "chown -R 1000:1000 /workspace /app '/srv/out dir' /logs/agent" in script


def test_artifact_parents_reads_the_task_toml_above_the_tests(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    assert artifact_parents(tmp_path / "tests") == ()  # no task.toml
    (tmp_path / "task.toml").write_text(
        'artifacts = ["/app/hello.txt", "relative/x", {source = "/srv/out/", service = "db"}]\n'
        "[[steps]]\nname = 's1'\nartifacts = ['/app/b.txt', '/top']\n"
    )
    assert artifact_parents(tmp_path / "tests") == ("/app", "/srv")
    (tmp_path / "steps" / "s1" / "tests").mkdir(parents=True)
    assert artifact_parents(tmp_path / "steps" / "s1" / "tests") == ("/app", "/srv")
    (tmp_path / "task.toml").write_text("artifacts = [\n")  # not TOML: nothing to create
    assert artifact_parents(tmp_path / "tests") == ()


def test_image_only_and_compose_tasks(tmp_path: Path) -> None:
    src = task_source(tmp_path, "p", docker_image="python:3.13-slim", workdir="/work")
    assert dict(src.extra_files)["Dockerfile.denv"].decode().startswith("FROM python:3.13-slim\n")
    assert src.workdir == "/work"
    (tmp_path / "docker-compose.yaml").write_text("services:\n  main:\n    image: x\n")
    src = task_source(tmp_path, "p")
    assert src.compose_name == "docker-compose.yaml"  # replaced by its merge (test_harbor_compose)
    assert dict(src.extra_files)["Dockerfile.denv"].decode().startswith("FROM x\n")
    with pytest.raises(FileNotFoundError):
        task_source(tmp_path / "missing", "p")


def test_is_root() -> None:
    assert is_root("root") and is_root(0) and is_root("0") and is_root("0:0")
    assert is_root("00") and is_root("+0") and is_root("-0") and is_root("root:root")
    assert not is_root(None) and not is_root("1000") and not is_root("agent")
    assert not is_root("+1") and not is_root("-") and not is_root("")


def test_folder_round_trip(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "test.sh").write_text("#!/bin/sh\n")
    (src / "test.sh").chmod(0o755)
    (src / "sub" / "data.txt").write_text("x")
    archive = tar_dir(src)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        assert sorted(tar.getnames()) == ["sub", "sub/data.txt", "test.sh"]
        assert tar.getmember("test.sh").mode == 0o755
    # A download holds the folder under its base name; its contents land in the target.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(src, arcname="verifier")
    out = tmp_path / "out"
    extract_contents(buf.getvalue(), out)
    assert (out / "test.sh").read_text() == "#!/bin/sh\n"
    assert (out / "sub" / "data.txt").read_text() == "x"


def test_docs_show_the_command_the_e2e_test_runs() -> None:
    e2e = (REPO / "packages" / "cli" / "src" / "e2e" / "harbor.test.ts").read_text()
    assert '"denv.harbor:DenvEnvironment"' in e2e
    page = (REPO / "docs" / "how-to" / "harbor.md").read_text()
    assert "--env denv.harbor:DenvEnvironment" in page
    assert "deploy/tools-image" in page


def test_archive_hash_is_stable_and_follows_content(tmp_path: Path) -> None:
    from denv.harbor._deploy import archive_sha256

    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    first = task_source(tmp_path, "p")
    assert archive_sha256(first) == archive_sha256(task_source(tmp_path, "p"))
    (tmp_path / "Dockerfile").write_text("FROM debian:trixie-slim\n")
    assert archive_sha256(task_source(tmp_path, "p")) != archive_sha256(first)


# ---------------------------------------------------------------------------- options (--ek)


def test_options_defaults_and_ek_values() -> None:
    defaults = parse_ek_options(DenvHarborOptions, None)
    assert defaults == DenvHarborOptions(
        url=None, token=None, project=None, ttl_sec=3600, agent_sandbox="gvisor"
    )
    # Harbor's agent and verifier are root: in gVisor's kernel by default, never the host's.
    assert (defaults.verifier, defaults.public_network) == ("root", "mirrors")
    plain = parse_ek_options(DenvHarborOptions, {"agent_sandbox": "none"})
    assert plain.verifier == "1001"
    # Harbor's --ek parses values as JSON: numbers arrive as numbers, text as text.
    opts = parse_ek_options(
        DenvHarborOptions,
        {"url": "http://cp:7070", "token": "", "project": "", "ttl_sec": "60"}
        | {"verifier_user": 1234, "public_network": "deny"},
    )
    assert (opts.url, opts.token, opts.project) == ("http://cp:7070", None, None)
    assert (opts.ttl_sec, opts.verifier_user, opts.public_network) == (60, "1234", "deny")
    assert "token" not in repr(parse_ek_options(DenvHarborOptions, {"token": "s3cret"}))


def test_an_unknown_option_is_refused_in_one_line_naming_it() -> None:
    with pytest.raises(ValueError, match="unknown option 'ttl'") as caught:
        parse_ek_options(DenvHarborOptions, {"ttl": 60})
    assert str(caught.value) == (
        "denv.harbor:DenvEnvironment --ek: unknown option 'ttl' "
        "(the options: url, token, project, ttl_sec, agent_sandbox, verifier_user, public_network)"
    )


def test_a_value_that_does_not_fit_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="public_network") as caught:
        parse_ek_options(DenvHarborOptions, {"public_network": "allow"})
    assert str(caught.value) == (
        "denv.harbor:DenvEnvironment --ek: public_network='allow': expected one of mirrors, "
        "refuse, deny"
    )
    with pytest.raises(ValueError, match=r"ttl_sec='soon': .*integer") as caught:
        parse_ek_options(DenvHarborOptions, {"ttl_sec": "soon", "token": ["s3cret"]})
    assert "\n" not in str(caught.value)
    assert "token=***" in str(caught.value) and "s3cret" not in str(caught.value)


def test_docs_list_every_option() -> None:
    page = (REPO / "docs" / "how-to" / "harbor.md").read_text()
    table = page[page.index("Options go through `--ek key=value`") :].split("\n\n")[1]
    first_cells = re.findall(r"^\| ([^|]+)\|", table, flags=re.M)[2:]  # after the header
    listed = {name for cell in first_cells for name in re.findall(r"`(\w+)`", cell)}
    assert listed == set(DenvHarborOptions.model_fields)


def test_a_root_verifier_needs_the_gvisor_sandbox() -> None:
    with pytest.raises(ValueError, match="verifier_user") as caught:
        parse_ek_options(DenvHarborOptions, {"agent_sandbox": "none", "verifier_user": "00"})
    assert str(caught.value) == (
        "denv.harbor:DenvEnvironment --ek: verifier_user='00': root needs agent_sandbox=gvisor; "
        "give another uid (default 1001)"
    )
    assert parse_ek_options(DenvHarborOptions, {"verifier_user": 0}).verifier == "0"


def test_the_generated_compose_confines_a_root_agent_and_maps_egress(tmp_path: Path) -> None:
    from denv.harbor._task import AgentPolicy

    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    agent = AgentPolicy(user="root", sandbox="gvisor", egress="mirrors")
    files = dict(task_source(tmp_path, "p", agent=agent).extra_files)
    compose = yaml.safe_load(files["compose.yaml"])
    assert compose["x-denv"] == {
        "kind": "rl-environment",
        "agent": {"service": "main", "user": "root", "workdir": "/app", "sandbox": "gvisor"},
        "egress": "mirrors",
    }
    # A root agent keeps the image's owners: Harbor's folders are only created.
    dockerfile = files["Dockerfile.denv"].decode()
    assert "chown" not in dockerfile and "mkdir -p /app /logs/agent" in dockerfile
    plain = dict(task_source(tmp_path, "p").extra_files)
    assert yaml.safe_load(plain["compose.yaml"])["x-denv"]["agent"]["user"] == "1000"
    assert "chown -R 1000:1000 /app" in plain["Dockerfile.denv"].decode()
