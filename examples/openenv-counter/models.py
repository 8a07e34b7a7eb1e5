"""The counter's action and observation (OpenEnv pydantic models)."""

from __future__ import annotations

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class CounterAction(Action):
    """Adds ``delta`` to the counter."""

    delta: int = Field(default=1, ge=-100, le=100, description="How much to add")


class CounterObservation(Observation):
    """The counter after an action; ``done`` once it reaches ``target``."""

    count: int = Field(default=0, description="The counter's value")
    target: int = Field(default=5, description="The value that ends the episode")
    step_count: int = Field(default=0, description="Steps taken in this episode")
