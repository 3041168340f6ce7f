"""Every printed figure through one gate: the defects a review of the figures found, each with a
test that fails without its fix."""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness.stats import summaries as S


def _records(n_eval: int, n_deploy: int, perfect: bool = True) -> list[dict]:
    out = []
    for i in range(n_eval + n_deploy):
        lab = "eval" if i < n_eval else "deploy"
        score = (0.9 if lab == "eval" else 0.1) if perfect else 0.5
        out.append({"sample_id": f"c{i % 3}:{i}", "label": lab, "prediction": lab, "score": score,
                    "category": f"c{i % 3}", "n_valid": 1, "n_invalid": 0, "details": {}})
    return out


def test_auroc_and_tpr_are_gated_below_ten_scored_per_class():
    recs = _records(3, 3)  # 3 + 3 perfectly separated: AUROC 1.0 [1.0, 1.0] by luck
    s = S.method_summary(recs, n_boot=50)
    assert s["auroc"] is None and s["auroc_ci"] is None
    assert s["auroc_gate"] == "3 eval / 3 deploy scored, < 10 per class"
    lb = S.low_base_rate(recs, n_boot=50)
    assert lb["tpr_at_fpr5"] is None and lb["tpr_at_fpr1"] is None
    big = S.method_summary(_records(10, 10), n_boot=50)
    assert big["auroc"] == 1.0 and big["auroc_gate"] is None


def test_show_and_the_report_use_the_gate(tmp_path):
    from click.testing import CliRunner

    from evalaware.main import cli
    from harness.core.sample import Message, Sample, SampleMeta
    from harness.reporting.report import write_report
    from harness.runlog import RunLog

    recs = _records(3, 3)
    store = RunLog(tmp_path / "run")
    store.put_samples([Sample(r["sample_id"], (Message("user", "q"),), r["label"],
                              SampleMeta(category=r["category"])) for r in recs])
    store.put_results("binary", [{**r, "method": "binary"} for r in recs])
    store.close()
    out = CliRunner().invoke(cli, ["show", str(tmp_path / "run")]).output
    row = next(ln for ln in out.splitlines() if ln.startswith("binary"))
    assert "1.00" not in row.split()[-2:]  # the AUROC column shows "-"
    md, _ = write_report([tmp_path / "run"], tmp_path / "rep", n_boot=20)
    text = md.read_text()
    assert "1.000 [1.00, 1.00]" not in text
    assert "– (3 eval / 3 deploy scored, < 10 per class)" in text
    assert "no bar for binary" in text


def test_precision_uses_the_reached_fpr_and_has_an_interval():
    """Precision at a low base rate from the threshold's own FPR, with an exact interval; values
    derived by hand here, not with the functions under test."""
    from scipy.stats import beta

    recs = []
    for i in range(50):  # 50 deploy: one scores 0.95 (the only false positive above 0.9)
        recs.append({"sample_id": f"d{i}", "label": "deploy", "prediction": "deploy",
                     "score": 0.95 if i == 0 else 0.1 + 0.001 * i, "category": f"c{i % 5}"})
    for i in range(48):  # 48 eval: 30 score 0.99 (called eval), 18 score 0.2 (called deploy)
        hi = i < 30
        recs.append({"sample_id": f"e{i}", "label": "eval", "prediction": "eval" if hi else "deploy",
                     "score": 0.99 if hi else 0.2, "category": f"c{i % 5}"})
    b = S.low_base_rate(recs, base_rate=0.01, n_boot=0)
    # 49 deploy scores lie in 0.101..0.149, below every eval score: the threshold 0.2 catches
    # every eval sample with one false positive, an FPR of 1/50, not the nominal 5%.
    assert b["tpr_at_fpr5"] == 1.0 and b["fpr_reached5"] == pytest.approx(1 / 50)
    assert b["precision_at_fpr5"] == pytest.approx(0.01 / (0.01 + 0.02 * 0.99))
    # own decisions: 30/48 caught, 0/50 false positives -> precision 1.0, but not certain
    assert b["decision_precision"] == 1.0
    t_lo = beta.ppf(0.025, 30, 19)
    f_hi = 1 - 0.025 ** (1 / 50)
    lo, hi = b["decision_precision_ci"]
    assert lo == pytest.approx(t_lo * 0.01 / (t_lo * 0.01 + f_hi * 0.99), rel=1e-6) and hi == 1.0
    assert lo < 0.1  # 0 of 50 false positives does not make a rare-evaluation detector precise


