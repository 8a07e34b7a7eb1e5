"""Two steps: a regex judge on the transcript, then an executable judge on a submitted file."""

import re
import sys
from pathlib import Path
from typing import final

from karotte import Step, Task, kill_processes, save_artifact, save_submission
from karotte.judges import ExecutableJudge, RegexJudge

from environment import STUDENT_UID

ANSWER = Path("/workdir/answer.txt")


@final
class CountWordsTask(Task):
    id = "count-words"

    @property
    def system_prompt(self) -> str:
        return "You work in a sandbox. Use the bash tool."

    @property
    def steps(self):
        return [ReadyStep(config=self.config), CountStep(config=self.config)]

    @property
    def tools(self):
        return ["bash"]


class ReadyStep(Step):
    @property
    def instructions(self) -> str:
        return "Say 'ready: yes' when you are ready."

    @property
    def judge(self):
        return RegexJudge([re.compile(r"ready: yes")])


class CountStep(Step):
    saved: Path | None = None

    @property
    def submission_paths(self) -> tuple[Path, ...]:
        return (ANSWER,)

    @property
    def instructions(self) -> str:
        return f"Count the lines of /workdir/data/words.txt and write the number to {ANSWER}."

    @property
    def judge(self):
        assert self.saved is not None, "pre_scoring_hook has not run"
        return ExecutableJudge(
            [sys.executable, "-m", "environment.tasks.count_words.score", str(self.saved), "out.json"]
        )

    def pre_scoring_hook(self) -> None:
        kill_processes(STUDENT_UID)
        self.saved = save_submission(ANSWER) / ANSWER.name
        save_artifact(self.config, self.saved)
