"""What one eval run's denv sandboxes share, kept per run the way Inspect's docker provider does.

Inspect's ``SandboxManager`` opens a sandbox lifecycle scope for each batch of tasks before any
of them starts and closes it after the last ``task_cleanup``; a provider keeps its registries on
the scope's state, so ``task_init`` (which may run late, in a sibling task of the samples), the
samples and ``task_cleanup`` all see the same object. Outside any scope (the provider driven
directly) the state is a ``ContextVar`` bound by ``task_init`` for the task that ran it. This is
``inspect_ai/util/_sandbox/docker/cleanup.py`` (``cleanup_state``, ``project_cleanup_startup``)
applied to denv: two runs in one process, concurrent or one after the other, never share it.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

# Internals of inspect_ai (pinned in the `inspect` extra), the ones its docker provider uses.
from inspect_ai.util._anyio import safe_current_task_id
from inspect_ai.util._sandbox.lifecycle import sandbox_lifecycle_state

if TYPE_CHECKING:
    from ._config import Settings


@dataclass
class RunState:
    """The denv provider's state for one eval run.

    Attributes:
        versions: The version this run forks for each source (``Settings.key``): each source
            is checked (and deployed when it changed) once per run.
        sandboxes: Sandbox id -> settings of every sandbox of the run not destroyed yet; what
            ``task_cleanup`` destroys (or lists, under ``--no-sandbox-cleanup``).
        closed: ``task_cleanup`` ran: outside a scope, the next ``task_init`` binds a new state.
        owner: Outside a scope, the id of the task whose ``task_init`` bound this state.
    """

    versions: dict[tuple[str, str, str, str, str], str] = field(default_factory=dict)
    sandboxes: dict[str, Settings] = field(default_factory=dict)
    closed: bool = False
    owner: int | None = None


# Outside any lifecycle scope: bound per task by run_startup, never a shared default.
_ownerless: ContextVar[RunState | None] = ContextVar("denv_inspect_run_state", default=None)


def run_state() -> RunState:
    """The state of the enclosing run.

    Returns:
        The lifecycle scope's state; outside any scope the state bound to the current
        context, bound now when ``task_init`` never ran here.
    """
    scope = sandbox_lifecycle_state()
    if scope is not None:
        return scope.get(RunState)
    state = _ownerless.get()
    return state if state is not None else _bind()


def run_startup() -> RunState:
    """Binds the run's state where the samples will inherit it (``task_init`` calls it).

    In a scope the scope's state is used as it is (a late ``task_init`` keeps what the run
    registered already). Outside any scope a state belongs to the task whose ``task_init``
    bound it, for one run: ``task_init`` in another task, or after ``task_cleanup``, binds a
    new one.

    Returns:
        The state.
    """
    if sandbox_lifecycle_state() is not None:
        return run_state()
    state = _ownerless.get()
    if state is None or state.closed or state.owner != safe_current_task_id():
        state = _bind()
    return state


def _bind() -> RunState:
    state = RunState(owner=safe_current_task_id())
    _ownerless.set(state)
    return state