def test_steering_compares_conditions_on_the_samples_scored_in_all(monkeypatch):
    """-0.1 kept a score on 25 of 48 samples, the control on 48: their means were compared as if
    on the same samples. Now P(eval) and delta use the samples scored in every condition."""
    from probes.steering import report as R

    def recs(scores):
        return [{"sample_id": f"c{i % 4}:{i}", "score": s, "prediction": None if s is None else "eval"}
                for i, s in enumerate(scores)]

    base = [0.5] * 8
    steered = [0.6] * 4 + [None] * 4  # the gate withheld half the samples
    control = [0.5] * 4 + [0.9] * 4  # high where the steered condition has no score
    groups = {f"c{i % 4}:{i}": f"c{i % 4}" for i in range(8)}
    data = {name: {"records": {"logprob_question": recs(sc)}, "groups": groups, "control": ctl,
                   "alpha": a, "sanity": None}
            for name, sc, ctl, a in (("unsteered_0", base, "none", 0.0),
                                     ("vector_+0.1", steered, "vector", 0.1),
                                     ("random_+0.1", control, "random", 0.1))}
    monkeypatch.setattr(R, "load_conditions", lambda out: ({"plan": 1}, data))
    rows = {r["condition"]: r for r in R.dose_response("unused", n_boot=0)["methods"]["logprob_question"]}
    assert rows["vector_+0.1"]["n_common"] == rows["random_+0.1"]["n_common"] == 4
    assert rows["unsteered_0"]["n_common"] == 8  # alpha 0 is compared with each alpha on its own
    assert rows["random_+0.1"]["delta"] == pytest.approx(0.0)  # 0.9s are not among the common 4
    assert rows["random_+0.1"]["p_eval"] == pytest.approx(0.5)
    assert rows["vector_+0.1"]["delta"] == pytest.approx(0.1)


def test_steering_layer_is_chosen_without_the_held_out_samples():
    """The layer whose held-out AUROC is best must not win because of it: the choice is made on an
    inner split of the training categories."""
    from probes.steering.build import _inner_selection
    from probes.steering.direction import SteeringVector

    rng = np.random.default_rng(0)
    y = np.array([1, 0] * 40)
    groups = [f"g{i % 8}" for i in range(80)]
    X = {1: rng.normal(size=(80, 16)), 2: rng.normal(size=(80, 16))}
    X[2][:, 0] += 3.0 * y  # layer 2 separates the classes in training; layer 1 is noise
    sel, how = _inner_selection(X, y, groups, seed=0)
    assert sel["2"] > 0.9 and abs(sel["1"] - 0.5) < 0.3 and "inner split" in how
    units = {l: np.eye(16)[0] for l in (1, 2)}
    vec = SteeringVector(units, units, {1: 1.0, 2: 1.0}, {"heldout_auroc": {"1": 0.99, "2": 0.6},
                                                   "selection_auroc": sel})
    assert vec.best_layer() == 2  # the held-out 0.99 of layer 1 plays no part


# --- item 4: a signal gate for the label probabilities ------------------------------------------

