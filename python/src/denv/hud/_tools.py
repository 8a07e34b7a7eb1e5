"""The agent's tools on a denv sandbox: an MCP server HUD's agents reach as a capability.

HUD's tool agents (claude, openai, openai_compatible, ...) drive an environment through the
capabilities its manifest publishes; an ``mcp/2025-11-25`` capability is an MCP server whose
tools they list and call. :func:`serve_tools` runs one such server per placement, on a
loopback port of this machine, with one tool: ``bash``, which runs its command in the
placement's sandbox through denv exec, as the agent user in the agent service (denv refuses
root there). HUD's client reaches it through the environment's control channel
(``tunnel.open``), so the agent never needs the sandbox's address.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from fastmcp import FastMCP
from hud.capabilities import Capability  # type: ignore[import-not-found,unused-ignore]

from .._errors import DenvError
from .._exec import format_result
from ._sandbox import DenvSandbox

logger = logging.getLogger("denv")

#: The capability's name in the environment's manifest.
TOOLS_CAPABILITY = "denv"
#: The MCP protocol HUD's ``MCPClient`` speaks.
MCP_PROTOCOL = "mcp/2025-11-25"


def tools_server(sandbox: DenvSandbox, *, timeout: float, output_limit: int) -> FastMCP:
    """The MCP server of one sandbox: the ``bash`` tool.

    Args:
        sandbox: The placement's sandbox (followed when a restore replaces it).
        timeout: Seconds a command may run before its process tree is killed.
        output_limit: Bytes of stdout and of stderr the agent sees per command.

    Returns:
        The server (not started).
    """
    server: FastMCP = FastMCP("denv")

    @server.tool
    async def bash(command: str) -> str:
        """Run a bash command in the environment (as the agent user, in its workdir).

        Args:
            command: The command line, run with ``bash -c``.

        Returns:
            The exit code, stdout and stderr.
        """
        try:
            result = await sandbox.exec(
                ["bash", "-c", command], timeout=timeout, output_limit=output_limit
            )
        except DenvError as err:
            return f"error: {err}"
        return format_result(result, output_limit)

    return server


@asynccontextmanager
async def serve_tools(
    sandbox: DenvSandbox, *, timeout: float = 120.0, output_limit: int = 16384
) -> AsyncIterator[Capability]:
    """Serves :func:`tools_server` on a loopback port for the length of the block.

    Args:
        sandbox: The placement's sandbox.
        timeout: Seconds a command may run.
        output_limit: Bytes of each stream the agent sees.

    Yields:
        The ``denv`` capability to publish (``mcp/2025-11-25`` over streamable HTTP).

    Raises:
        RuntimeError: The server stopped before it was serving.
    """
    app = tools_server(sandbox, timeout=timeout, output_limit=output_limit).http_app(
        path="/mcp", transport="http"
    )
    # Bound here, before uvicorn starts, so the port is known without a race for it.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if serving.done():
                serving.result()
                raise RuntimeError("denv: the tools' MCP server stopped before serving")
            await asyncio.sleep(0.01)
        yield Capability(
            name=TOOLS_CAPABILITY,
            protocol=MCP_PROTOCOL,
            url=f"http://127.0.0.1:{port}/mcp",
            params={"transport": "streamable-http"},
        )
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        sock.close()
