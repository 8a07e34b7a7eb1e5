"""TRL on denv: TRL's Harbor environments (``trl.experimental.harbor``) with denv sandboxes.

``DenvHarborBashEnv`` is TRL's ``HarborBashEnv`` (one ``bash`` tool, the verifier's reward)
whose sandbox is ``denv.harbor:DenvEnvironment``: each ``reset(task_dir)`` forks the task's
deployed version instead of building it, and the reward is graded on a fork of the episode.
It plugs into ``GRPOTrainer(environment_factory=...)`` through TRL's ``HarborSpec``::

    spec = HarborSpec("tasks/", agent="denv.trl:DenvHarborBashEnv",
                      environment_type="denv.harbor:DenvEnvironment")

TRL's Harbor support and Harbor need Python >= 3.12 (``pip install trl==1.16.0`` beside
``denv-client[harbor]``). See docs/blog/trainers.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DENV_ENVIRONMENT", "DenvHarborBashEnv", "DenvHarborEnv"]

#: The Harbor environment denv.trl starts, by import path.
DENV_ENVIRONMENT = "denv.harbor:DenvEnvironment"


def __getattr__(name: str) -> Any:
    # Imported on use: TRL's Harbor module imports Harbor, which needs Python >= 3.12.
    if name in ("DenvHarborEnv", "DenvHarborBashEnv"):
        from . import _env

        return getattr(_env, name)
    raise AttributeError(name)
