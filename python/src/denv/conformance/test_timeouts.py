"""Timeouts: the result says so, and the whole process tree is gone."""

from __future__ import annotations

import time

import pytest

from denv.conformance import DenvSandbox
from denv.conformance._support import sleepers, unique_seconds

pytestmark = pytest.mark.denv_conformance


def test_timeout_sets_timed_out_and_124(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    started = time.monotonic()
    res = sb.client.exec(sb.id, ["sleep", "60"], timeout=1)
    assert res.timed_out
    assert res.exit_code == 124
    assert time.monotonic() - started < 15


def test_timeout_kills_the_process_tree(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    child, grandchild, parent = unique_seconds(), unique_seconds(), unique_seconds()
    script = f"sleep {child} & sh -c 'sleep {grandchild} & wait' & sleep {parent}; :"
    res = sb.client.exec(sb.id, ["sh", "-c", script], timeout=2)
    assert res.timed_out
    time.sleep(2)
    for seconds in (child, grandchild, parent):
        assert sleepers(sb, seconds) == 0, f"'sleep {seconds}' survived the timeout"


def test_timeout_on_the_streaming_route(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    seconds = unique_seconds()
    res = sb.client.exec_stream(sb.id, ["sh", "-c", f"sleep {seconds}; :"], timeout=1)
    assert res.timed_out
    assert res.exit_code == 124
    time.sleep(2)
    assert sleepers(sb, seconds) == 0


def test_signal_death_is_not_a_timeout(denv_sandbox: DenvSandbox) -> None:
    sb = denv_sandbox
    res = sb.client.exec(sb.id, ["sh", "-c", "kill -TERM $$"], timeout=30)
    assert res.exit_code == 143
    assert not res.timed_out
