"""A counter environment whose whole episode state is one file on disk.

Every call reads the state from ``STATE_PATH`` and writes it back (atomically) before
answering, so nothing lives only in the process: a denv snapshot taken mid-episode holds the
episode, and a fork of it (a new process on a copy of the disk) continues from the same state.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata, State

try:
    from ..models import CounterAction, CounterObservation
except ImportError:  # run as a top-level package (uvicorn server.app:app)
    from models import CounterAction, CounterObservation

STATE_PATH = Path(os.environ.get("COUNTER_STATE", "/workspace/state.json"))
DEFAULT_TARGET = 5


def _load() -> dict[str, Any]:
    try:
        return dict(json.loads(STATE_PATH.read_text()))
    except FileNotFoundError:
        return {"episode_id": None, "step_count": 0, "count": 0, "target": DEFAULT_TARGET}


def _save(state: dict[str, Any]) -> None:
    tmp = STATE_PATH.with_name(STATE_PATH.name + ".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, STATE_PATH)


def _observation(state: dict[str, Any], reward: float | None) -> CounterObservation:
    done = state["count"] >= state["target"]
    return CounterObservation(
        count=state["count"],
        target=state["target"],
        step_count=state["step_count"],
        done=done,
        reward=reward,
        metadata={"episode_id": state["episode_id"]},
    )


class CounterEnvironment(Environment[CounterAction, CounterObservation, State]):
    """Count up to a target: reward 1.0 on the step that reaches it exactly, else 0.0."""

    # One state file: sessions would share it, so one session at a time.
    SUPPORTS_CONCURRENT_SESSIONS = False

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        **kwargs: Any,
    ) -> CounterObservation:
        """Starts an episode at 0 (``target`` may be passed as a reset argument)."""
        state = {
            "episode_id": episode_id or uuid.uuid4().hex,
            "step_count": 0,
            "count": 0,
            "target": int(kwargs.get("target", DEFAULT_TARGET)),
        }
        _save(state)
        return _observation(state, None)

    def step(
        self,
        action: CounterAction,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> CounterObservation:
        """Adds ``action.delta`` to the counter on disk."""
        state = _load()
        state["count"] += action.delta
        state["step_count"] += 1
        _save(state)
        return _observation(state, 1.0 if state["count"] == state["target"] else 0.0)

    @property
    def state(self) -> State:
        """The episode as stored on disk."""
        s = _load()
        return State(
            episode_id=s["episode_id"], step_count=s["step_count"], count=s["count"], target=s["target"]
        )

    def get_metadata(self) -> EnvironmentMetadata:
        """Name and description for GET /metadata."""
        return EnvironmentMetadata(
            name="openenv-counter",
            description="Count up to a target; the episode state is /workspace/state.json",
            version="1.0.0",
        )
