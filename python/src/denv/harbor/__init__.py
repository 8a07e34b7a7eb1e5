"""Harbor on denv: ``DenvEnvironment``, an environment backend for Harbor (``harbor run``).

Use it by import path: ``harbor run --env denv.harbor:DenvEnvironment --path TASK``. Harbor
needs Python >= 3.12 (``pip install 'denv[harbor]'``; ``deploy/tools-image`` builds an image
with both). See docs/how-to/harbor.md.
"""

from __future__ import annotations

from typing import Any

from ._options import DenvHarborOptions
from ._task import TaskSource, project_name, task_source

__all__ = ["DenvEnvironment", "DenvHarborOptions", "TaskSource", "project_name", "task_source"]


def __getattr__(name: str) -> Any:
    # Imported on use: Harbor is only installable on Python >= 3.12.
    if name == "DenvEnvironment":
        from ._environment import DenvEnvironment

        return DenvEnvironment
    raise AttributeError(name)
