"""Users: the agent is never root (protection 1); other users and services as asked."""

from __future__ import annotations

import pytest

from denv import AgentRootError, messages
from denv.conformance import DenvSandbox

pytestmark = pytest.mark.denv_conformance


def test_default_user_is_the_non_root_agent_user(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    uid = sb.client.exec(sb.id, ["id", "-u"]).stdout_text.strip()
    assert uid != "0"
    name = sb.client.exec(sb.id, ["id", "-un"]).stdout_text.strip()
    assert sb.agent_user.split(":")[0] in (uid, name)


@pytest.mark.parametrize("user", ["root", "0", "root:root", "0:0"])
def test_root_is_refused_in_the_agent_service(denv_sandbox: DenvSandbox, user: str) -> None:
    sb = denv_sandbox
    with pytest.raises(AgentRootError) as caught:
        sb.client.exec(sb.id, ["id", "-u"], user=user)
    assert caught.value.message == messages.agent_root(sb.agent_service)
    assert caught.value.status == 403


def test_root_is_refused_for_files_in_the_agent_service(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    with pytest.raises(AgentRootError) as caught:
        sb.client.write_file(sb.id, sb.scratch("as-root"), b"x", user="root")
    assert caught.value.message == messages.agent_root(sb.agent_service)


def test_root_is_refused_on_the_streaming_route(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    with pytest.raises(AgentRootError):
        sb.client.exec_stream(sb.id, ["id", "-u"], user="root")


def test_another_non_root_user(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(sb.id, ["id", "-u"], user="65534")
    assert res.stdout_text.strip() == "65534"


def test_unknown_user_is_a_failed_result(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(sb.id, ["id"], user="denv-no-such-user")
    assert res.exit_code != 0
    assert "denv-no-such-user" in res.stdout_text + res.stderr_text


def test_root_in_another_service(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    others = sb.other_services()
    if not others:
        pytest.skip("the environment has only the agent service")
    res = sb.client.exec(sb.id, ["id", "-u"], service=others[0], user="root")
    assert res.stdout_text.strip() == "0"