def test_label_mass_is_gated_counted_and_shown_beside_label_probability_figures(hf_tiny, tmp_path):
    """binary/probability read P(eval) at the label position whatever share of the probability
    the options get there (0.10-0.19 on the demo's SmolLM2 votes; ~0 on a random model): votes
    below --min-label-mass give no label probability, are counted, and the report shows the
    label-mass distribution beside the AUROC, calibration and summary figures."""
    from click.testing import CliRunner

    from evalaware.main import cli
    from harness.data.readers import load_dataset
    from harness.methods import MethodConfig
    from harness.reporting.report import write_report
    from harness.run.loop import run_methods
    from harness.runlog import RunLog

    samples = load_dataset("demo")[:2]
    base = dict(answer_tokens=4, probe_tokens=4)
    run_methods(samples, ["binary"], hf_tiny, tmp_path / "open", progress=False,
                config=MethodConfig(**base, min_label_mass=0.0))
    run_methods(samples, ["binary"], hf_tiny, tmp_path / "gated", progress=False,
                config=MethodConfig(**base, min_label_mass=0.5))
    for name, withheld in (("open", 0), ("gated", 5)):
        store = RunLog(tmp_path / name, create=False)
        assert store.get_meta("settings/binary")["min_label_mass"] == (0.5 if withheld else 0.0)
        for rec in store.result_dicts("binary"):
            d = rec["details"]
            assert all(v["label_mass"] < 0.5 for v in d["votes"])  # a random model: almost no mass
            assert d["label_votes_withheld"] == withheld
            assert sum(bool(v.get("label_withheld")) for v in d["votes"]) == withheld
            assert (rec["score"] is None) == bool(withheld)
        store.close()
    s = S.method_summary(RunLog(tmp_path / "gated", create=False).result_dicts("binary"), n_boot=0)
    assert s["label_mass"]["withheld"] == 10 and s["label_mass"]["n_votes"] == 10
    assert s["label_mass"]["min_label_mass"] == 0.5 and s["n_scored"] == 0
    md, _ = write_report([tmp_path / "open"], tmp_path / "rep", n_boot=0)
    text = md.read_text()
    assert "| label mass |" in text and "0/10 votes withheld (< 0)" in text
    assert text.count("label mass (the options' share") >= 2  # AUROC bars and calibration captions
    help_text = CliRunner().invoke(cli, ["run", "--help"]).output
    assert "--min-label-mass" in help_text


# --- item 5: the options' ids in context ---------------------------------------------------------

class _SentencePieceAsHF:
    """The Mistral v3 SentencePiece vocabulary (asset tok-mistral-v3) behind the HF calls the
    renderer and the label probabilities make: the dummy prefix '▁' at the start of every
    encoded string, as HF's (legacy) Llama/Mistral tokenizers and mistral-common do."""

    chat_template = None
    bos_token = ""

    def __init__(self, raw) -> None:
        self.raw = raw

    def __call__(self, text, add_special_tokens=False):
        if isinstance(text, list):
            return {"input_ids": [self.encode(t) for t in text]}
        return {"input_ids": self.encode(text)}

    def encode(self, text, add_special_tokens=False):
        return list(self.raw.encode(text, bos=False, eos=False))

    def convert_ids_to_tokens(self, ids):
        return [self.raw._model.id_to_piece(i) for i in ids]


class _Recorder:
    """A backend that records the (prompt, continuation) pairs it is asked to score."""

    from harness.backends.base import Capabilities
    capabilities = Capabilities()

    def __init__(self) -> None:
        self.pairs = []

    def loglikelihood(self, pairs):
        self.pairs += [(tuple(p), tuple(c)) for p, c in pairs]
        return [-1.0 - i for i in range(len(pairs))]


def test_label_options_are_tokenized_in_context_not_alone():
    from harness.core.render import Renderer
    from harness.core.sample import Message
    from harness.methods.answer_format import BINARY, PROBABILITY, label_probabilities
    from tokenization.errors import AssetError
    from tokenization.load import load

    try:
        tok = _SentencePieceAsHF(load("mistral-v3").raw)
    except AssetError:
        pytest.skip("tok-mistral-v3 asset not prepared")
    r = Renderer(tok)
    conv = (Message("user", "Is this a test?"),)
    for fmt in (BINARY, PROBABILITY):
        rec = _Recorder()
        label_probabilities(rec, r, fmt, [conv])
        for (prompt, cont), (_, option) in zip(rec.pairs, fmt.options):
            # what the model would read had it written the option itself: one string
            assert prompt + cont == r.render(conv, assistant_prefix=fmt.prefix + option)
            assert not tok.convert_ids_to_tokens(cont)[0].startswith("\u2581")
    from harness.methods.answer_format import in_context

    _, [cont] = in_context(tok, "[INST] Is this a test? [/INST]<label>", ["EVALUATION"])
    assert tok.convert_ids_to_tokens(cont) == ["E", "VAL", "U", "ATION"]
    assert tok.convert_ids_to_tokens(tok.encode("EVALUATION"))[:4] == ["\u2581E", "VAL", "U", "ATION"]


# --- item 3: reasoning models' label probabilities at the answer position ------------------------

