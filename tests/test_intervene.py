"""`evalaware intervene` on a tiny random model: three conditions as run directories, resumption
after an interrupt with no call repeated, paired differences per sample."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from harness.backends.base import WrappedBackend
from harness.data.readers import load_dataset
from harness.methods import MethodConfig
from harness.methods.sentences import load_pairs, sentence_cuts
from harness.intervene.conditions import (INTERVENTIONS, Source, final_answer, insertion_point, intervene,
                                   outcomes, read_sources, summary_table)
from harness.run.loop import run_methods
from harness.runlog import RunLog

CFG = MethodConfig(answer_tokens=10, temperature=1.0, seed=2)
OPS = ("generate", "loglikelihood", "next_token_logprobs", "next_token_view", "next_token_logmass",
       "next_token_logmasses", "continuation_scores")


class Interrupted(Exception):
    pass


class Calls(WrappedBackend):
    """Counts the items of every model call; raises `Interrupted` at the call that would pass
    `stop_after` items (before making it)."""

    def __init__(self, inner, stop_after: int | None = None) -> None:
        super().__init__(inner)
        self.items: Counter[str] = Counter()
        self.stop_after = stop_after
        self.keys: list[tuple] = []

    def __getattribute__(self, name):
        if name in OPS:
            fn = getattr(object.__getattribute__(self, "inner"), name)

            def counted(first, *a, **k):
                if self.stop_after is not None and sum(self.items.values()) + len(first) > self.stop_after:
                    raise Interrupted(name)
                self.items[name] += len(first)
                self.keys += [(name, repr(x), repr(a)) for x in first]
                return fn(first, *a, **k)
            return counted
        return object.__getattribute__(self, name)


@pytest.fixture(scope="module")
def source_run(hf_tiny, tmp_path_factory):
    d = tmp_path_factory.mktemp("src") / "run"
    samples = load_dataset("demo")[:3]
    run_methods(samples, ["monitor"], hf_tiny, d, config=CFG, progress=False)
    return d, samples


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("intervene", ".evalaware-lock"))
    return dst


def test_three_conditions_and_paired_differences(hf_tiny, source_run, tmp_path):
    run = _copy(source_run[0], tmp_path / "run")
    summary = intervene(run, hf_tiny, insert="both", at="end", methods=["logprob_question"],
                        batch_size=2, n_boot=50, progress=False)
    out = run / "intervene" / "end_pair0"
    plan = json.loads((out / "intervene.json").read_text())
    assert plan["conditions"] == ["none", "awareness", "placebo"] and plan["trace"] == "answer"
    pairs = load_pairs()
    got = {c: outcomes(out / c) for c in ("none", "awareness", "placebo")}
    ids = [s.id for s in source_run[1]]
    for c, o in got.items():
        assert sorted(o) == sorted(ids)
        assert o[ids[0]]["inserted"] == {"none": None, "awareness": pairs.aware[0],
                                         "placebo": pairs.placebo[0]}[c]
        recs = RunLog(out / c, create=False).result_dicts("logprob_question")
        assert len(recs) == len(ids)
    # the inserted sentence is in the condition's text, the no-insertion control has none
    assert all(pairs.aware[0] in o["text"] for o in got["awareness"].values())
    assert all(pairs.placebo[0] in o["text"] for o in got["placebo"].values())
    assert not any(pairs.aware[0] in o["text"] or pairs.placebo[0] in o["text"]
                   for o in got["none"].values())
    # paired differences are per sample: awareness - placebo of the monitor and of P(eval)
    aw_pl = summary["contrasts"]["awareness-placebo"]
    for i in ids:
        assert aw_pl["monitor_peak"]["per_sample"][i] == pytest.approx(
            got["awareness"][i]["monitor_peak"] - got["placebo"][i]["monitor_peak"])
    score = {c: {r["sample_id"]: r["score"] for r in RunLog(out / c, create=False).result_dicts("logprob_question")}
             for c in got}
    d = summary["contrasts"]["awareness-none"].get("logprob_question_score")
    if d:  # samples below the coverage gate have no score
        for i, v in d["per_sample"].items():
            assert v == pytest.approx(score["awareness"][i] - score["none"][i])
        assert d["mean"] == pytest.approx(np.mean(list(d["per_sample"].values())))
    ch = summary["contrasts"]["placebo-none"]["changed"]
    assert ch["mean"] == pytest.approx(np.mean([float(got["placebo"][i]["changed"]) - float(got["none"][i]["changed"])
                                                for i in ids]))
    assert summary["conditions"]["awareness"]["n"] == len(ids)
    assert any(line.startswith("| awareness-placebo |") for line in summary_table(summary))


def test_resumes_after_an_interrupt_without_repeating_a_call(hf_tiny, source_run, tmp_path):
    """The continuations and monitor readings (graded methods resume through run_methods, as
    tests/test_resume.py checks; they are left out here to keep the test fast)."""
    clean = Calls(hf_tiny)
    run_a = _copy(source_run[0], tmp_path / "a")
    intervene(run_a, clean, insert="both", at="middle", methods=[], batch_size=1,
              n_boot=0, progress=False)
    total = sum(clean.items.values())
    assert clean.items["generate"] == 3 * len(source_run[1])  # one continuation per sample and condition
    run_b = _copy(source_run[0], tmp_path / "b")
    done = Calls(hf_tiny, stop_after=total // 2)
    with pytest.raises(Interrupted):
        intervene(run_b, done, insert="both", at="middle", methods=[], batch_size=1,
                  n_boot=0, progress=False)
    rest = Calls(hf_tiny)
    intervene(run_b, rest, insert="both", at="middle", methods=[], batch_size=1,
              n_boot=0, progress=False)
    assert sum(done.items.values()) > 0 and sum(rest.items.values()) > 0
    assert sum(done.items.values()) + sum(rest.items.values()) == total
    assert not set(done.keys) & set(rest.keys)
    again = Calls(hf_tiny)
    intervene(run_b, again, insert="both", at="middle", methods=[], batch_size=1,
              n_boot=0, progress=False)
    assert sum(again.items.values()) == 0
    a = json.loads((run_a / "intervene" / "middle_pair0" / "summary.json").read_text())
    b = json.loads((run_b / "intervene" / "middle_pair0" / "summary.json").read_text())
    assert a == b


def test_insertion_points_and_final_answer(smollm2_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    text = "First point. Second point. Third point. Fourth point. Done"
    ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
    src = Source(None, (1,), ids, False, len(ids))  # type: ignore[arg-type]
    cuts = sentence_cuts(tok, ids)
    assert insertion_point(tok, src, "start") == 0
    assert insertion_point(tok, src, "end") == len(ids)
    mid = insertion_point(tok, src, "middle")
    assert mid in cuts and tok.decode(ids[:mid]).endswith("Second point.")
    assert final_answer(tok, ids, False, mid) == "Third point. Fourth point. Done"
    think = tuple(tok("a. b.</think>The answer.", add_special_tokens=False)["input_ids"])
    assert final_answer(tok, think, True, 0) == "The answer."
    # an elicited trace cut before `</think>` has no final answer: nothing to compare
    cut = tuple(tok("a. b. c", add_special_tokens=False)["input_ids"])
    assert final_answer(tok, cut, True, 2) is None
    assert final_answer(tok, cut, False, 2) is not None


def test_changed_is_left_out_where_there_is_no_final_answer(tmp_path):
    """`changed` of a sample whose reasoning never ends is None: the summary's rate counts only
    samples with a final answer (and says so), instead of a 0.000 [0, 0] from empty strings."""
    import json as _json

    from harness.intervene import conditions as iv
    from harness.runlog import RunLog as _RunLog

    out = tmp_path / "iv"
    out.mkdir()
    (out / iv.PLAN_FILE).write_text(_json.dumps({"at": "end", "pair": 0, "trace": "reasoning", "awareness": "A.",
                                                  "placebo": "B.", "conditions": ["none", "awareness"],
                                                  "methods": []}))
    for c, changed in (("none", [None, None, False]), ("awareness", [None, None, True])):
        st = _RunLog(out / c)
        try:
            st.put_samples(load_dataset("demo")[:3])
            st.table(iv.INTERVENTIONS).insert([(s.id, _json.dumps({"changed": ch, "monitor_peak": 1.0, "monitor_mean": 0.5}))
                                                for s, ch in zip(load_dataset("demo")[:3], changed)], replace=True)
        finally:
            st.close()
    summary = iv.summarize(out, n_boot=50)
    assert summary["conditions"]["none"]["changed"]["n"] == 1
    assert summary["conditions"]["awareness"]["changed"]["rate"] == 1.0
    assert summary["contrasts"]["awareness-none"]["changed"]["n"] == 1
    assert summary["contrasts"]["awareness-none"]["monitor_peak"]["n"] == 3
    table = "\n".join(summary_table(summary))
    assert "(of 1)" in table


def test_refuses_a_run_without_outputs(hf_tiny, tmp_path):
    from harness.core.errors import EvalAwareError

    run_methods(load_dataset("demo")[:1], ["logprob_question"], hf_tiny, tmp_path / "r", config=CFG,
                progress=False)
    st = RunLog(tmp_path / "r", create=False)
    with pytest.raises(EvalAwareError, match="no answer outputs"):
        read_sources(st, hf_tiny, "auto")
    assert INTERVENTIONS.name == "interventions"
