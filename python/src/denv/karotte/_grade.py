"""denv's verifier for an imported Karotte environment: Karotte's own judges, on the fork.

``denv import karotte`` writes this file as ``denv-verifier/grade.py``; the verifier runs it with
the environment image's Python (``/root/.venv/bin/python /tests/grade.py /out``), as root in its
own container. It never runs in the denv package's Python: it imports ``karotte`` (3.12+) and the
environment package from the image.

What it grades is what ``karotte run --no-containerized`` left in OUT (default ``/out``, root-only
in the agent's container, copied by denv to ``/submission/out`` after protection 3's checks): the
transcript (``transcript.json``) and the artifacts Karotte saved (``<run id>_artifacts/``). It
rebuilds the run's config from the transcript's ``task_started`` event, loads the task with
Karotte's loader, puts each step's saved submission back where the student wrote it, and scores
the steps in order with ``Step.score`` (the step's ``pre_scoring_hook`` and its judge), each
against the transcript as it stood when Karotte scored that step. As Karotte's run does, it stops
at the first step whose scoring says not to continue. The reward is Karotte's final score (the
last scored step's); ``/logs/verifier/reward.json`` also holds each step's score.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

SUBMISSION = Path("/submission")
REWARD = Path("/logs/verifier/reward.json")


def write_reward(reward: float, extra: dict[str, float]) -> None:
    """Writes denv's reward file (numbers only) and prints it."""
    REWARD.parent.mkdir(parents=True, exist_ok=True)
    body = {"reward": reward, **extra}
    REWARD.write_text(json.dumps(body))
    print(json.dumps(body))


def restore(artifacts: Path, paths: tuple[Path, ...], uid: int) -> None:
    """Puts the saved copies back at the paths the student wrote, owned by the student."""
    for path in paths:
        saved = artifacts / path.name
        if not saved.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if saved.is_dir():
            shutil.copytree(saved, path, dirs_exist_ok=True)
        else:
            shutil.copyfile(saved, path)
        for root, dirs, files in (
            os.walk(path) if path.is_dir() else [(str(path.parent), [], [path.name])]
        ):
            for name in [*dirs, *files]:
                os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)
        os.chown(path, uid, uid, follow_symlinks=False)


def main(argv: list[str]) -> int:
    """Grades the run in OUT (argv[1], default ``/out``)."""
    out = SUBMISSION / (argv[1] if len(argv) > 1 else "/out").lstrip("/")
    transcript_file = out / "transcript.json"
    if not transcript_file.is_file():
        print(f"no Karotte transcript at {transcript_file}: the run did not finish; reward 0")
        write_reward(0.0, {"steps_passed": 0.0})
        return 0

    # karotte (Python >= 3.12) is the image's, never the denv package's: untyped here.
    from karotte import EvaluationRunConfig  # type: ignore[import-not-found,unused-ignore]
    from karotte.load_tasks import load_task  # type: ignore[import-not-found,unused-ignore]
    from karotte.schemas.transcript import (  # type: ignore[import-not-found,unused-ignore]
        ScoringEvent,
        TaskStartedEvent,
        Transcript,
    )

    transcript = Transcript.model_validate_json(transcript_file.read_text())
    started = next(e for e in transcript.events if isinstance(e, TaskStartedEvent))
    fields: dict[str, Any] = {
        "run_id": started.run_id,
        "task_id": started.task_id,
        "model": started.model or "unknown",
        "save_artifacts": False,
    }
    if started.use_hints is not None:
        fields["use_hints"] = started.use_hints
    config = EvaluationRunConfig(**fields)
    task = load_task(config)
    uid = int(os.environ.get("KAROTTE_DEMOTE_ID", "1000"))
    artifacts = out / f"{started.run_id}_artifacts"
    # Where Karotte scored each step: the transcript up to that step's scoring event.
    cuts = [i for i, e in enumerate(transcript.events) if isinstance(e, ScoringEvent)]

    scores: dict[str, float] = {}
    final = 0.0
    passed = 0
    for index, step in enumerate(task.steps):
        if index >= len(cuts):
            print(f"step {index + 1}: never reached in the run; not scored")
            break
        seen = Transcript(run_id=transcript.run_id, events=transcript.events[: cuts[index]])
        restore(artifacts, tuple(step.submission_paths or ()), uid)
        scoring = step.score(seen, index)
        final = float(scoring.score)
        scores[f"step_{index + 1}"] = final
        print(f"step {index + 1}: score {final} {json.dumps(scoring.metadata, default=str)}")
        if not scoring.continue_task:
            break
        passed += 1
    write_reward(final, {**scores, "steps_passed": float(passed)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
