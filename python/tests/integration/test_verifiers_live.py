"""verifiers on denv, live: a real ``vf-eval`` of the quickstart through ``denv.verifiers``.

The command is the one docs/blog/verifiers.md shows (``BLOG``), run against the live control
plane with a scripted model on loopback (``scripted_model.py``): three rollouts at once, one
solving (its ``bash`` call runs the quickstart's fix in its sandbox), one doing nothing and one
whose model fails. denv's verifier grades the first 1.0 and the second 0.0 on forks of their
episodes; every sandbox, the failed rollout's too, is destroyed, and the graded snapshots are
deleted. The Harbor-taskset route is checked for the configuration it would take (verifiers'
Harbor taskset needs Harbor, which needs Python >= 3.12: see the blog).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from openenv_support import denv_cli
from scripted_model import ScriptedModel
from verifiers.v1.tasksets.harbor.taskset import HarborConfig, cache_dir, resolve_image

from conftest import QUICKSTART_COMPOSE, REPO, Live
from denv import Client
from denv.inspect import DenvSandboxConfig
from denv.inspect._config import ensure_version, resolve_settings

pytestmark = pytest.mark.integration

BLOG = REPO / "docs" / "blog" / "verifiers.md"
HERE = Path(__file__).resolve().parent
VF_EVAL = Path(sys.executable).parent / "vf-eval"


def blog_block(lang: str, first: str) -> str:
    """The blog's ```LANG block whose first line starts with ``first``."""
    for block in re.findall(rf"```{lang}\n(.*?)```", BLOG.read_text(), flags=re.S):
        if block.startswith(first):
            return str(block)
    raise AssertionError(f"{BLOG} has no ```{lang} block starting with {first!r}")


def blog_command(first: str) -> list[str]:
    """The blog's shell command starting with ``first``, as argv (``$MODEL_URL`` left as is)."""
    return shlex.split(blog_block("sh", first).replace("\\\n", " "))


@pytest.fixture(scope="module")
def version(live: Live) -> str:
    config = DenvSandboxConfig(
        project=live.project, compose=str(QUICKSTART_COMPOSE), url=live.url, token=live.token
    )
    return asyncio.run(ensure_version(resolve_settings(config)))


def test_the_blogs_environment_module_is_the_one_evaluated() -> None:
    module = (HERE / "vf_env" / "denv_quickstart.py").read_text()
    block = blog_block("python", "from denv.verifiers import")
    assert block in module


