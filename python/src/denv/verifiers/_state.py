"""``DenvState``: what a rollout shares between its task hooks and its tool server."""

from __future__ import annotations

try:
    import verifiers.v1 as vf  # type: ignore[import-untyped,unused-ignore]
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("denv.verifiers needs verifiers: pip install -e 'python[verifiers]'") from exc


class DenvState(vf.State):  # type: ignore[misc]
    """The rollout's state (``trace.state``), synced with its tool server.

    Attributes:
        sandbox: ``PROJECT/ENV`` of the rollout's sandbox, once ``DenvTask.setup`` made it.
        version: The version it forked.
        episode: The snapshot denv's verifier graded (kept with ``keep_episodes``).
    """

    sandbox: str | None = None
    version: str | None = None
    episode: str | None = None
