"""The Inspect sandbox provider ``denv`` (``Task(sandbox="denv")``).

Installing ``denv[inspect]`` registers it through the ``inspect_ai`` entry point; importing
this module registers it too.
"""

from ._config import DenvSandboxConfig
from ._sandbox import SANDBOX_PREFIX, STORE_KEY, DenvSandboxEnvironment

__all__ = ["SANDBOX_PREFIX", "STORE_KEY", "DenvSandboxConfig", "DenvSandboxEnvironment"]