def test_vf_eval_grades_each_rollout_with_denvs_verifier(
    live: Live, version: str, tmp_path: Path
) -> None:
    argv = blog_command("vf-eval")
    assert argv[:2] == ["vf-eval", "denv-quickstart"]
    assert argv[argv.index("--env.taskset.project") + 1] == "quickstart"
    with Client(live.url, live.token) as client:
        before = {d.id for d in client.list_deployments(live.project)}
        versions_before = {v.id for v in client.list_versions(live.project)}
    env = {
        **os.environ,
        "DENV_URL": live.url,
        "DENV_TOKEN": live.token,
        # vf-eval's harness programs run with uv (scripts/setup-python installs it in the venv).
        "PATH": f"{VF_EVAL.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(HERE / "vf_env"),
        "MODEL_API_KEY": "scripted",
    }
    env.pop("DENV_PROJECT", None)
    with ScriptedModel(["solve", "idle", "fail"]) as model:
        args = [a.replace("$MODEL_URL", model.base_url) for a in argv[1:]]
        if live.project != "quickstart":
            args[args.index("--env.taskset.project") + 1] = live.project
        run = subprocess.run(
            [str(VF_EVAL), *args, "-r", "3", "-c", "3", "--no-rich", "-o", str(tmp_path)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-5000:]
    episodes = [json.loads(line) for line in next(tmp_path.glob("*/traces.jsonl")).open()]
    traces: dict[str, dict[str, Any]] = {e["traces"][0]["id"]: e["traces"][0] for e in episodes}
    policy = {trace: model.policies[i] for trace, i in model.sessions.items()}
    errors = [e for t in traces.values() for e in t["errors"]]
    assert sorted(policy.values()) == ["fail", "idle", "solve"], errors
    assert set(traces) == set(policy)

    solved = traces[next(t for t, p in policy.items() if p == "solve")]
    idle = traces[next(t for t, p in policy.items() if p == "idle")]
    failed = traces[next(t for t, p in policy.items() if p == "fail")]
    assert solved["ok"] and idle["ok"], (solved["errors"], idle["errors"])
    assert solved["rewards"]["denv_verifier"]["score"] == 1.0
    assert idle["rewards"]["denv_verifier"]["score"] == 0.0
    assert not failed["ok"] and failed["errors"]
    assert "denv_verifier" not in failed["rewards"] or not failed["rewards"]["denv_verifier"]
    # The bash tool ran the fix in the sandbox, as the agent user (uid 1000), not on this host.
    assert len(model.tool_results) == 1
    assert model.tool_results[0].startswith("exit code: 0\n")
    assert "(uid 1000)" in model.tool_results[0]
    # The three rollouts ran at once: each one's setup (its fork) began before any agent ran.
    spans = [t["timing"] for t in traces.values()]
    assert max(s["setup"]["start"] for s in spans) < min(
        s["setup"]["end"] for s in spans if s["setup"]["end"]
    )

    with Client(live.url, live.token) as client:
        new = [d for d in client.list_deployments(live.project) if d.id not in before]
        assert not [s.id for s in client.list_sandboxes() if s.id.startswith(f"{live.project}/")]
        versions_after = {v.id for v in client.list_versions(live.project)}
    forks = {d.environment for d in new if d.kind == "fork"}
    destroyed = {d.environment for d in new if d.kind == "destroy" and d.status == "succeeded"}
    verified = {d.environment: d.result["reward"] for d in new if d.kind == "verify"}
    assert len(forks) == 3, [(d.kind, d.environment) for d in new]
    assert destroyed == forks, "every rollout's sandbox was destroyed, the failed one's too"
    assert sorted(verified.values()) == [0.0, 1.0]
    assert set(verified) < forks
    # The snapshots the verifier graded were deleted (keep_episodes is off).
    assert versions_after == versions_before


def test_harbor_taskset_configuration_for_an_exported_task(
    live: Live, version: str, tmp_path: Path
) -> None:
    """What verifiers' Harbor taskset would be given: `denv export harbor`'s task directory.

    verifiers 0.4.0 reads Harbor tasks through the Harbor CLI (``harbor download --export``)
    into ``~/.cache/harbor/NAME`` and loads a cached directory as it is; its task parsing
    imports Harbor (Python >= 3.12), so here the directory and the rules verifiers applies to
    it without Harbor are checked: the cache path a dataset name maps to, and the image rule.
    """
    lines = blog_block("sh", "cp -r examples/quickstart").strip().splitlines()
    *prepare, export = lines
    for line in prepare:
        line = line.replace("examples/quickstart", str(REPO / "examples" / "quickstart"))
        subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True, timeout=60)
    argv = shlex.split(export)
    assert argv[:3] == ["denv", "export", "harbor"]
    args = [version if a == "quickstart@v1" else a for a in argv[1:]]
    out = denv_cli(live.url, live.token, args, cwd=tmp_path)
    task = tmp_path / argv[4]
    assert version in json.dumps(out)
    assert (task / "task.toml").is_file() and (task / "instruction.md").is_file()
    compose = (task / "environment" / "docker-compose.yaml").read_text()
    assert re.search(r"^  main:", compose, flags=re.M), compose
    # verifiers takes a compose task's main image from the compose file (None: no refusal of
    # a Dockerfile it would not build), and loads a dataset from Harbor's cache by name.
    assert resolve_image(task, None, require_image=False) is None
    config = HarborConfig(dataset=argv[4])
    assert cache_dir(config) == Path.home() / ".cache" / "harbor" / argv[4]