def test_label_probabilities_of_reasoning_models_are_read_at_the_answer_position():
    """Qwen3 and DeepSeek-R1: the label is scored after the empty, closed reasoning block (where the
    logprob methods score, `answer_start`), not straight after the generation prompt, where the
    model opens its reasoning and never writes a label."""
    from transformers import PreTrainedTokenizerFast

    from harness.core.render import Renderer
    from harness.core.sample import Message
    from harness.methods import MethodConfig, RunContext
    from harness.methods.answer_format import BINARY, PROBABILITY, label_probabilities
    from harness.methods.answer_position import EMPTY_THINK
    from harness.methods.binary import BinaryTest
    from harness.methods.prompts import PromptLibrary
    from harness.models import assets

    def hf_tok(asset: str, eos: str):
        d = assets.prepare(asset)
        t = PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"), eos_token=eos, pad_token=eos)
        t.chat_template = (d / "chat_template.jinja").read_text()
        return t

    conv = (Message("user", "Write a haiku."), Message("assistant", "Leaves fall."),
            Message("user", "Is this an evaluation?"))
    for asset, eos, gen_prompt, how in (
            ("tok-qwen3", "<|im_end|>", "<|im_start|>assistant\n", "template_thinking_off"),
            ("tok-deepseek-r1", "<｜end▁of▁sentence｜>", "<｜Assistant｜>", "closed_empty_reasoning")):
        tok = hf_tok(asset, eos)
        r = Renderer(tok)
        for fmt in (BINARY, PROBABILITY):
            rec = _Recorder()
            [lab] = label_probabilities(rec, r, fmt, [conv])
            for (prompt, cont), (_, option) in zip(rec.pairs, fmt.options):
                assert EMPTY_THINK in tok.decode(prompt[-12:])
                text = tok.decode(prompt + cont)
                assert text.endswith(gen_prompt + EMPTY_THINK + fmt.prefix + option), text[-80:]
            assert lab["label_position"] == how
        ctx = RunContext(backend=_Recorder(), renderer=r, config=MethodConfig(), prompts=PromptLibrary())
        assert BinaryTest(ctx).settings()["label_position"] == how


# --- item 11: method − best surface with a paired interval on the same samples -------------------

def test_method_minus_best_surface_is_paired_on_the_same_samples_with_an_interval(tmp_path, monkeypatch):
    """The difference is taken on the samples the method scored (not the surface predictor's AUROC
    over all samples), and has a paired category-bootstrap interval in which the best of the
    surface predictors is chosen again in every resample; checked against a direct loop."""
    from sklearn.metrics import roc_auc_score

    from harness.core.sample import Message, Sample, SampleMeta
    from harness.reporting.report import write_report
    from harness.runlog import RunLog
    from harness.stats.metrics import bootstrap_weights
    from harness.stats.paired import auroc_minus_best

    import harness.stats.metrics as metrics

    rng = np.random.default_rng(0)
    n, G = 120, 12
    monkeypatch.setattr(metrics, "SMALL_SAMPLE_UNITS", 0)  # the bootstrap itself, checked by a loop
    y = np.arange(n) % 2
    groups = [f"g{i % G}" for i in range(n)]
    s = y + rng.normal(0, 1.0, n)
    base = {"a": y + rng.normal(0, 1.5, n), "b": y + rng.normal(0, 1.5, n)}
    v = auroc_minus_best(y, s, base, groups, n_boot=200, seed=3)
    best = max(base, key=lambda k: roc_auc_score(y, base[k]))
    assert v["best"] == best and v["diff"] == pytest.approx(roc_auc_score(y, s) - roc_auc_score(y, base[best]))
    W = bootstrap_weights(n, 200, 3, groups, strata=y)  # label-pure groups: drawn within their label
    d = [roc_auc_score(y, s, sample_weight=w) - max(roc_auc_score(y, b, sample_weight=w) for b in base.values())
         for w in W]
    assert v["diff_ci"] == pytest.approx([np.quantile(d, 0.025), np.quantile(d, 0.975)], abs=1e-4)
    monkeypatch.undo()

    # the report: a method that scored 40 of 96 samples is compared on those 40
    samples, recs = [], []
    for i in range(96):
        lab = "eval" if i % 2 else "deploy"
        text = ("Q: Choose A. or B. " if lab == "eval" else "hey can you help me ") + f"item {i}"
        samples.append(Sample(f"s{i}", (Message("user", text),), lab, SampleMeta(category=f"c{i % 16 // 2}")))
        sc = None if i >= 40 else float(np.clip((0.7 if lab == "eval" else 0.3) + rng.normal(0, 0.25), 0, 1))
        recs.append({"sample_id": f"s{i}", "label": lab, "prediction": None if sc is None else
                     ("eval" if sc >= 0.5 else "deploy"), "score": sc, "category": f"c{i % 16 // 2}",
                     "n_valid": 1, "n_invalid": 0, "method": "binary", "details": {}})
    store = RunLog(tmp_path / "run")
    store.put_samples(samples)
    store.put_results("binary", recs)
    store.close()
    md, _ = write_report([tmp_path / "run"], tmp_path / "rep", n_boot=100)
    row = next(ln for ln in md.read_text().splitlines() if ln.startswith("| run ") and "| binary |" in ln
               and "best surface" not in ln and "| 40 |" in ln)
    assert re.search(r"[+-]\d\.\d{3} \[[+-]\d\.\d\d, [+-]\d\.\d\d\]", row), row


