"""docs/blog/hud.md and the HUD section of docs/reference/python.md cannot drift from the code
the HUD tests run."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import denv.hud

REPO = Path(__file__).resolve().parents[3]
BLOG = REPO / "docs" / "blog" / "hud.md"
PYTHON_MD = REPO / "docs" / "reference" / "python.md"
HERE = Path(__file__).resolve().parent


def blog_block(lang: str, first: str) -> str:
    """The blog's ```LANG block whose first line starts with ``first``."""
    for block in re.findall(rf"```{lang}\n(.*?)```", BLOG.read_text(), flags=re.S):
        if block.startswith(first):
            return str(block)
    raise AssertionError(f"{BLOG} has no ```{lang} block starting with {first!r}")


def test_the_blogs_environment_is_the_module_the_live_test_runs() -> None:
    module = (HERE / "quickstart_env.py").read_text()
    block = blog_block("python", "import json\n")
    assert module.endswith(block)


def test_the_blogs_run_is_what_the_live_test_runs() -> None:
    block = blog_block("python", "from hud.agents import create_agent")
    compile(block, str(BLOG), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    live = (HERE / "test_hud_eval_live.py").read_text()
    assert 'runtime = DenvRuntime(quickstart, project="quickstart")' in block
    assert 'Taskset("quickstart", [FIX_TOTALS]).run(' in block
    assert "from quickstart_env import FIX_TOTALS, quickstart" in live
    assert 'taskset = Taskset("quickstart", [task])' in live
    assert "taskset.run(solver, runtime=runtime)" in live


def test_the_blogs_harbor_steps_are_the_ones_the_test_takes() -> None:
    export = blog_block("python", "import asyncio\n\nfrom hud.integrations.harbor import export")
    test = (HERE / "test_hud_harbor.py").read_text()
    assert 'answer_file="/env/answer.txt"' in export
    assert 'answer_file="/env/answer.txt"' in test
    first, create, deploy = blog_block("sh", "denv import harbor").strip().splitlines()
    argv = shlex.split(first)
    assert argv[:3] == ["denv", "import", "harbor"]
    assert argv[3] == "harbor/count-759529a8"  # the folder the test's export writes
    assert '"count-759529a8"' in test
    assert argv[4:] == ["--out", "count"]
    # The project the import names (the test checks it is the task's name).
    assert 'answer["project"] == task.name' in test
    assert shlex.split(create) == ["denv", "projects", "create", "count-759529a8"]
    assert shlex.split(deploy) == ["denv", "deploy", "count", "--project", "count-759529a8"]


def test_every_public_name_of_denv_hud_is_documented() -> None:
    text = PYTHON_MD.read_text()
    section = text[text.index("## `denv.hud`") : text.index("## `denv.conformance`")]
    assert [name for name in denv.hud.__all__ if name not in section] == []
