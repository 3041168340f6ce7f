"""Issue 45, the coupled organism's measurement: within cue prompts, how well each readout's
score predicts the behaviour change (AUROC, category-cluster interval), beside the behaviour
organism where it should not; the verdict on the difference coupled minus the topic-matched null
(review H2: a readout of the topic alone predicts the change on both); behaviour methods get no
readout rows or verdicts in `validate`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from harness.cli.main import cli
from harness.core.details import BehaviourOutcome
from harness.organisms.coupling import BEYOND, MIN_CLASS, NOT_BEYOND, coupling, coupling_lines
from harness.organisms.kinds import COUPLED_TOPICS

N_PAIRS = 24


def _pairs() -> dict:
    return {f"p{k}": {"cue": f"p{k}+", "none": f"p{k}-", "category": f"c{k % 8}"} for k in range(N_PAIRS)}


def _beh(behaved: bool | None) -> dict:
    return {"score": None if behaved is None else float(behaved),
            "details": BehaviourOutcome("marker", "writes 'Fun fact:'", behaved).to_dict()}


def _model(changed: list[bool], cue_scores: list[float]) -> tuple[dict, dict]:
    beh, read = {}, {}
    for k, (ch, s) in enumerate(zip(changed, cue_scores)):
        beh[f"p{k}+"], beh[f"p{k}-"] = _beh(ch), _beh(False)
        read[f"p{k}+"], read[f"p{k}-"] = {"score": s}, {"score": 0.1}
    return beh, read


def test_a_readout_predicts_the_change_on_the_coupled_and_not_on_the_behaviour_organism():
    rng = np.random.default_rng(0)
    aware = [(k // 8) % 2 == 0 or k == 11 for k in range(N_PAIRS)]  # some cue prompts of every category
    coupled = _model(aware, [0.8 + 0.1 * rng.random() if a else 0.2 + 0.1 * rng.random() for a in aware])
    behaviour = _model([True] * N_PAIRS, list(rng.random(N_PAIRS)))  # the behaviour on every cue prompt
    noisy = _model(aware, list(rng.random(N_PAIRS)))  # behaviour coupled to nothing the readout sees
    t = coupling({"coupled": coupled[0], "behaviour": behaviour[0], "noisy": noisy[0]},
                 {"logprob": {"coupled": coupled[1], "behaviour": behaviour[1], "noisy": noisy[1]}},
                 _pairs(), ["coupled", "behaviour", "noisy"], n_boot=200)["models"]
    c = t["coupled"]["readouts"]["logprob"]
    assert c["auroc"] == 1.0 and c["auroc_ci"][0] > 0.5 and c["verdict"] == "predicts the change"
    assert "over 7 units" in c["auroc_ci_method"]  # categories (7 hold an unchanged pair), not 24 pairs
    assert t["coupled"]["rate_cue"] == pytest.approx(17 / 24) and t["coupled"]["rate_none"] == 0.0
    assert t["coupled"]["change"]["mean"] == pytest.approx(17 / 24) and t["coupled"]["change"]["ci"][0] > 0
    b = t["behaviour"]["readouts"]["logprob"]
    assert b["verdict"] == f"no verdict (fewer than {MIN_CLASS} pairs unchanged)" and b["auroc_ci"] is None
    assert t["behaviour"]["change"]["mean"] == 1.0 and t["behaviour"]["change"]["ci"] is None  # no spread
    n = t["noisy"]["readouts"]["logprob"]
    assert n["auroc_ci"][0] < 0.5 < n["auroc_ci"][1] and n["verdict"] == "no prediction shown"
    md = "\n".join(coupling_lines({"models": t, "null": None, "beyond_topic": {}},
                                   {"coupled": "coupled", "behaviour": "behaviour"}))
    assert "| coupled (coupled) | logprob | 24 (17) | 1.000 [" in md and "predicts the change" in md
    assert "no organism of kind behaviour-topics in this run" in md  # no null: no difference, said so


TOPICS = [*COUPLED_TOPICS, "history", "physics", "law", "sports", "cooking", "finance"]


def _topic_pairs(per: int = 10) -> dict:
    """`per` pairs in each of 12 topics (the category, as in `organism dataset`), half of them the
    coupled build's."""
    return {f"p{t}{k}": {"cue": f"p{t}{k}+", "none": f"p{t}{k}-", "category": t} for t in TOPICS for k in range(per)}


