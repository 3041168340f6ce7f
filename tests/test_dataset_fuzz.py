"""Fuzzing the dataset readers: any bytes, any JSON structure, any record shape gives samples or
one DatasetError, never another exception; what is read is well-formed samples."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.core.errors import DatasetError
from harness.data.readers import read_dataset

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20)
ROLES = st.sampled_from(["system", "user", "assistant", "tool", "bot", "", None, 3])
message = st.fixed_dictionaries({"role": ROLES}, optional={
    "content": scalars | st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image", 1])},
                                                         optional={"text": scalars}), max_size=3),
    "tool_calls": json_values})
record = st.fixed_dictionaries({}, optional={
    "id": scalars, "label": st.sampled_from(["eval", "deploy", "EVAL", "", None, 1]) | scalars,
    "messages": st.lists(message, max_size=3) | json_values,
    "input": st.lists(message, max_size=3) | json_values,
    "metadata": st.fixed_dictionaries({}, optional={
        "category": scalars, "eval_category": scalars, "scaffold": scalars, "eval_type": scalars,
        "eval_author1": scalars, "eval_author2": scalars}) | json_values})


def _read(path) -> None:
    try:
        got = read_dataset(path)
    except DatasetError as e:
        assert len(str(e).splitlines()) == 1, str(e)  # one line, whatever the data holds
        return
    assert all(s.label in ("eval", "deploy") and isinstance(s.id, str) and s.id for s in got.samples)


@SETTINGS
@given(data=st.binary(max_size=400), suffix=st.sampled_from([".jsonl", ".json", ".txt"]))
def test_random_bytes(tmp_path_factory, data, suffix):
    p = tmp_path_factory.mktemp("fuzz") / f"f{suffix}"
    p.write_bytes(data)
    _read(p)


@SETTINGS
@given(value=json_values, suffix=st.sampled_from([".jsonl", ".json"]))
def test_random_json_structures(tmp_path_factory, value, suffix):
    p = tmp_path_factory.mktemp("fuzz") / f"f{suffix}"
    p.write_text(json.dumps(value) + "\n")
    _read(p)


@SETTINGS
@given(records=st.lists(record, min_size=1, max_size=4), suffix=st.sampled_from([".jsonl", ".json"]))
def test_random_records(tmp_path_factory, records, suffix):
    p = tmp_path_factory.mktemp("fuzz") / f"f{suffix}"
    p.write_text("".join(json.dumps(r) + "\n" for r in records) if suffix == ".jsonl"
                 else json.dumps(records))
    _read(p)
