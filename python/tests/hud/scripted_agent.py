"""What the HUD tests share: a HUD agent without a model, and HUD kept off its platform.

``ScriptedAgent(script)`` opens the placement's ``denv`` MCP capability through HUD's client
(``run.client.open``, tunnelled over the environment's control channel) and calls ``bash`` with
its script; ``ScriptedAgent(None)`` does nothing. ``FIX`` is the quickstart's fix.
"""

from __future__ import annotations

from pathlib import Path

import mcp.types as mcp_types
import pytest
from hud.agents.base import Agent
from hud.capabilities import MCPClient
from hud.eval import Run
from hud.settings import settings

REPO = Path(__file__).resolve().parents[3]
FIX = (REPO / "examples" / "quickstart" / "agent" / "fix.sh").read_text()


class ScriptedAgent(Agent):
    """Runs ``script`` with the environment's ``bash`` tool (None: does nothing)."""

    def __init__(self, script: str | None) -> None:
        super().__init__()
        self.script = script
        self.results: list[str] = []

    async def __call__(self, run: Run) -> None:
        if self.script is None:
            run.trace.content = "nothing to do"
            return
        tools = await run.client.open("denv")
        assert isinstance(tools, MCPClient)
        listed = [t.name for t in await tools.list_tools()]
        assert listed == ["bash"], listed
        result = await tools.call_tool("bash", {"command": self.script})
        text = "".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))
        self.results.append(text)
        run.trace.content = "done"


def offline_hud(monkeypatch: pytest.MonkeyPatch) -> None:
    """HUD reports jobs and traces to its platform only with an API key: none, and telemetry
    off, so nothing leaves loopback."""
    monkeypatch.delenv("HUD_API_KEY", raising=False)
    monkeypatch.setattr(settings, "api_key", None)
    monkeypatch.setattr(settings, "telemetry_enabled", False)
