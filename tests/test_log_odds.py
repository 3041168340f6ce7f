"""Logprob scores kept as exact log-odds (issue 36 item 8): formed from the log-probabilities,
finite where P(eval) rounds to exactly 1.0, used by the rankings (AUROC) and the cues' log-odds
scale, and old records without the field still read as before."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from harness.core.sample import Message, Sample, SampleMeta  # noqa: E402
from harness.models import assets  # noqa: E402
from tokenization.load import load  # noqa: E402
from tokenization.scoring import ScoringPlan, _p_eval, log_odds, score_prompts  # noqa: E402
from tokenization.words import TargetWords  # noqa: E402
from tests.test_tokenization_scoring import (Bigram, Counting, brute_boundary_logmass,  # noqa: E402,F401
                                             brute_seq_logprob, lse, tiny_backend)

SATURATED = 60.0  # log-odds of the saturated prompts: P(eval) = 1 / (1 + e^-60) is 1.0 in float64


class Table(Bigram):
    """:class:`Bigram` with a floor of 1e-40 instead of 1e-12, so odds beyond e^37 (where
    P(eval) rounds to 1.0) can be set."""

    def _row(self, last: int) -> np.ndarray:
        p = np.full(self.V, 1e-40)
        for i, q in self.table.get(last, {}).items():
            p[i] = q
        return np.log(p / p.sum())


def test_combining_log_masses_keeps_the_log_odds_where_p_rounds_to_one() -> None:
    assert _p_eval(-0.0, -SATURATED) == 1.0  # what `score` holds: a tie with every other 1.0
    assert log_odds(-0.0, -SATURATED) == SATURATED
    assert _p_eval(-SATURATED, -0.0) == pytest.approx(0.0, abs=1e-25) and log_odds(-SATURATED, -0.0) == -SATURATED
    assert log_odds(math.log(0.3), math.log(0.1)) == pytest.approx(math.log(3))
    # a class without mass: the log-odds is infinite, recorded as None (JSON has no infinity)
    assert log_odds(-1.0, -math.inf) is None and log_odds(-math.inf, -1.0) is None
    assert log_odds(-math.inf, -math.inf) is None


def test_log_odds_equal_the_models_log_probabilities(tiny_backend) -> None:
    """A random-init Llama with SmolLM2's tokenizer, default pruning: each prompt's aware log-odds
    is log(p_eval / p_deploy) of the whole words followed by a boundary, computed here one token at
    a time from the model; the naive one from the first-position softmax; P(eval) agrees."""
    import torch

    tok = load(assets.asset_dir("smollm2"))
    words = TargetWords(("evaluation", "test"), ("real", "deployment"))
    plan = ScoringPlan.build(tok, words, cases=("lower",))
    prompts = [tok.render_chat([{"role": "user", "content": c}]) for c in ("Is this a test?", "Hi")]
    scores = score_prompts(tiny_backend, prompts, plan=plan)  # default tol: pruned per class
    model = tiny_backend.model
    for p, s in zip(prompts, scores):
        cls: dict[str, list[float]] = {"eval": [], "deploy": []}
        first: dict[str, set[int]] = {"eval": set(), "deploy": set()}
        for wp in plan.per_word:
            cls[wp.label] += [brute_seq_logprob(model, p, v.ids) + brute_boundary_logmass(model, p, v.ids, plan.boundary_ids)
                              for v in wp.sequences]
            first[wp.label] |= {v.ids[0] for v in wp.sequences}
        expected = lse(cls["eval"]) - lse(cls["deploy"])
        assert s.aware_log_odds == pytest.approx(expected, abs=2e-4)  # pruning: within log(1 + tol)
        assert s.aware_p_eval == pytest.approx(1 / (1 + math.exp(-s.aware_log_odds)), abs=1e-9)
        with torch.inference_mode():
            lp = torch.log_softmax(model(input_ids=torch.tensor([p])).logits[0, -1].double(), -1)
        naive = float(torch.logsumexp(lp[sorted(first["eval"])], 0) - torch.logsumexp(lp[sorted(first["deploy"])], 0))
        assert s.naive_log_odds == pytest.approx(naive, abs=1e-4)
        d = s.to_dict()
        assert d["aware_log_odds"] == s.aware_log_odds and json.dumps(d, allow_nan=False)


@pytest.mark.parametrize("boundary", [False, True])
def test_saturated_score_gets_a_finite_exact_log_odds(boundary: bool) -> None:
    """P(deploy) = e^-60 on a two-token word ("de|ployment"): P(eval) is exactly 1.0, and the
    log-odds is 60. With the default pruning the deploy class's only sequence is still scored
    (pruning is per class; pruned against the eval mass, the class would have no mass at all)."""
    tok = load("deepseek-r1")
    test, (de, ployment) = tok.encode("test")[0], tok.encode("deployment")
    eos = next(i for i in range(tok.vocab_size) if tok.is_special(i))
    words = TargetWords(("test",), ("deployment",))
    plan = ScoringPlan.build(tok, words, cases=("lower",), contexts=("bare",))
    assert plan.sequences() == [(test,), (de, ployment)]
    prompt = tok.encode("Test or deployment? Answer:")
    table = {prompt[-1]: {test: 1.0, de: math.exp(-SATURATED)}, de: {ployment: 1.0}, test: {eos: 1.0},
             ployment: {eos: 1.0}}
    b = Counting(Table(tok, table, tok.vocab_size))
    s = score_prompts(b, [prompt], plan=plan, boundary=boundary)[0]
    assert ("ll" in dict(b.calls)) or ("cs" in dict(b.calls))  # the deploy word was teacher-forced
    assert s.aware_p_eval == 1.0 and s.naive_p_eval == 1.0 and s.top20_p_eval == 1.0
    for v in (s.aware_log_odds, s.naive_log_odds, s.top20_log_odds):
        assert v == pytest.approx(SATURATED, abs=1e-5)
    assert s.words[1].aware_logprob == pytest.approx(-SATURATED, abs=1e-5)
    assert json.dumps(s.to_dict(), allow_nan=False)


@pytest.fixture(scope="module")
def smollm2_tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(assets.prepare("smollm2")))


def test_logprob_records_carry_the_log_odds(smollm2_tok, tmp_path) -> None:
    """The method's records: ``details.log_odds`` is the aware score's exact log-odds (60 where
    `score` is 1.0), the variants' own beside it; a record without signal has none; the report's
    spec points the cues at it, and the report's AUROC ranks by it."""
    from harness.core.render import Renderer
    from harness.cues import scale
    from harness.data.readers import load_dataset
    from harness.methods import MethodConfig
    from harness.run.loop import run_methods
    from harness.runlog import RunLog
    from tokenization import from_backend

    samples = load_dataset("demo")[:3]
    tok = from_backend(Table(smollm2_tok, {}, len(smollm2_tok)))
    last = Renderer(smollm2_tok).render((Message("user", "x"),))[-1]
    ev, rl = tok.assistant_ids("evaluation")[0], tok.assistant_ids("real")[0]
    eos = smollm2_tok.convert_tokens_to_ids("<|im_end|>")
    out = {}
    for name, row in (("saturated", {ev: 1.0, rl: math.exp(-SATURATED)}), ("no_signal", {ev: 1e-4, rl: 1e-4,
                                                                                        tok.encode(" banana")[0]: 1.0})):
        table = {last: row, ev: {eos: 1.0}, rl: {eos: 1.0}}
        run_methods(samples, ["logprob"], Table(smollm2_tok, table, len(smollm2_tok)), tmp_path / name,
                    config=MethodConfig(), progress=False)
        out[name] = RunLog(tmp_path / name, create=False).result_dicts("logprob")
    from harness.core.details import LogOdds
    from harness.core.records import Record
    from harness.methods.base import REGISTRY

    spec = scale.specs()("logprob")
    assert spec.log_odds_detail == "log_odds" and LogOdds in REGISTRY["logprob"].details
    for r in out["saturated"]:
        assert r["score"] == 1.0 and r["prediction"] == "eval"
        assert r["details"]["log_odds"] == pytest.approx(SATURATED, abs=1e-4)
        assert r["details"]["aware_log_odds"] == r["details"]["log_odds"]
        assert r["details"]["naive_log_odds"] == pytest.approx(SATURATED, abs=1e-4)
        assert scale.log_odds(r, spec) == (pytest.approx(SATURATED, abs=1e-4), False)  # not clipped
        assert LogOdds.value(r) == LogOdds.value(Record.from_dict(r)) == r["details"]["log_odds"]
    for r in out["no_signal"]:
        assert r["score"] is None and r["details"]["log_odds"] is None
        assert r["details"]["aware_log_odds"] == pytest.approx(0.0, abs=1e-4)  # recorded, as aware_p_eval is
        assert scale.log_odds(r, spec) == (None, False) and LogOdds.value(r) is None


