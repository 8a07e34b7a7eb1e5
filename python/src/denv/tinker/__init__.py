"""denv sandboxes for the Tinker cookbook's Harbor recipe (``tinker_cookbook.recipes.harbor_rl``).

The recipe creates one sandbox per group member through a ``SandboxFactory``
(``(environment_dir, timeout) -> SandboxInterface``; a Modal sandbox by default).
:class:`DenvSandboxFactory` makes each one a denv sandbox, a fork of the task's denv version, and
:class:`DenvVerifyReward` grades an episode with denv's verifier on a fork, as another principal,
instead of running the task's tests in the agent's sandbox.
"""

from ._sandbox import DenvSandbox, DenvSandboxFactory, DenvVerifyReward

__all__ = ["DenvSandbox", "DenvSandboxFactory", "DenvVerifyReward"]
