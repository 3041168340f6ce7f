"""Dataset loading: our JSONL, Needham JSON quirks, malformed inputs, round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.data.readers import NEEDHAM_HUMAN_SOURCE, demo_path, load_dataset, summarize, write_jsonl
from harness.core.errors import DatasetError
from harness.core.sample import Message, Sample, SampleMeta, ToolCall
from tests.helpers.cli import in_process

FIX = Path(__file__).parent / "fixtures"


def test_needham_quirks():
    s = load_dataset(FIX / "needham_quirks.json")
    assert [x.id for x in s] == ["mmlu:12", "swe_gym:4", "sharegpt:77"]
    mmlu, swe, chat = s
    assert mmlu.label == "eval" and not mmlu.metadata.agentic
    assert mmlu.messages[1].content == "Which planet is largest?\nA) Mars B) Jupiter"  # blocks joined
    assert mmlu.metadata.human_eval_probability == pytest.approx(0.8)
    assert mmlu.metadata.human_eval_source == NEEDHAM_HUMAN_SOURCE  # named for its source
    assert swe.metadata.agentic and swe.metadata.extra["scaffold"] == "openhands"
    assert swe.messages[2].content is None
    # Needham's flat shape with dict arguments and OpenAI's nested shape both load.
    assert swe.messages[2].tool_calls == (ToolCall("c1", "bash", '{"cmd": "pytest -x"}'),)
    assert swe.messages[4].tool_calls == (ToolCall("c2", "bash", '{"cmd": "cat a.py"}'),)
    assert swe.messages[5].content == "def f(): pass"
    assert swe.metadata.human_eval_probability == pytest.approx(0.8)  # null author ignored
    assert swe.n_turns == 2 and len(swe.first_turn()) == 2
    assert chat.label == "deploy" and chat.metadata.category == "sharegpt"


def test_demo_dataset_is_balanced_mixed_and_without_invented_humans():
    s = load_dataset("demo")
    summ = summarize(s)
    assert summ.n >= 96 and summ.labels["eval"] == summ.labels["deploy"]
    # matched topics: every category holds both labels, so grouped CV tests style, not topic
    assert set(summ.mixed_categories) == set(summ.categories)
    agentic = [x for x in s if x.metadata.agentic]
    assert len(agentic) >= 20 and {x.label for x in agentic} == {"eval", "deploy"}
    assert all(x.messages[0].role == "system" and any(m.tool_calls for m in x.messages)
               and any(m.role == "tool" for m in x.messages) for x in agentic)
    # multi-turn transcripts and lower-case openings in both labels
    assert {x.label for x in s if x.n_turns > 1} == {"eval", "deploy"}
    assert {x.label for x in s if x.messages[[m.role for m in x.messages].index("user")].content[0].islower()} \
        == {"eval", "deploy"}
    # no human annotation was invented for the demo, not even under another key
    assert all(x.metadata.human_eval_probability is None and x.metadata.human_eval_source is None
               and "human_eval_probability" not in x.metadata.extra for x in s)
    assert demo_path().exists()


def test_human_probability_counts_only_with_a_named_source(tmp_path):
    rec = {"id": "c:1", "label": "eval", "messages": [{"role": "user", "content": "hi"}],
           "metadata": {"human_eval_probability": 0.9}}
    sourced = {**rec, "id": "c:2", "metadata": {"human_eval_probability": 0.7,
                                                "human_eval_source": "3 raters, mean"}}
    p = tmp_path / "h.jsonl"
    p.write_text(json.dumps(rec) + "\n" + json.dumps(sourced) + "\n")
    a, b = load_dataset(p)
    # unsourced (an author's guess): kept verbatim as unknown metadata, not a human annotation
    assert a.metadata.human_eval_probability is None and a.metadata.human_eval_source is None
    assert a.metadata.extra["human_eval_probability"] == 0.9
    assert b.metadata.human_eval_probability == 0.7 and b.metadata.human_eval_source == "3 raters, mean"
    # round trip keeps both as they were
    write_jsonl([a, b], tmp_path / "r.jsonl")
    a2, b2 = load_dataset(tmp_path / "r.jsonl")
    assert a2 == a and b2 == b
    summ = summarize([a, b])
    assert summ.human_sources == {"3 raters, mean": 1} and summ.unsourced_human == 1
    assert any("1 samples carry human_eval_probability without" in ln for ln in summ.lines())
    assert "human annotations: none" in summarize(load_dataset("demo")).lines()
    bad = {**rec, "metadata": {"human_eval_source": "me"}}
    p.write_text(json.dumps(bad) + "\n")
    with pytest.raises(DatasetError, match=r"human_eval_source"):
        load_dataset(p)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD = {"id": "a:1", "label": "eval", "messages": [{"role": "user", "content": "hi"}],
        "metadata": {"category": "a"}}


@pytest.mark.parametrize("mutate, expect", [
    (lambda r: r.pop("label"), r"record 2: id='bad:2': field 'label': missing label"),
    (lambda r: r.update(label="maybe"), r"field 'label': label must be 'eval' or 'deploy'"),
    (lambda r: r["messages"][0].update(role="robot"), r"field 'messages\[0\].role': unknown role 'robot'"),
    (lambda r: r.update(messages=[]), r"field 'messages': has no messages"),
    (lambda r: r["messages"][0].update(content=5), r"field 'messages\[0\].content'"),
    (lambda r: r.update(metadata={"human_eval_probability": 1.5}), r"human_eval_probability"),
    (lambda r: r.pop("id"), r"record 2: field 'id': missing or empty id"),
])
def test_malformed_records_name_record_and_field(tmp_path, mutate, expect):
    bad = json.loads(json.dumps(GOOD))
    bad["id"] = "bad:2"
    mutate(bad)
    p = _write(tmp_path, "d.jsonl", json.dumps(GOOD) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DatasetError, match=expect) as e:
        load_dataset(p)
    assert str(p) in str(e.value)


def test_bad_json_names_line(tmp_path):
    p = _write(tmp_path, "d.jsonl", json.dumps(GOOD) + "\n{not json\n")
    with pytest.raises(DatasetError, match=r"record 2: invalid JSON on line 2"):
        load_dataset(p)
    p2 = _write(tmp_path, "n.json", '[{"id": 1,')
    with pytest.raises(DatasetError, match=r"invalid JSON at line 1"):
        load_dataset(p2)


def test_needham_missing_eval_category(tmp_path):
    rec = {"id": "x:1", "input": [{"role": "user", "content": "q"}], "metadata": {"category": "x"}}
    p = _write(tmp_path, "n.json", json.dumps([rec]))
    with pytest.raises(DatasetError, match=r"record 1: id='x:1': field 'metadata.eval_category'"):
        load_dataset(p)


def test_duplicate_ids(tmp_path):
    p = _write(tmp_path, "d.jsonl", json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n")
    with pytest.raises(DatasetError, match="duplicate id"):
        load_dataset(p)


def test_text_prompts(tmp_path):
    p = _write(tmp_path, "bench.txt", "first prompt\n\nsecond prompt\n")
    s = load_dataset(p)
    assert [x.id for x in s] == ["bench:1", "bench:3"] and all(x.label == "eval" for x in s)
    assert load_dataset(p, label="deploy")[0].label == "deploy"


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("name, body", [
    ("d.jsonl", (json.dumps(GOOD, ensure_ascii=False) + "\r\n").encode()),
    ("d.json", json.dumps([GOOD]).encode()),
    ("d.txt", "hi\r\n".encode()),
])
def test_utf8_with_bom_loads_like_without(tmp_path, name, body):
    plain, bom = tmp_path / "plain", tmp_path / "bom"
    plain.mkdir(), bom.mkdir()
    (plain / name).write_bytes(body)
    (bom / name).write_bytes(BOM + body)
    a, b = load_dataset(plain / name), load_dataset(bom / name)
    assert a == b and a[0].messages[0].content == "hi"


def test_undecodable_byte_names_file_line_and_offset(tmp_path):
    good = (json.dumps(GOOD) + "\n").encode()
    p = tmp_path / "d.jsonl"
    p.write_bytes(BOM + good + b'{"id": "caf\xe9"}\n')  # Latin-1 e-acute inside line 2
    with pytest.raises(DatasetError) as e:
        load_dataset(p)
    offset = len(BOM) + len(good) + len(b'{"id": "caf')
    assert str(e.value) == (f"{p}: line 2: not UTF-8 (byte offset {offset}: e9, invalid "
                            f"continuation byte); save the file as UTF-8")
    assert p.read_bytes()[offset] == 0xE9
    t = tmp_path / "p.txt"
    t.write_bytes("first\nsecond\n".encode("utf-16"))
    with pytest.raises(DatasetError, match=r"p.txt: the file is UTF-16 \(byte-order mark ff fe\)"):
        load_dataset(t)
    r = in_process("data", "validate", p)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "line 2" in r.stderr


def test_label_option_for_label_less_inputs_only(tmp_path):
    txt = _write(tmp_path, "bench.txt", "one\ntwo\n")
    cli = ["data", "validate"]
    for flag in ("--label", "--text-label"):  # the old name stays as a hidden alias
        r = in_process(*cli, txt, flag, "deploy")
        assert r.returncode == 0 and "labels: deploy=2" in r.stdout, r.stderr
    r = in_process(*cli, txt, "--label", "eval", "--text-label", "deploy")
    assert r.returncode == 2 and "disagree" in r.stderr
    helptext = in_process(*cli, "--help").stdout
    assert "--label" in helptext and "--text-label" not in helptext
    r = in_process(*cli, "demo", "--label", "eval")
    assert r.returncode == 2 and "this file has its own labels" in r.stderr


def test_cli_validate_errors_one_line_nonzero(tmp_path):
    p = _write(tmp_path, "d.jsonl", json.dumps({**GOOD, "label": None}) + "\n")
    r = in_process("data", "validate", p)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "record 1" in lines[0] and "'label'" in lines[0]
    ok = in_process("data", "validate", "demo")
    assert ok.returncode == 0 and "labels: deploy=" in ok.stdout


# --- property-based round trip -------------------------------------------------------------
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
tool_call = st.builds(ToolCall, id=st.text("abc123", min_size=1, max_size=5),
                      name=st.text("abcdef_", min_size=1, max_size=8), arguments=text)


@st.composite
def samples(draw):
    n = draw(st.integers(0, 4))
    msgs = [Message("user", draw(text))]
    for _ in range(n):
        role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
        calls = tuple(draw(st.lists(tool_call, max_size=2))) if role == "assistant" else ()
        content = draw(st.one_of(st.none(), text)) if role == "assistant" else draw(text)
        msgs.append(Message(role, content, calls, "c1" if role == "tool" else None))
    cat = draw(st.text("abcxyz_", min_size=1, max_size=6))
    human = draw(st.one_of(st.none(), st.floats(0, 1)))
    meta = SampleMeta(category=cat, agentic=draw(st.booleans()),
                      eval_type=draw(st.sampled_from(["", "capability", "alignment"])),
                      human_eval_probability=human,
                      human_eval_source=None if human is None else draw(text.filter(str.strip)).strip())
    return Sample(id=f"{cat}:{draw(st.integers(0, 10**6))}", messages=tuple(msgs),
                  label=draw(st.sampled_from(["eval", "deploy"])), metadata=meta)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(samples(), min_size=1, max_size=5, unique_by=lambda s: s.id))
def test_roundtrip(tmp_path, xs):
    p = tmp_path / "rt.jsonl"
    write_jsonl(xs, p)
    assert load_dataset(p) == xs