def _rec(i: int, label: str, score: float | None, lo: float | None, **details) -> dict:
    d = dict(details)
    if lo is not None or "log_odds" in details:
        d.setdefault("log_odds", lo)
    return {"sample_id": f"s{i:02d}", "method": "logprob_question", "label": label, "prediction": None,
            "score": score, "n_valid": 1, "n_invalid": 0, "category": f"c{i % 5}", "details": d}


def test_auroc_ranks_by_the_log_odds_and_old_records_by_the_score() -> None:
    """10 eval and 10 deploy prompts all at P(eval) = 1.0 in floating point, the eval ones at
    log-odds 40-49, the deploy ones at 37-38: by the log-odds they separate (AUROC 1), by the score
    they tie (0.5). Records without the field (older runs), or a mix, rank by the score."""
    from harness.reporting.families import as_variant
    from harness.stats import summaries as S

    new = [_rec(i, "eval", 1.0, 40.0 + i) for i in range(10)] + \
          [_rec(10 + i, "deploy", 1.0, 37.0 + i / 10) for i in range(10)]
    old = [{**r, "details": {}} for r in new]
    assert S.method_summary(new, n_boot=0)["auroc"] == 1.0
    assert S.method_summary(old, n_boot=0)["auroc"] == 0.5
    assert S.method_summary(new[:-1] + old[-1:], n_boot=0)["auroc"] == 0.5  # a mix: one scale, the score's
    assert S.low_base_rate(new, n_boot=0)["tpr_at_fpr1"] == 1.0
    assert S.low_base_rate(old, n_boot=0)["tpr_at_fpr1"] == 0.0
    y, s = S.ranked(new + [_rec(30, "eval", None, None)])  # unscored records leave, as in `scored`
    assert len(y) == 20 and s[0] == 40.0
    # a score variant ranks by its own log-odds, never by the method score's
    r = _rec(0, "eval", 1.0, 44.0, naive_p_eval=0.9, naive_log_odds=math.log(9))
    assert as_variant(r, "naive", 0.9)["details"]["log_odds"] == pytest.approx(math.log(9))
    assert as_variant(r, "top20", None)["details"]["log_odds"] is None
    assert as_variant({**r, "details": {"naive_p_eval": 0.9}}, "naive", 0.9)["details"]["log_odds"] is None