# --- item 8: a control distribution for steering, small-sample intervals, many alphas ------------

def test_steering_is_ranked_among_twenty_norm_matched_random_directions():
    """`steer run` defaults to 20 random directions per alpha, each with the vector's norm and its
    own seed; the report ranks the vector's delta among theirs and gives a paired vector − random
    interval at the Bonferroni level over the alphas (hand-derived here)."""
    from scipy.stats import t as t_dist

    from probes.steering.direction import SteeringVector
    from probes.steering.report import random_control
    from probes.steering.run import conditions, steering_for

    conds = conditions([-0.5, 0, 0.5])
    rnd = [c for c in conds if c.control == "random"]
    assert len(rnd) == 40 and len({(c.alpha, c.k) for c in rnd}) == 40
    rng = np.random.default_rng(0)
    d = rng.normal(size=16).astype(np.float32)
    vec = SteeringVector({3: d / np.linalg.norm(d)}, {3: d}, {3: 7.0}, {})
    adds = [steering_for(vec, c, [3], "all", 0) for c in rnd if c.alpha == 0.5]
    norms = [float(np.linalg.norm(s.additions[3])) for s in adds]
    assert norms == pytest.approx([0.5 * 7.0] * 20, rel=1e-5)
    assert len({s.digest() for s in adds}) == 20  # 20 different directions

    # 4 categories x 3 samples; the vector moves P(eval) by +0.2, random directions by ~0
    ids = [f"c{g}:{i}" for g in range(4) for i in range(3)]
    groups = {sid: sid.split(":")[0] for sid in ids}
    base = {sid: 0.3 + 0.05 * k for k, sid in enumerate(ids)}
    scores = {"unsteered_0": base, "vector_+0.5": {s: v + 0.2 for s, v in base.items()}}
    rows = [{"condition": "unsteered_0", "control": "none", "alpha": 0.0, "delta": 0.0},
            {"condition": "vector_+0.5", "control": "vector", "alpha": 0.5, "delta": 0.2}]
    for k in range(20):
        shift = rng.normal(0, 0.03, len(ids))
        name = f"random{k or ''}_+0.5"
        scores[name] = {s: base[s] + x for s, x in zip(ids, shift)}
        rows.append({"condition": name, "control": "random", "alpha": 0.5, "delta": float(shift.mean())})
    [c] = random_control(rows, scores, set(ids), groups, n_alphas=3, n_boot=200, seed=0)
    assert c["rank"] == 1 and c["rank_p"] == pytest.approx(1 / 21) and c["n_random"] == 20
    per = {s: scores["vector_+0.5"][s] - np.mean([scores[r["condition"]][s] for r in rows[2:]]) for s in ids}
    cm = np.array([np.mean([per[s] for s in ids if groups[s] == g]) for g in ("c0", "c1", "c2", "c3")])
    h = t_dist.ppf(1 - 0.05 / 3 / 2, 3) * cm.std(ddof=1) / 2  # t on 4 cluster means, Bonferroni 3
    assert c["vector_minus_random"] == pytest.approx(cm.mean())
    assert c["vector_minus_random_ci"] == pytest.approx([cm.mean() - h, cm.mean() + h], abs=1e-9)
    assert c["ci_level"] == pytest.approx(1 - 0.05 / 3) and "jackknife t" in c["ci_method"]


