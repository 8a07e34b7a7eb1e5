"""HUD on denv: ``DenvRuntime``, a runtime provider of hud 0.6 whose placements are denv sandboxes.

``Taskset.run(agent, runtime=DenvRuntime(build, project="quickstart"))`` runs each rollout on
its own fork of a denv version: the provider forks the version into a sandbox, builds the
rollout's HUD ``Environment`` with ``build(sandbox)`` (templates act on and grade the sandbox
through :class:`DenvSandbox`), adds a ``denv`` MCP capability whose ``bash`` tool runs in the
sandbox as the agent user (what HUD's tool agents call), and serves the environment's control
channel on loopback. A task with a ``verifier`` row placed on a runtime of its own is graded
on a fork: HUD snapshots the actor's session (a denv snapshot), closes the actor and restores
the session into the verifier's placement (a fork of that snapshot).

Needs the ``hud`` extra (``pip install 'denv-client[hud]'``; Python 3.11 or 3.12).
"""

from ._runtime import (
    DenvEndpoint,
    DenvRuntime,
    no_version,
    not_a_denv_archive,
    not_a_version,
    parse_image,
    read_archive,
    unsupported_config,
)
from ._sandbox import DenvSandbox
from ._tools import MCP_PROTOCOL, TOOLS_CAPABILITY, serve_tools, tools_server

__all__ = [
    "MCP_PROTOCOL",
    "TOOLS_CAPABILITY",
    "DenvEndpoint",
    "DenvRuntime",
    "DenvSandbox",
    "no_version",
    "not_a_denv_archive",
    "not_a_version",
    "parse_image",
    "read_archive",
    "serve_tools",
    "tools_server",
    "unsupported_config",
]