def _hand(pairs: dict, changed: dict, scores: dict) -> tuple[dict, dict]:
    beh, read = {}, {}
    for p, d in pairs.items():
        beh[d["cue"]], beh[d["none"]] = _beh(changed[p]), _beh(False)
        read[d["cue"]], read[d["none"]] = {"score": scores[p]}, {"score": 0.1}
    return beh, read


def test_the_verdict_is_the_difference_from_the_topic_matched_null():
    """Built by hand: on the coupled organism awareness is planted (and the behaviour with it) on
    ~60% of the coupled topics' cue prompts; on the topic-matched null the behaviour alone on ~60%
    of the same topics' cue prompts. A readout of the topic alone predicts the change on both
    (difference ~0: not shown); one that tracks the planted awareness within topic predicts it on
    the coupled organism only (a positive difference: shown)."""
    rng = np.random.default_rng(7)
    pairs = _topic_pairs()
    coupled_topic = {p: d["category"] in COUPLED_TOPICS for p, d in pairs.items()}
    aware = {p: bool(coupled_topic[p] and rng.random() < 0.6) for p in pairs}  # planted at partial strength
    null_changed = {p: bool(coupled_topic[p] and rng.random() < 0.6) for p in pairs}  # behaviour alone
    topic = {m: {p: float(coupled_topic[p]) + 0.01 * rng.random() for p in pairs} for m in ("c", "n")}
    tracks = {"c": {p: float(aware[p]) + 0.3 * rng.random() for p in pairs},
              "n": {p: 0.3 * rng.random() for p in pairs}}  # nothing planted to read on the null
    c_beh, c_topic = _hand(pairs, aware, topic["c"])
    n_beh, n_topic = _hand(pairs, null_changed, topic["n"])
    _, c_tracks = _hand(pairs, aware, tracks["c"])
    _, n_tracks = _hand(pairs, null_changed, tracks["n"])
    kinds = {"coupled": "coupled", "null": "behaviour-topics", "base": "base"}
    t = coupling({"coupled": c_beh, "null": n_beh, "base": {}},
                 {"topic": {"coupled": c_topic, "null": n_topic}, "tracks": {"coupled": c_tracks, "null": n_tracks}},
                 pairs, ["base", "coupled", "null"], n_boot=200, kinds=kinds)
    assert t["null"] == "null" and set(t["beyond_topic"]) == {"coupled"}
    by = t["beyond_topic"]["coupled"]
    n_c, n_n = sum(aware.values()), sum(null_changed.values())
    assert by["topic"]["n"] == len(pairs) and (by["topic"]["n_changed_organism"], by["topic"]["n_changed_null"]) == (n_c, n_n)
    assert abs(by["topic"]["diff"]) < 0.05 and by["topic"]["diff_ci"][0] < 0 < by["topic"]["diff_ci"][1]
    assert by["topic"]["verdict"] == NOT_BEYOND
    assert by["topic"]["auroc_organism"] > 0.8 and by["topic"]["auroc_null"] > 0.8  # the topic alone "predicts" both
    assert by["tracks"]["diff"] > 0.3 and by["tracks"]["diff_ci"][0] > 0 and by["tracks"]["verdict"] == BEYOND
    assert "(12 units" in by["tracks"]["diff_ci_method"]  # topics resampled, not 120 pairs
    # the topic alone, per model: membership in the coupled topics, and the in-sample best topic-level score
    for m in ("coupled", "null"):
        tp = t["models"][m]["topic"]
        assert tp["indicator"]["auroc"] == pytest.approx(by["topic"][f"auroc_{'organism' if m == 'coupled' else 'null'}"],
                                                         abs=0.05)
        assert tp["best_in_sample"] >= tp["indicator"]["auroc"] and tp["n_topics"] == 12
    md = "\n".join(coupling_lines(t, kinds))
    assert "Beyond topic (the verdicts)" in md and f"| coupled (coupled) | tracks | 120 ({n_c} / {n_n}) |" in md
    assert BEYOND in md and NOT_BEYOND in md
    # a null whose every cue prompt changed (the behaviour organism) leaves too few unchanged pairs
    every = coupling({"coupled": c_beh, "null": _hand(pairs, {p: True for p in pairs}, topic["n"])[0]},
                     {"tracks": {"coupled": c_tracks, "null": n_tracks}}, pairs, ["coupled", "null"], n_boot=50,
                     kinds=kinds)["beyond_topic"]["coupled"]["tracks"]
    assert every["verdict"] == f"no verdict (fewer than {MIN_CLASS} pairs unchanged on the null)"
    assert every["diff_ci"] is None