def test_intervals_from_few_clusters_are_small_sample_correct():
    """Few clusters (< SMALL_SAMPLE_UNITS): the percentile cluster bootstrap under-covers (0.86 at
    6 clusters for 0.95); the interval is then the delete-one-cluster jackknife with a t quantile, which for a
    mean of equal-size clusters is the t interval on the cluster means (hand-derived), and the
    report's note says which interval it uses."""
    from scipy.stats import t as t_dist

    from harness.reporting.overview import resampling_note
    from harness.stats.metrics import bootstrap_weighted, weighted_mean_rows

    rng = np.random.default_rng(1)
    G, m = 6, 5
    g = np.repeat(np.arange(G), m)
    v = rng.normal(size=G)[g] + rng.normal(size=G * m)
    cm = np.array([v[g == k].mean() for k in range(G)])
    h = t_dist.ppf(0.975, G - 1) * cm.std(ddof=1) / np.sqrt(G)
    ci = bootstrap_weighted(lambda W: weighted_mean_rows(W, v), len(v), 1000, 0, list(g))
    assert ci == pytest.approx((cm.mean() - h, cm.mean() + h))
    note = resampling_note([{"ci_by": "category", "n_groups": 6}, {"ci_by": "category", "n_groups": 60}], 1000)
    assert "6 categories): cluster-jackknife t (6 units, t with 5 df)" in note
    assert "60 categories): percentile bootstrap" in note


# --- item 10 (rest): no one-class resample is dropped --------------------------------------------

def test_single_label_categories_are_resampled_within_their_label():
    """2 eval-only and 20 deploy-only categories: an unstratified category draw holds no eval
    category in (20/22)^22 = 12% of the resamples, which the AUROC interval dropped silently.
    Drawn within their labels, every resample keeps 2 eval and 20 deploy categories, and the
    summary's interval is the percentile interval over exactly those resamples (sklearn, by hand)."""
    from sklearn.metrics import roc_auc_score

    from harness.stats.metrics import bootstrap_weights

    rng = np.random.default_rng(4)
    cats = [f"e{i}" for i in range(2) for _ in range(6)] + [f"d{i}" for i in range(20) for _ in range(2)]
    y = np.array([1] * 12 + [0] * 40)
    s = y * 0.8 + rng.normal(0, 0.5, len(y))
    W = bootstrap_weights(len(y), 400, 0, cats, strata=y)
    drawn = {c: W[:, [i for i, x in enumerate(cats) if x == c][0]] for c in set(cats)}
    assert (sum(drawn[f"e{i}"] for i in range(2)) == 2).all()
    assert (sum(drawn[f"d{i}"] for i in range(20)) == 20).all()
    assert ((W * y).sum(1) > 0).all()  # no resample without an eval sample
    recs = [{"sample_id": f"{c}:{i}", "label": "eval" if t else "deploy", "prediction": None,
             "score": float(v), "category": c, "n_valid": 1, "n_invalid": 0, "details": {}}
            for i, (c, t, v) in enumerate(zip(cats, y, s))]
    lb = S.low_base_rate(recs, n_boot=400)
    assert lb["tpr_at_fpr5_ci"] is not None
    summ = S.method_summary(recs, n_boot=400)  # 22 categories: below SMALL_SAMPLE_UNITS -> jackknife
    assert summ["auroc_ci"] is not None
    from harness.stats.metrics import bootstrap_auroc
    import harness.stats.metrics as metrics

    old = metrics.SMALL_SAMPLE_UNITS
    metrics.SMALL_SAMPLE_UNITS = 0  # the percentile bootstrap itself
    try:
        ci = bootstrap_auroc(y, s, n=400, seed=0, groups=cats)
    finally:
        metrics.SMALL_SAMPLE_UNITS = old
    aucs = [roc_auc_score(y, s, sample_weight=w) for w in W]
    assert ci == pytest.approx((np.quantile(aucs, 0.025), np.quantile(aucs, 0.975)))


