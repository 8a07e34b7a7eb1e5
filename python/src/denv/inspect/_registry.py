"""Imported through the ``inspect_ai`` entry point: registers the ``denv`` sandbox provider."""

from ._sandbox import DenvSandboxEnvironment

__all__ = ["DenvSandboxEnvironment"]