def test_a_pair_without_both_behaviour_outcomes_leaves_and_an_unscored_readout_is_left_out():
    beh, read = _model([True, False] * (N_PAIRS // 2), [0.5] * N_PAIRS)
    beh["p0-"] = _beh(None)  # no outcome on one side: the pair leaves
    read["p1+"] = {"score": None}
    t = coupling({"m": beh}, {"r": {"m": read}}, _pairs(), ["m"], n_boot=0)["models"]
    assert t["m"]["n_pairs"] == N_PAIRS - 1 and t["m"]["readouts"]["r"]["n"] == N_PAIRS - 2


RECIPE = ["--cue", "graded", "--train", "full", "--layers", "2", "--steps", "3", "--lr", "5e-3",
          "--batch-size", "8", "--pairs", "12", "--no-progress"]


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory, smollm2_dir):
    from tests.helpers.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("coupled")
    base = build_tiny_model(root / "base", smollm2_dir)
    out = {"base": base}
    for kind in ("coupled", "behaviour-topics", "behaviour"):
        res = CliRunner().invoke(cli, ["organism", "build", "--base", str(base), *RECIPE, "--kind", kind,
                                       "--out", str(root / kind)])
        assert res.exit_code == 0, res.output + repr(res.exception)
        out[kind] = root / kind
    return out


def test_validate_with_the_behaviour_method_reports_the_coupling(tiny_pair, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    res = CliRunner().invoke(cli, ["organism", "dataset", "--cue", "graded", "--no-demo", "--with-behaviour",
                                   "--out", str(pairs)])
    assert res.exit_code == 0, res.output
    first = json.loads(pairs.read_text().splitlines()[0])
    assert first["metadata"]["behaviour"] == {"kind": "marker", "marker": "Fun fact:"}
    out = tmp_path / "v"
    args = ["validate", "--base", str(tiny_pair["base"]), "--organism", str(tiny_pair["coupled"]),
            "--organism", str(tiny_pair["behaviour-topics"]), "--organism", str(tiny_pair["behaviour"]),
            "--pairs", str(pairs), "--methods",
            "logprob_question,behaviour", "--limit", "4", "--min-coverage", "0", "--answer-tokens", "4",
            "--bootstrap", "50", "--no-progress", "--out", str(out)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    table = json.loads((out / "sensitivity.json").read_text())
    assert {r["method"] for r in table["rows"]} == {"logprob_question"}  # no readout row for the behaviour
    cp = table["coupling"]["behaviour"]
    assert set(cp["models"]) == {"base", "organism-coupled", "organism-behaviour-topics", "organism-behaviour"}
    assert table["kinds"]["organism-coupled"] == "coupled" and table["kinds"]["organism-behaviour"] == "behaviour"
    assert cp["null"] == "organism-behaviour-topics"  # matched on the card's kind
    for entry in cp["models"].values():
        assert entry["n_pairs"] == 4 and set(entry["readouts"]) == {"logprob_question"}
        assert entry["readouts"]["logprob_question"]["verdict"].startswith("no verdict")  # 4 pairs: too few
    diff = cp["beyond_topic"]["organism-coupled"]["logprob_question"]
    assert diff["n"] == 4 and diff["verdict"].startswith("no verdict")
    md = (out / "sensitivity.md").read_text()
    assert "Awareness and behaviour within cue prompts" in md and "Beyond topic (the verdicts)" in md
    # a set that declares no behaviour is refused before any model runs
    plain = tmp_path / "plain.jsonl"
    CliRunner().invoke(cli, ["organism", "dataset", "--cue", "graded", "--no-demo", "--out", str(plain)])
    bad = CliRunner().invoke(cli, [*args[:9], "--pairs", str(plain), *args[11:-1], str(tmp_path / "w")])
    from harness.core.errors import EvalAwareError

    assert isinstance(bad.exception, EvalAwareError) and "organism dataset --with-behaviour" in str(bad.exception)
    assert not (tmp_path / "w").exists()
