"""denv.trl without TRL: the package imports, and its classes say what they need.

The loop itself (TRL 1.16's HarborSpec on denv, Python >= 3.12 with Harbor) runs in the tools
image: packages/cli/src/e2e/trainers.test.ts with python/tests/trainers/trl_rollouts.py.
"""

import importlib

import pytest

import denv.trl


def test_the_import_path_is_denv_harbor() -> None:
    assert denv.trl.DENV_ENVIRONMENT == "denv.harbor:DenvEnvironment"
    module, _, name = denv.trl.DENV_ENVIRONMENT.partition(":")
    assert module == "denv.harbor" and name in importlib.import_module(module).__all__


def test_classes_need_trl() -> None:
    # python/.venv (Python 3.11) has neither TRL's Harbor support nor Harbor.
    with pytest.raises(ModuleNotFoundError, match="trl"):
        _ = denv.trl.DenvHarborBashEnv


def test_other_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError):
        _ = denv.trl.HarborEnv  # type: ignore[attr-defined]
