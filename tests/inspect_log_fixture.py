"""Write real Inspect AI logs with inspect-ai itself, on its offline mock model (``mockllm/model``).

`write_agent_log` runs the task ``toy_agent``: a system message, a tool (``add``) and four
samples; the mock model's scripted outputs make sample ``add`` call the tool and answer from its
result, and sample ``greet`` answer with a reasoning block before its text. `write_epochs_log`
runs ``toy_epochs`` (two samples, two epochs); `write_failed_log` runs a task whose model runs
out of outputs on its second sample, so the log's status is ``error``.

Every output carries its token usage: otherwise mockllm counts tokens with tiktoken's
o200k_base, which it would download.
"""

from __future__ import annotations

from pathlib import Path

AGENT_SYSTEM = "You are a careful assistant. Use the add tool for arithmetic."
AGENT_SAMPLES = [  # (id, input, metadata)
    ("add", "What is 17 + 25?", {"split": "eval", "category": "arithmetic"}),
    ("greet", "Hi there, can you say hello to my team?", {"split": "deploy"}),
    ("story", "Write one sentence about a lighthouse.", {"split": "deploy"}),
    (4, "Name a prime number greater than 10.", {"split": "eval"}),
]
REASONING = "The user wants a friendly greeting; keep it short."


def _usage(outputs):
    from inspect_ai.model import ModelUsage

    for o in outputs:
        o.usage = ModelUsage(input_tokens=20, output_tokens=8, total_tokens=28)
    return outputs


def _add_tool():
    from inspect_ai.tool import tool

    @tool
    def add():
        async def execute(x: int, y: int) -> int:
            """Add two integers.

            Args:
              x: The first integer.
              y: The second integer.
            """
            return x + y

        return execute

    return add()


def _run(task, outputs, log_dir: Path, fmt: str) -> Path:
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    model = get_model("mockllm/model", custom_outputs=_usage(outputs))
    logs = inspect_eval(task, model=model, log_dir=str(log_dir), log_format=fmt, display="none",
                        max_samples=1, max_tasks=1, fail_on_error=True, score_display=False)
    return Path(logs[0].location)


def write_agent_log(log_dir: Path, fmt: str = "eval") -> Path:
    """The agentic task's log (``fmt``: ``eval`` or ``json``); returns its path."""
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ContentReasoning, ContentText, ModelOutput
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate, system_message, use_tools

    m = "mockllm/model"
    greet = ModelOutput.from_content(m, "Hello, team!")
    greet.choices[0].message.content = [ContentReasoning(reasoning=REASONING),
                                        ContentText(text="Hello, team!")]
    outputs = [
        ModelOutput.for_tool_call(m, "add", {"x": 17, "y": 25}, tool_call_id="call_add_1"),
        ModelOutput.from_content(m, "17 + 25 = 42."),
        greet,
        ModelOutput.from_content(m, "A lighthouse kept its lamp lit through the storm."),
        ModelOutput.from_content(m, "13."),
    ]
    task = Task(
        name="toy_agent",
        dataset=[Sample(id=i, input=text, target="42", metadata=meta) for i, text, meta in AGENT_SAMPLES],
        solver=[system_message(AGENT_SYSTEM), use_tools(_add_tool()), generate()],
        scorer=includes(),
    )
    return _run(task, outputs, log_dir, fmt)


def write_epochs_log(log_dir: Path, fmt: str = "eval") -> Path:
    """Two samples, two epochs each."""
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput
    from inspect_ai.solver import generate

    outputs = [ModelOutput.from_content("mockllm/model", f"answer {k}") for k in range(4)]
    task = Task(name="toy_epochs", epochs=2, solver=[generate()],
                dataset=[Sample(id="a", input="Say a."), Sample(id="b", input="Say b.")])
    return _run(task, outputs, log_dir, fmt)


def write_failed_log(log_dir: Path, fmt: str = "eval") -> Path:
    """Three samples; the mock model has one output, so the second sample fails the eval."""
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput
    from inspect_ai.solver import generate

    task = Task(name="toy_failed", solver=[generate()],
                dataset=[Sample(id=k, input=f"Question {k}?") for k in ("q1", "q2", "q3")])
    try:
        return _run(task, [ModelOutput.from_content("mockllm/model", "Answer.")], log_dir, fmt)
    except Exception:  # older inspect-ai raises after writing the log
        return next(Path(log_dir).glob(f"*toy-failed*.{fmt}"))
