"""denv.messages against the TypeScript source of the strings (packages/spec/src/messages.ts)."""

import re

import pytest

from conftest import REPO
from denv import messages

SPEC = REPO / "packages" / "spec" / "src"
# messages.ts and what every importer shares (messages/import.ts), which it re-exports.
MESSAGES_TS = (SPEC / "messages.ts").read_text() + (SPEC / "messages" / "import.ts").read_text()


def ts_template(name: str) -> str:
    match = re.search(rf"\b{name}: \([^)]*\) =>\s*`([^`]*)`", MESSAGES_TS)
    assert match, f"{name} not found in messages.ts"
    return match[1]


def render(template: str, **values: object) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: str(values[m[1]]), template)


def test_agent_root() -> None:
    assert messages.agent_root("app") == render(ts_template("agentRoot"), service="app")


def test_agent_survived() -> None:
    assert messages.agent_survived(3) == render(ts_template("agentSurvived"), count=3)


def test_special_file() -> None:
    got = messages.special_file("pipe", "a FIFO")
    assert got == render(ts_template("specialFile"), path="pipe", reason="a FIFO")


def test_egress_leak() -> None:
    got = messages.egress_leak("shop/alpha", "x")
    assert got == render(ts_template("egressLeak"), environment="shop/alpha", finding="x")


@pytest.mark.parametrize(
    ("py", "ts"),
    [
        ("device", "device"),
        ("fifo", "fifo"),
        ("symlink_escapes", "symlinkEscapes"),
        ("hardlink_escapes", "hardlinkEscapes"),
        ("setid", "setid"),
        ("climbs", "climbs"),
        ("absolute", "absolute"),
        ("too_deep", "tooDeep"),
        ("too_large", "tooLarge"),
        ("unsupported", "unsupported"),
    ],
)
def test_special_file_reasons(py: str, ts: str) -> None:
    match = re.search(rf'\b{ts}: "([^"]*)"', MESSAGES_TS)
    assert match
    assert messages.SPECIAL_FILE_REASONS[py] == match[1]


def test_harbor_public_network() -> None:
    got = messages.harbor_public_network("hello")
    assert got == render(ts_template("publicNetwork"), task="hello")


def test_harbor_task_messages() -> None:
    assert messages.harbor_missing_file("T/task.toml") == render(
        ts_template("missingFile"), file="T/task.toml"
    )
    assert messages.harbor_no_environment("T") == render(ts_template("noEnvironment"), dir="T")
    got = messages.import_unsupported("T/task.toml", "environment.gpus", "why")
    assert got == render(
        ts_template("unsupported"), file="T/task.toml", key="environment.gpus", reason="why"
    )
    assert messages.import_not_empty("O") == render(ts_template("notEmpty"), dir="O")


def test_verifiers_host_shell() -> None:
    got = messages.verifiers_host_shell("bash")
    assert got == render(ts_template("hostShell"), harness="bash")


def test_trl_environment_type() -> None:
    got = messages.trl_environment_type("docker")
    assert got == render(ts_template("environmentType"), value="docker")
