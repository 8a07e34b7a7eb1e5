"""A tiny Inspect task on a denv sandbox of examples/quickstart (run by the integration tests).

DENV_URL=... DENV_TOKEN=... inspect eval python/tests/inspect_task/task.py --model mockllm/model
"""

from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessage, GenerateConfig, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Scorer, Target, accuracy, scorer
from inspect_ai.solver import Generate, Solver, TaskState, generate, solver
from inspect_ai.util import sandbox

COMPOSE = Path(__file__).resolve().parents[3] / "examples" / "quickstart" / "compose.yaml"


@solver
def answer_in_sandbox() -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        ticket = await sandbox().read_file("README.md")
        state.metadata["ticket_lines"] = len(ticket.splitlines())
        await sandbox().write_file("answer.txt", f"{state.target.text}\n")
        return state

    return solve


@scorer(metrics=[accuracy()])
def answer_file() -> Scorer:
    async def score(state: TaskState, target: Target) -> Score:
        written = (await sandbox().read_file("answer.txt")).strip()
        return Score(value=CORRECT if written == target.text else INCORRECT, answer=written)

    return score


def _reply(
    input: list[ChatMessage], tools: object, tool_choice: object, config: GenerateConfig
) -> ModelOutput:
    # Usage given here, so mockllm does not count tokens (tiktoken would fetch its encoding).
    output = ModelOutput.from_content(model="mockllm", content="done")
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


@task
def denv_quickstart() -> Task:
    return Task(
        model=get_model("mockllm/model", custom_outputs=_reply),
        dataset=[
            Sample(id="one", input="Write 42 to answer.txt", target="42"),
            Sample(id="two", input="Write 7 to answer.txt", target="7"),
        ],
        solver=[answer_in_sandbox(), generate()],
        scorer=answer_file(),
        sandbox=("denv", str(COMPOSE)),
    )
