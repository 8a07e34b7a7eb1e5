"""A denv environment for verifiers: the taskset module ``vf-eval denv-quickstart`` loads.

verifiers finds a taskset by the id of a module exporting it; this one is the whole of a denv
environment package (docs/blog/verifiers.md shows the same file).
"""

from denv.verifiers import DenvEnv, DenvTaskset

__all__ = ["DenvEnv", "DenvTaskset"]