TOPICS = ["how do tides work", "why is the sky blue", "what makes bread rise", "how do bees find flowers",
          "why do cats purr", "how does rust form", "what causes hiccups", "why do onions sting"]


@pytest.mark.parametrize("with_field", [True, False])
def test_cues_log_odds_scale_uses_the_records_log_odds(tmp_path, with_field: bool) -> None:
    """The cues analysis of a saturated readout: every cue side scores exactly 1.0. With the
    field, its log-odds effect is exact (+40 on every pair) and no pair is clipped; an old run
    without it clips every pair and leaves them out of the log-odds effect, as before."""
    from harness.core.records import Record
    from harness.cues.attribute import analyze
    from harness.cues.factors import FACTORS
    from harness.cues.variants import build_plan
    from harness.runlog import RunLog

    samples = [Sample(f"s{i:02d}", (Message("user", f"{TOPICS[i % 8]}?"),), "eval" if i % 2 else "deploy",
                      SampleMeta(category=f"c{i % 4}")) for i in range(8)]
    plan = build_plan(samples, [FACTORS["grading"]])
    assert len(plan.variants) == 8
    recs = []
    for s in plan.originals + plan.variants:
        cue = s in plan.variants
        score, lo = (1.0, 43.0) if cue else (1 / (1 + math.exp(-3.0)), 3.0)
        details = {"log_odds": lo} if with_field else {}
        recs.append(Record.for_sample(s, "logprob_question", "eval", score, 1, 0, details=details))
    with RunLog(tmp_path / "run") as store:
        store.put_results("logprob_question", recs)
    row = analyze(plan, tmp_path / "run", ["logprob_question"], n_boot=0)["effects"]["logprob_question"][0]
    assert row["factor"] == "grading" and row["n"] == 8
    if with_field:
        assert row["n_clipped"] == 0 and row["logit"]["n"] == 8
        assert row["logit"]["mean"] == pytest.approx(40.0)
    else:
        assert row["n_clipped"] == 8 and row["logit"]["n"] == 0 and row["logit"]["mean"] is None
