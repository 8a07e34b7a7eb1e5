"""denv.hud's unit tests, run in python/.venv-hud (scripts/setup-python makes it).

HUD (hud 0.6.21, the hud extra) pins mcp < 2 and verifiers 0.4.0 pins mcp == 2.0.0, so the two
cannot share a venv: the tests of denv.hud live in tests/hud/, which this venv does not
collect (conftest.py), and run here with HUD's venv, against the fake control plane.
"""

from __future__ import annotations

from conftest import run_hud_pytest


def test_denv_hud_unit_tests_pass_in_huds_venv() -> None:
    run = run_hud_pytest("not integration", {})
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-3000:]
    assert " passed" in run.stdout
    assert "skipped" not in run.stdout and "failed" not in run.stdout
