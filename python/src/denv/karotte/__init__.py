"""Karotte on denv: ``denv import karotte`` and the verifier it writes into a project.

:mod:`denv.karotte._import` maps a Karotte environment folder to a denv project folder;
:mod:`denv.karotte._grade` is the verifier it writes, which runs in the environment's own image.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ImportResult", "KarotteImportError", "import_environment"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `python -m denv.karotte._import` does not find its module imported already.
    if name in __all__:
        from . import _import

        return getattr(_import, name)
    raise AttributeError(name)
