"""The FastAPI app: ``uvicorn server.app:app --port 8000`` (openenv.yaml names it)."""

from __future__ import annotations

from openenv.core.env_server.http_server import create_app

try:
    from ..models import CounterAction, CounterObservation
    from .counter_environment import CounterEnvironment
except ImportError:  # run as a top-level package (uvicorn server.app:app)
    from models import CounterAction, CounterObservation
    from server.counter_environment import CounterEnvironment

app = create_app(
    CounterEnvironment,
    CounterAction,
    CounterObservation,
    env_name="openenv-counter",
    max_concurrent_envs=1,
)
