"""Inspect AI logs as datasets: logs written by inspect-ai itself (mock model), read back through
`data validate`, `run` (hf, tiny model; SmolLM2 slow) and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("inspect_ai", reason="inspect-ai is not installed (the inspect extra)")

from evalaware.main import cli  # noqa: E402
from harness.data.readers import load_dataset, read_dataset, write_jsonl  # noqa: E402
from harness.core.render import format_transcript  # noqa: E402
from harness.runlog import RunLog  # noqa: E402
from tests.helpers.cli import in_process  # noqa: E402

from tests.inspect_log_fixture import (AGENT_SYSTEM, REASONING, write_agent_log,  # noqa: E402
                                  write_epochs_log, write_failed_log)

FORMATS = ("eval", "json")
AGENT_IDS = ["toy_agent:add", "toy_agent:greet", "toy_agent:story", "toy_agent:4"]
EPOCH_IDS = ["toy_epochs:a:1", "toy_epochs:a:2", "toy_epochs:b:1", "toy_epochs:b:2"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, dict[str, Path]]:
    """Per format: the agent log, the epochs log (both in one directory) and a failed log."""
    root = tmp_path_factory.mktemp("inspect")
    out = {}
    for fmt in FORMATS:
        good = root / fmt / "good"
        out[fmt] = {"dir": good, "agent": write_agent_log(good, fmt),
                    "epochs": write_epochs_log(good, fmt),
                    "failed": write_failed_log(root / fmt / "failed", fmt)}
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_agent_log_roles_tool_calls_reasoning_metadata(logs, fmt):
    path = logs[fmt]["agent"]
    samples = {s.id: s for s in load_dataset(path)}
    assert list(samples) == AGENT_IDS
    add = samples["toy_agent:add"]
    assert [m.role for m in add.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert add.messages[0].content == AGENT_SYSTEM and add.messages[1].content == "What is 17 + 25?"
    (call,) = add.messages[2].tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("call_add_1", "add", {"x": 17, "y": 25})
    assert add.messages[3].tool_call_id == "call_add_1" and add.messages[3].content == "42"
    assert add.messages[4].content == "17 + 25 = 42."
    assert add.metadata.agentic and add.metadata.category == "arithmetic"
    extra = add.metadata.extra
    assert (extra["task"], extra["model"], extra["log"], extra["epoch"]) == \
        ("toy_agent", "mockllm/model", str(path), 1)
    assert extra["inspect_sample_id"] == "add" and extra["uuid"] and extra["scores"] == {"includes": "C"}
    # reasoning stays reasoning: not in the answer text
    greet = samples["toy_agent:greet"].messages[-1]
    assert greet.reasoning == REASONING and greet.content == "Hello, team!"
    assert not samples["toy_agent:greet"].metadata.agentic
    assert samples["toy_agent:greet"].metadata.category == "toy_agent"
    assert samples["toy_agent:4"].metadata.extra["inspect_sample_id"] == 4
    assert {s.label for s in samples.values()} == {"eval"}


def test_eval_and_json_logs_agree(logs):
    a, b = (load_dataset(logs[f]["agent"]) for f in FORMATS)
    assert [s.messages for s in a] == [s.messages for s in b]


@pytest.mark.parametrize("fmt", FORMATS)
def test_epoch_suffix_only_with_several_epochs(logs, fmt):
    got = read_dataset(logs[fmt]["dir"])
    assert sorted(s.id for s in got.samples) == sorted(AGENT_IDS + EPOCH_IDS) and not got.notes
    by_id = {s.id: s for s in got.samples}
    assert by_id["toy_epochs:b:2"].metadata.extra["epoch"] == 2
    assert by_id["toy_epochs:b:2"].messages[-1].content != by_id["toy_epochs:b:1"].messages[-1].content


@pytest.mark.parametrize("fmt", FORMATS)
def test_data_validate_counts_and_labels(logs, fmt):
    d = str(logs[fmt]["dir"])
    r = CliRunner().invoke(cli, ["data", "validate", d])
    assert r.exit_code == 0, r.output
    assert "samples: 8" in r.output and "labels: eval=8" in r.output
    assert "kinds: agentic=1, chat=7" in r.output
    assert "arithmetic=1, toy_agent=3, toy_epochs=4" in r.output
    r = CliRunner().invoke(cli, ["data", "validate", d, "--label", "deploy"])
    assert "labels: deploy=8" in r.output
    # from sample metadata; samples without the field take --label
    r = CliRunner().invoke(cli, ["data", "validate", d, "--label-field", "split", "--label", "eval"])
    assert r.exit_code == 0, r.output
    assert "labels: deploy=2, eval=6" in r.output
    r = CliRunner().invoke(cli, ["data", "validate", str(logs[fmt]["agent"]), "--label-field", "split"])
    assert "labels: deploy=2, eval=2" in r.output


def test_label_field_missing_is_one_line_error(logs):
    r = in_process("data", "validate", logs["eval"]["epochs"], "--label-field", "split")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"error: {logs['eval']['epochs']}: id='toy_epochs:a:1': field 'metadata.split': "
        "sample has no such metadata field (pass --label for a default) (evalaware data validate)"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_failed_and_cancelled_logs_read_what_exists(logs, fmt, tmp_path):
    from inspect_ai.log import read_eval_log, write_eval_log

    failed = logs[fmt]["failed"]
    got = read_dataset(failed)
    assert [s.id for s in got.samples] == ["toy_failed:q1", "toy_failed:q2", "toy_failed:q3"]
    assert got.samples[1].metadata.extra["error"]
    assert any("status error; read 3 of 3 samples" in n for n in got.notes)
    assert any("2 samples ended in an error" in n for n in got.notes)
    # a cancelled log that holds only some samples, written by inspect-ai itself
    log = read_eval_log(str(logs[fmt]["agent"]))
    log.samples = [s for s in log.samples if s.id != "story"]
    log.status = "cancelled"
    cut = tmp_path / f"cancelled.{fmt}"
    write_eval_log(log, str(cut))
    r = CliRunner().invoke(cli, ["data", "validate", str(cut)])
    assert r.exit_code == 0, r.output
    assert "samples: 3" in r.output
    assert f"note: {cut}: status cancelled; read 3 of 4 samples, skipped 1 not in the log" in r.output


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncated_log_is_one_line_error(logs, fmt, tmp_path):
    src = logs[fmt]["agent"].read_bytes()
    cut = tmp_path / f"cut.{fmt}"
    cut.write_bytes(src[: len(src) * 2 // 3])
    r = in_process("data", "validate", cut)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"error: {cut}: ") and "not a readable Inspect log (truncated or corrupt?)" in line


def test_empty_directory_and_duplicate_tasks(logs, tmp_path):
    r = in_process("data", "validate", tmp_path)
    assert r.returncode == 2 and "no Inspect logs (.eval or .json) in this directory" in r.stderr
    for fmt in FORMATS:
        (tmp_path / logs[fmt]["agent"].name).write_bytes(logs[fmt]["agent"].read_bytes())
    r = in_process("data", "validate", tmp_path)
    assert r.returncode == 2 and "id='toy_agent:add': duplicate id (also in" in r.stderr


def test_reasoning_rendered_marked_and_round_trips(logs, tmp_path):
    samples = load_dataset(logs["eval"]["agent"])
    text = format_transcript(samples[1].messages)
    assert f"ASSISTANT: <think>\n{REASONING}\n</think>\n\nHello, team!" in text
    assert '<tool_call>{"name": "add"' in format_transcript(samples[0].messages)
    write_jsonl(samples, tmp_path / "x.jsonl")
    assert load_dataset(tmp_path / "x.jsonl") == samples


def _run_full_third(model: str, dataset: Path, out: Path) -> None:
    r = in_process("run", "--model", model, "--backend", "hf", "--dataset", dataset, "--view", "full",
                   "--person", "third", "--methods", "binary", "--n-votes", "1", "--answer-tokens", "8",
                   "--probe-tokens", "8", "--label-field", "split", "--label", "eval", "--out", out,
                   "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]


def _check_run(out: Path, dataset: Path, tmp_path: Path) -> None:
    store = RunLog(out, create=False)
    stored = store.samples()
    assert stored == load_dataset(dataset, label="eval", label_field="split")
    assert len(stored) == 8 and stored[0].messages[3].tool_call_id == "call_add_1"
    recs = store.result_dicts("binary")
    assert sorted(r["sample_id"] for r in recs) == sorted(AGENT_IDS + EPOCH_IDS)
    assert {r["task"] for r in recs} == {"toy_agent", "toy_epochs"}
    man = store.get_meta("manifests")[-1]
    assert man["dataset"]["path"] == str(dataset) and len(man["dataset"]["sha256"]) == 64
    store.close()
    r = CliRunner().invoke(cli, ["report", str(out), "--out", str(tmp_path / "rep"), "--bootstrap", "0"])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "rep" / "report.md").read_text()
    task_section = md.split("### Per task (Inspect logs)")[1].split("##")[0]
    assert "| toy_agent | 4 |" in task_section and "| toy_epochs | 4 |" in task_section


def test_run_full_third_tiny(logs, tiny_model_dir, tmp_path):
    _run_full_third(str(tiny_model_dir), logs["eval"]["dir"], tmp_path / "run")
    _check_run(tmp_path / "run", logs["eval"]["dir"], tmp_path)


@pytest.mark.slow
def test_run_full_third_smollm2(logs, smollm2_dir, tmp_path):
    _run_full_third("smollm2", logs["json"]["dir"], tmp_path / "run")
    _check_run(tmp_path / "run", logs["json"]["dir"], tmp_path)
