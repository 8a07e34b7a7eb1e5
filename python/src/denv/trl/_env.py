"""``DenvHarborEnv``: TRL's ``HarborEnv`` whose sandbox is a Harbor environment by import path.

TRL 1.16's ``HarborEnv._start`` builds Harbor's ``EnvironmentConfig(type=environment_type)``:
a backend name from Harbor's closed list (``docker``, ``e2b``, ...), with no ``import_path``.
This subclass starts the task's environment through Harbor's own factory with
``EnvironmentConfig(import_path=...)`` instead, the way ``harbor run --env`` does; the rest of
TRL's loop (``reset`` -> tool methods -> ``reward`` through Harbor's verifier) is TRL's.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

from trl.experimental.harbor import (  # type: ignore[import-not-found]
    HarborBashEnv,
    HarborEnv,
)

from ..messages import trl_environment_type
from . import DENV_ENVIRONMENT


class DenvHarborEnv(HarborEnv):  # type: ignore[misc]
    """TRL's Harbor environment on a Harbor backend given by import path (denv's by default).

    Args:
        environment_type: ``module:Class`` of the Harbor environment (TRL's ``HarborSpec``
            passes its own ``environment_type`` here).
        **environment_kwargs: Keyword arguments of that environment (for denv's, what
            ``harbor run --ek`` takes, e.g. ``public_network="deny"``).

    Raises:
        ValueError: ``environment_type`` is not an import path (a Harbor backend name such as
            ``docker`` would not run on denv).
    """

    def __init__(self, environment_type: str = DENV_ENVIRONMENT, **environment_kwargs: Any) -> None:
        # TRL's __init__ first: its __del__, which runs on a refused instance too, needs the
        # event loop it starts (and stops it).
        super().__init__(environment_type=environment_type)
        self._environment_kwargs = environment_kwargs
        if ":" not in environment_type:
            raise ValueError(trl_environment_type(environment_type))

    async def _start(self, task_dir: str) -> str:
        """Start ``task_dir``'s environment (stopping the previous one); return its instruction.

        Args:
            task_dir: A Harbor task folder (TRL's dataset rows carry it to ``reset``).

        Returns:
            The task's ``instruction.md``.
        """
        from harbor.environments.factory import (  # type: ignore[import-not-found]
            EnvironmentFactory,
        )
        from harbor.models.task.task import Task  # type: ignore[import-not-found]
        from harbor.models.task.verifier_mode import (  # type: ignore[import-not-found]
            VerifierEnvironmentMode,
        )
        from harbor.models.trial.config import (  # type: ignore[import-not-found]
            AgentConfig,
            EnvironmentConfig,
            VerifierConfig,
        )
        from harbor.models.trial.paths import TrialPaths  # type: ignore[import-not-found]
        from harbor.trial.network_policy import (  # type: ignore[import-not-found]
            resolve_trial_network_plan,
        )

        await self._stop()
        self._task = Task(task_dir=Path(task_dir))
        self._paths = TrialPaths(trial_dir=Path(tempfile.mkdtemp(prefix="denv_trl_")))
        config = EnvironmentConfig(
            import_path=self._environment_type, kwargs=self._environment_kwargs
        )
        # The task's network_mode, as Harbor's trial hands it to an environment (TRL passes
        # none: the environment would take Harbor's default, public). TRL's verifier runs in
        # the same environment: shared mode.
        plan = resolve_trial_network_plan(
            self._task.config,
            AgentConfig(),
            config,
            VerifierConfig(),
            None,
            verifier_mode=VerifierEnvironmentMode.SHARED,
        )
        self._env = EnvironmentFactory.create_environment_from_config(
            config=config,
            environment_dir=self._task.paths.environment_dir,
            environment_name=self._task.short_name,
            session_id=uuid.uuid4().hex,
            trial_paths=self._paths,
            task_env_config=self._task.config.environment,
            network_policy=plan.agent_env_baseline,
            phase_network_policies=[plan.agent_phase, plan.verifier_phase],
        )
        await self._env.start(force_build=False)
        await self._env.run_healthcheck()
        await self._setup()
        return str(self._task.instruction)


class DenvHarborBashEnv(DenvHarborEnv, HarborBashEnv):  # type: ignore[misc]
    """TRL's one-tool harness (``bash``) on denv: the model's commands run in the sandbox.

    TRL's ``HarborBashEnv`` tells the model to submit through ``/workdir/answer.txt`` (its data
    tasks); a Harbor task's own tests grade here, so the instruction is the task's, with one
    line about the tool.
    """

    PROMPT_SUFFIX = (
        "\n\nYou have a single `bash` tool: it runs a shell command in the task's environment "
        "and returns its output. The task's tests grade the environment when you are done."
    )