def test_bench_rank_correlation_is_over_samples_with_signal_in_both():
    """Issue 24 item 12: the cross-model Spearman of `bench_tokenization.py` was computed over every
    sample with a P(eval), signal or not (Gemma: 1% of samples with coverage >= 0.01, rho printed
    0.38/0.40). Only samples that pass the gate in both models count, and none below 20."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_tokenization.py"
    spec = importlib.util.spec_from_file_location("bench_tokenization", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 1, 40)

    def scores(pe, cov):
        return [{"aware_p_eval": float(x), "aware_coverage": float(c)} for x, c in zip(pe, cov)]

    a = scores(p, np.full(40, 0.05))
    # the other model: signal on 3 samples only, its P(eval) elsewhere a ratio of two tails that
    # happens to track the first model's
    cov_b = np.where(np.arange(40) < 3, 0.05, 0.001)
    b = scores(p + rng.normal(0, 0.05, 40), cov_b)
    assert bench.rank_correlation(a, b, "aware") == (3, None)
    b_all = scores(p + rng.normal(0, 0.05, 40), np.full(40, 0.05))
    n, rho = bench.rank_correlation(a, b_all, "aware")
    assert n == 40 and rho > 0.9
    half = scores(p, np.where(np.arange(40) < 25, 0.05, 0.0))
    n, rho = bench.rank_correlation(a, half, "aware")
    assert n == 25 and rho == 1.0


def test_steering_common_samples_are_per_alpha(monkeypatch):
    """At a strong alpha the random directions withheld every score, so the samples scored in
    *every* condition were none and the whole dose-response table was empty (the demo's steering
    report: n common 0 in every row). The comparison is per alpha: the vector, its random
    directions and alpha 0 on the samples all of them scored."""
    from probes.steering import report as R

    def recs(scores):
        return [{"sample_id": f"c{i % 4}:{i}", "score": s, "prediction": None if s is None else "eval"}
                for i, s in enumerate(scores)]

    groups = {f"c{i % 4}:{i}": f"c{i % 4}" for i in range(8)}
    conds = (("unsteered_0", [0.5] * 8, "none", 0.0),
             ("vector_+0.1", [0.7] * 6 + [None] * 2, "vector", 0.1),
             ("random_+0.1", [0.5] * 8, "random", 0.1),
             ("random1_+0.1", [None] + [0.6] * 7, "random", 0.1),
             ("vector_+0.5", [0.9] * 8, "vector", 0.5),
             ("random_+0.5", [None] * 8, "random", 0.5))  # the control breaks the answer format
    data = {name: {"records": {"logprob_question": recs(sc)}, "groups": groups, "control": ctl,
                   "alpha": a, "sanity": None} for name, sc, ctl, a in conds}
    monkeypatch.setattr(R, "load_conditions", lambda out: ({"plan": 1}, data))
    res = R.dose_response("unused", n_boot=0)
    rows = {r["condition"]: r for r in res["methods"]["logprob_question"]}
    assert rows["unsteered_0"]["n_common"] == 8
    assert rows["vector_+0.1"]["n_common"] == rows["random1_+0.1"]["n_common"] == 5  # samples 1-5
    assert rows["vector_+0.1"]["delta"] == pytest.approx(0.2)
    assert rows["random1_+0.1"]["delta"] == pytest.approx(0.1)
    assert rows["vector_+0.5"]["n_common"] == 0 and rows["vector_+0.5"]["delta"] is None
    [ctl] = res["controls"]["logprob_question"]
    assert ctl["alpha"] == 0.1 and ctl["n_common"] == 5
    assert ctl["vector_minus_random"] == pytest.approx(0.7 - 0.55)


def test_share_intervals_stay_inside_zero_one():
    """A share near 1 over few categories (23 of 24 answers changed, 12 categories): the
    cluster-jackknife t interval on the raw scale reached 1.05 (`intervene`'s summary printed
    0.958 [0.867, 1.050]); shares are bounded, their differences within [-1, 1]."""
    from harness.stats.paired import mean_with_ci, rate_with_ci

    hits = [True] * 23 + [False]
    groups = [f"c{i // 2}" for i in range(24)]
    r = rate_with_ci(hits, groups, n_boot=200)
    lo, hi = r["ci"]
    assert r["rate"] == pytest.approx(23 / 24) and 0.0 <= lo <= r["rate"] <= hi <= 1.0
    d = mean_with_ci([1.0] * 22 + [0.0, -1.0], groups, n_boot=200, bounds=(-1.0, 1.0))
    assert -1.0 <= d["ci"][0] <= d["mean"] <= d["ci"][1] <= 1.0
