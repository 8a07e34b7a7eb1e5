"""verifiers on denv: a denv sandbox inside a verifiers environment (verifiers' v1 stack).

:class:`DenvTaskset` turns a denv project into a verifiers taskset. Each rollout forks the
project's version into a sandbox (a pool claim when the project keeps a warm pool) in
``DenvTask.setup``, the model's ``bash`` tool runs its commands there as the agent user through
denv exec (:class:`DenvTools`, a per-rollout MCP tool server), the reward is what denv's
verifier says of the episode (``POST /v1/environments/PROJECT/ENV/verify``: the agent stopped,
the episode snapshotted and graded on a fork, as another principal), and :class:`DenvEnv`
destroys the sandbox when the rollout ends, failed or not.

verifiers loads a taskset by the id of a module exporting one via ``__all__``; a module whose
``__all__`` names :class:`DenvEnv` and :class:`DenvTaskset` is a denv environment
(``vf-eval my-env --env.taskset.project quickstart --env.taskset.prompt '...'``).
:func:`load_environment` builds the same environment in Python. Needs the ``verifiers`` extra
(``pip install -e 'python[verifiers]'``).
"""

from .._exec import format_result
from ._env import DenvEnv, DenvEnvConfig, load_environment
from ._state import DenvState
from ._task import (
    DenvTask,
    DenvTaskConfig,
    DenvTaskData,
    DenvTaskset,
    DenvTasksetConfig,
)
from ._tools import DenvTools, DenvToolsConfig

__all__ = [
    "DenvEnv",
    "DenvEnvConfig",
    "DenvState",
    "DenvTask",
    "DenvTaskConfig",
    "DenvTaskData",
    "DenvTaskset",
    "DenvTasksetConfig",
    "DenvTools",
    "DenvToolsConfig",
    "format_result",
    "load_environment",
]
