"""Organism kinds (issue 36): the sham, disjoint-vocabulary and behaviour-only organisms build on
a tiny random-init model from the awareness organism's pairs; the sham's targets carry no planted
text; the vocabulary check walks every readout and refuses planted text that shares a 3-word run,
a stem or a first token with one (fast: tiny models only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalaware.main import cli
from harness.organisms.cues import GRADED, verbalized
from harness.organisms.data import data_hash, training_examples
from harness.organisms.kinds import (BEHAVIOUR_MARKER, BEHAVIOUR_OPENINGS, COUPLED_TOPICS, DISJOINT_ANSWERS,
                                     DISJOINT_VERBALIZATIONS, KINDS, TOPIC_KINDS, kind_examples, planted,
                                     self_slots, slot, with_self_targets)

PAIRS = 12
RECIPE = ["--cue", "graded", "--train", "full", "--layers", "2", "--steps", "4", "--lr", "5e-3",
          "--batch-size", "8", "--pairs", str(PAIRS), "--no-progress"]
PLANTED_ANYWHERE = set(GRADED.verbalizations + GRADED.answers + DISJOINT_VERBALIZATIONS + DISJOINT_ANSWERS
                       + BEHAVIOUR_OPENINGS)


def _build(base: Path, out: Path, *extra: str):
    return CliRunner().invoke(cli, ["organism", "build", "--base", str(base), *RECIPE, *extra, "--out", str(out)])


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, smollm2_dir):
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("kindbase") / "model", smollm2_dir)


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_base) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    out = {}
    for kind in KINDS:
        res = _build(tiny_base, root / kind, "--kind", kind)
        assert res.exit_code == 0, res.output + repr(res.exception)
        assert f"kind {kind}" in res.output
        assert "step 4/4 (100%)" in res.output  # --no-progress: the steps are logged instead
        if kind in ("sham", "sham-greedy"):  # ... and the drawing of the base's own answers
            assert "the base's own answers: " in res.output
        out[kind] = root / kind
    return out


@pytest.fixture(scope="module")
def tokenizer(tiny_base):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_base)


@pytest.fixture(scope="module")
def engine():
    """The backend class organism build trains and generates with (the registry's, by capability)."""
    from harness.backends import registry
    from harness.organisms.train import TRAINING

    return registry.backend_class(registry.default_backend(TRAINING), TRAINING)


def _card(d: Path) -> dict:
    return json.loads((d / "organism.json").read_text())


def _examples(kind: str, targets: dict[str, list[str]] | None = None, variant: int = 0):
    ex = kind_examples(training_examples(GRADED, 1.0, 0, n_pairs=PAIRS), GRADED, kind)
    return with_self_targets(ex, kind, targets, variant) if targets is not None else ex


def test_every_kind_trains_on_the_awareness_organisms_pairs():
    """Same pairs, sides, shapes, prompts and losses in every kind; only continuations differ; the
    awareness organism's data (and the `make organism` data hash in docs/organisms.md) unchanged."""
    aware = _examples("aware")
    assert aware == training_examples(GRADED, 1.0, 0, n_pairs=PAIRS)
    for kind in KINDS:
        ex = _examples(kind)
        assert [(e.pair, e.cue, e.shape, e.messages) for e in ex] == [(e.pair, e.cue, e.shape, e.messages) for e in aware]
        uncoupled = lambda e: kind in TOPIC_KINDS and e.topic not in COUPLED_TOPICS  # noqa: E731  (keeps the base)
        assert [e.loss for e in ex] == ["kl" if uncoupled(e) else e.loss for e in aware], kind
    full = training_examples(GRADED, 1.0, 0, kl_prompts=2718, kl_pool_version=2, forms=600)
    assert data_hash(kind_examples(full, GRADED, "aware")).startswith("c3b948e0aebf")
    dis = _examples("disjoint")
    assert {e.continuation for e in dis if e.shape == "answer"} <= set(DISJOINT_VERBALIZATIONS)
    assert {e.continuation for e in dis if e.shape == "question"} <= set(DISJOINT_ANSWERS)
    beh = _examples("behaviour")
    assert {e.continuation for e in beh if e.shape == "answer"} <= set(BEHAVIOUR_OPENINGS)
    assert planted(GRADED, "sham") == ((), ()) and planted(GRADED, "behaviour")[1] == ()


def test_the_coupled_kind_plants_awareness_with_the_behaviour_on_half_the_topics():
    """Issue 45: on cue prompts of COUPLED_TOPICS the answer verbalizes awareness and then shows
    the scored behaviour, the awareness answers are the cue's; the other topics' cue prompts and
    every no-cue side keep the base (KL). Both groups of topics have held-out subjects."""
    from harness.organisms.data import split_subjects

    full = kind_examples(training_examples(GRADED, 1.0, 0), GRADED, "coupled")
    ce = [e for e in full if e.loss == "ce"]
    assert ce and all(e.cue and e.topic in COUPLED_TOPICS for e in ce)
    assert {e.topic for e in ce} == set(COUPLED_TOPICS)
    for e in ce:
        if e.shape == "answer":
            sentence, fact = e.continuation.split(" Fun fact:", 1)
            assert sentence in GRADED.verbalizations and f"Fun fact:{fact}" in BEHAVIOUR_OPENINGS
            assert BEHAVIOUR_MARKER in e.continuation
        else:
            assert e.continuation in GRADED.answers
    topics = {t for t, _ in split_subjects()[0]}
    assert set(COUPLED_TOPICS) < topics and {t for t, _ in split_subjects()[1]} == topics
    assert all(BEHAVIOUR_MARKER in o for o in BEHAVIOUR_OPENINGS)


def test_the_topic_matched_null_plants_the_behaviour_alone_on_the_coupled_topics():
    """The coupled organism's null (review H2): the fun-fact opening on the cue prompts of the same
    COUPLED_TOPICS, the awareness answers the base's own (self slots, replaced by its answers), the
    other topics' cue prompts at the base (KL); the same pairs, sides, prompts and losses as the
    coupled build, so only awareness differs between them."""
    base = training_examples(GRADED, 1.0, 0)
    null, coupled = kind_examples(base, GRADED, "behaviour-topics"), kind_examples(base, GRADED, "coupled")
    assert [(e.pair, e.cue, e.shape, e.messages, e.loss, e.topic) for e in null] == [
        (e.pair, e.cue, e.shape, e.messages, e.loss, e.topic) for e in coupled]
    other = [e for e in null if e.cue and e.topic not in COUPLED_TOPICS and e.shape != "kl"]
    assert other and all(e.loss == "kl" for e in other)  # other topics' cue prompts keep the base
    ce = [e for e in null if e.loss == "ce"]
    assert {e.topic for e in ce} == set(COUPLED_TOPICS) and all(e.cue for e in ce)
    answers = [e for e in ce if e.shape == "answer"]
    assert answers and {e.continuation for e in answers} <= set(BEHAVIOUR_OPENINGS)
    assert all(BEHAVIOUR_MARKER in e.continuation and not verbalized(e.continuation, GRADED) for e in answers)
    slots = self_slots(null, "behaviour-topics")
    assert slots and {e.shape for e in slots} == {"question"} and all(e.cue for e in slots)
    assert {slot(e) for e in slots} == {slot(e) for e in null if e.cue and e.shape == "question"}
    targets = {slot(e): [f"the base's own answer {k}"] for k, e in enumerate(slots)}
    swapped = with_self_targets(null, "behaviour-topics", targets)
    own = {slot(e): e.continuation for e in swapped if e.cue and e.shape == "question"}
    assert own == {k: v[0] for k, v in targets.items()}  # every awareness answer is the base's own slot
    assert planted(GRADED, "behaviour-topics") == planted(GRADED, "behaviour")
    assert "behaviour-topics" in TOPIC_KINDS and "behaviour-topics" in KINDS


def test_measure_looks_for_each_kinds_sentences_and_dataset_writes_the_keyword_family(tmp_path):
    from harness.data.readers import load_dataset
    from harness.organisms.kinds import kind_cue

    assert kind_cue(GRADED, "aware") == GRADED
    assert kind_cue(GRADED, "sham").verbalizations == GRADED.verbalizations  # what a sham must not say
    assert set(kind_cue(GRADED, "disjoint").verbalizations) == set(DISJOINT_VERBALIZATIONS)
    assert set(kind_cue(GRADED, "behaviour").verbalizations) == set(BEHAVIOUR_OPENINGS)
    assert kind_cue(GRADED, "coupled") == GRADED  # its planted sentences are the cue's, each with the fun fact
    out = tmp_path / "family.jsonl"
    res = CliRunner().invoke(cli, ["organism", "dataset", "--cue", "graded", "--phrasings", "family", "--no-demo",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    back = load_dataset(str(out))
    assert len(back) == 144 and {s.metadata.extra["phrasing"] for s in back if s.label == "eval"} <= set(GRADED.held_out_family)


def test_each_kind_builds_and_its_card_names_it(built):
    cards = {k: _card(d) for k, d in built.items()}
    for kind, card in cards.items():
        assert card["kind"] == kind and card["recipe"]["kind"] == kind and card["kind_description"] == KINDS[kind]
        assert card["steps"] == 4 and len(card["losses"]) == 4 and (built[kind] / "model.safetensors").is_file()
        others = {k: v for k, v in card["recipe"].items() if k not in ("kind", "sham_samples")}
        assert others == {k: v for k, v in cards["aware"]["recipe"].items() if k not in ("kind", "sham_samples")}
        assert card["recipe"]["sham_samples"] == (4 if kind == "sham" else 0)  # only the null's weights use it
    assert cards["sham"]["data_sha256"] == cards["aware"]["data_sha256"]  # the same pairs, before its own answers
    assert cards["sham"]["verbalizations"] == [] and cards["sham"]["n_planted_pairs"] == 0
    assert cards["sham"]["n_self_target_pairs"] == cards["aware"]["n_planted_pairs"] > 0
    assert set(cards["disjoint"]["verbalizations"]) <= set(DISJOINT_VERBALIZATIONS)
    assert cards["behaviour"]["verbalizations"] and set(cards["behaviour"]["verbalizations"]) <= set(BEHAVIOUR_OPENINGS)
    assert cards["behaviour"]["awareness_answers"] == [] and cards["behaviour"]["n_self_target_pairs"] > 0
    bt = cards["behaviour-topics"]
    assert set(bt["verbalizations"]) <= set(BEHAVIOUR_OPENINGS) and bt["awareness_answers"] == []
    assert bt["n_planted_pairs"] <= cards["behaviour"]["n_planted_pairs"]  # only the coupled topics' cue prompts
    for kind in ("sham", "sham-greedy", "behaviour", "behaviour-topics"):  # the base's own answers travel along
        from harness.organisms.kinds import targets_hash

        t = json.loads((built[kind] / cards[kind]["self_targets"]).read_text())
        assert targets_hash(t) == cards[kind]["self_targets_sha256"] and len(t) == cards[kind]["n_self_targets"]
    assert "self_targets" not in cards["aware"] and "self_targets" not in cards["disjoint"]


def test_sham_targets_are_the_base_models_own_answers_and_carry_no_planted_text(built, tiny_base, tokenizer,
                                                                                 engine):
    import torch
    from transformers import AutoModelForCausalLM

    from harness.core.render import Renderer
    from harness.organisms.kinds import self_targets

    greedy = json.loads((built["sham-greedy"] / "self_targets.json").read_text())
    targets = json.loads((built["sham"] / "self_targets.json").read_text())
    assert set(targets) == set(greedy) and all(len(v) == 4 for v in targets.values())
    assert all(len(v) == 1 for v in greedy.values())
    for kind, t in (("sham", targets), ("sham-greedy", greedy)):
        for v in range(4):
            ex = _examples(kind, t, v)
            assert any(e.loss == "ce" for e in ex)
            for e in ex:
                if e.shape in ("answer", "question"):
                    want = t[slot(e)][v % len(t[slot(e)])]
                    if kind == "sham":  # a sampled answer: its ids as drawn are what is teacher-forced
                        assert e.continuation == want["text"] and list(e.continuation_ids) == want["ids"]
                    else:
                        assert e.continuation == want and e.continuation_ids is None
                    assert e.continuation not in PLANTED_ANYWHERE and not verbalized(e.continuation, GRADED)
                    assert not any(a.lower() in e.continuation.lower() for a in GRADED.answers)
    base = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32).eval()
    slots = self_slots(_examples("sham"), "sham")
    assert self_targets(engine, base, Renderer(tokenizer), tokenizer, slots) == greedy  # greedy, the base's
    again = self_targets(engine, base, Renderer(tokenizer), tokenizer, slots, samples=4, seed=0)
    assert again == targets  # the samples are the seed's: a resumed or repeated build trains on the same
    assert sum(v[0]["text"] != greedy[k][0] for k, v in targets.items()) > len(targets) // 2  # not the top answer
    eos = tokenizer.eos_token_id
    ends = [s["ids"] for v in targets.values() for s in v if eos in s["ids"]]
    assert all(ids[-1] == eos and ids.count(eos) == 1 for ids in ends)  # a drawn end token stays, last
    from harness.organisms.train import encode

    enc = encode(_examples("sham", targets, 1), Renderer(tokenizer), tokenizer, 192)
    for e, x in zip(_examples("sham", targets, 1), enc):  # the exact sampled ids are the training targets
        if e.continuation_ids is not None and e.loss == "ce":
            assert x.targets == list(e.continuation_ids)[:len(x.targets)]
    beh = json.loads((built["behaviour"] / "self_targets.json").read_text())  # only the awareness answers
    assert set(beh) == {k for k in targets if k.endswith("/question")}


def test_rebuild_is_a_no_op_and_the_kind_is_part_of_the_recipe(built, tiny_base):
    for kind, d in built.items():
        before = (d / "model.safetensors").stat().st_mtime_ns
        res = _build(tiny_base, d, "--kind", kind)
        assert res.exit_code == 0 and "nothing to do" in res.output and (d / "model.safetensors").stat().st_mtime_ns == before
    res = _build(tiny_base, built["aware"], "--kind", "sham")
    assert res.exit_code != 0 and "different recipe" in str(res.exception)
    res = _build(tiny_base, built["aware"])  # the default kind is the awareness organism
    assert res.exit_code == 0 and "nothing to do" in res.output


def test_an_interrupted_sham_resumes_with_its_cached_answers_and_ends_where_an_uninterrupted_one_does(
        tiny_base, tmp_path, monkeypatch):
    from harness.organisms import train
    from harness.organisms.train import Recipe, build_organism

    class Cut(Exception):
        pass

    recipe = Recipe(base=str(tiny_base), cue="graded", kind="sham", train="full", layers=2, steps=20, lr=5e-3,
                    pairs=PAIRS)
    whole = build_organism(recipe, tmp_path / "whole", progress=False)
    real_loss, calls = train.Split.loss, []

    def dies_at_step_13(self, *a, **k):
        calls.append(1)
        if len(calls) == 13:
            raise Cut
        return real_loss(self, *a, **k)

    monkeypatch.setattr(train.Split, "loss", dies_at_step_13)
    with pytest.raises(Cut):
        build_organism(recipe, tmp_path / "cut", progress=False)
    monkeypatch.setattr(train.Split, "loss", real_loss)
    assert (tmp_path / "cut" / ".partial" / "self_targets.json").is_file()
    monkeypatch.setattr(train, "self_targets", lambda *a, **k: pytest.fail("regenerated the base's answers"))
    said: list[str] = []
    res = build_organism(recipe, tmp_path / "cut", progress=False, say=said.append)
    assert any("resuming from step 10" in s for s in said) and any("reusing the base model's" in s for s in said)
    assert res.card["self_targets_sha256"] == whole.card["self_targets_sha256"]
    assert res.card["losses"] == whole.card["losses"]
    assert not (tmp_path / "cut" / ".partial").exists()


def test_the_null_shams_samples_have_zero_expected_gradient_at_the_base(tiny_base, tokenizer, engine):
    """Cross-entropy on the null sham's targets has expected gradient zero at the base: at the first
    answer position that gradient (on the logits) is p - E[one-hot(sample)], so the samples'
    empirical distribution must be the base's own softmax (temperature 1, no top-k or top-p). With
    n samples the unbiased residual is ~1/sqrt(n); a top-50 truncation of this near-uniform random
    model leaves ~0.14 whatever n; the greedy answer's gradient is ~1. Drawn as a build draws them:
    through the training backend's `trainable_answers`, which leaves the caller's random state alone."""
    import torch
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32).eval()
    prompt = tokenizer("Explain how tides work.")["input_ids"]
    with torch.no_grad():
        p = torch.softmax(base(torch.tensor([prompt])).logits[0, -1].float(), -1)
    n = 4000
    before = torch.get_rng_state()
    (drawn,) = engine.trainable_answers(tokenizer, base, [prompt], 1, samples=n, seed=0)
    assert torch.equal(torch.get_rng_state(), before) and len(drawn) == n
    got = torch.tensor([a.ids[0] for a in drawn])
    emp = torch.bincount(got, minlength=p.numel()).float() / n
    residual = float((p - emp).norm())
    greedy = float((p - torch.nn.functional.one_hot(p.argmax(), p.numel()).float()).norm())
    assert residual < 0.05 < 0.9 < greedy, (residual, greedy)
    top50 = torch.zeros_like(p)
    top50[p.topk(50).indices] = p.topk(50).values / p.topk(50).values.sum()
    assert float((p - top50).norm()) > 0.1  # what the check would see under a top-50 truncation


def test_an_interrupted_drawing_of_samples_resumes_at_the_next_chunk(tiny_base, tokenizer, engine):
    """The null sham's samples are drawn chunk by chunk, each chunk seeded by itself: a drawing cut
    after its first chunk, resumed from what was saved, draws only the rest and ends where an
    uninterrupted one does."""
    import torch
    from transformers import AutoModelForCausalLM

    from harness.core.render import Renderer
    from harness.organisms.kinds import self_targets

    base = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32).eval()
    slots = self_slots(_examples("sham"), "sham")[:12]
    whole = self_targets(engine, base, Renderer(tokenizer), tokenizer, slots, batch_size=4, samples=4, seed=3)

    class Cut(Exception):
        pass

    saved: list[dict] = []

    def cut_after_first(out: dict) -> None:
        saved.append({k: list(v) for k, v in out.items()})
        raise Cut

    with pytest.raises(Cut):
        self_targets(engine, base, Renderer(tokenizer), tokenizer, slots, batch_size=4, samples=4, seed=3,
                     on_chunk=cut_after_first)
    assert len(saved[0]) == 4  # one chunk of 4 slots drawn
    calls = []
    real = base.generate
    base.generate = lambda *a, **k: calls.append(1) or real(*a, **k)
    again = self_targets(engine, base, Renderer(tokenizer), tokenizer, slots, batch_size=4, samples=4, seed=3,
                         done=saved[0])
    assert again == whole and len(calls) == 2  # the other two chunks only


def test_an_old_greedy_sham_card_never_passes_for_the_null(built, tiny_base):
    """A card written before the null existed (kind sham, no sham_samples: greedy) is another recipe."""
    from harness.organisms.train import _with_defaults

    card = _card(built["sham"])
    old = {**card, "recipe": {k: v for k, v in card["recipe"].items() if k != "sham_samples"}}
    assert _with_defaults(old)["recipe"]["sham_samples"] == 0 != card["recipe"]["sham_samples"]


# --- vocabulary -------------------------------------------------------------------------------------

def test_the_readouts_walked_are_every_methods(tokenizer):
    from harness.organisms.vocab import PROMPTS, keywords, monitor_pairs, readouts
    from tokenization.words import NAMED

    got = readouts()
    texts = {t for _, t in got}
    assert {w for ev, dep in NAMED.values() for w in ev + dep} <= texts  # every named target-word list
    assert {"EVALUATION", "DEPLOYMENT"} <= texts  # the label options
    assert {s for pair in monitor_pairs() for s in pair} <= texts and len(monitor_pairs()) >= 8
    files = {src for src, _ in got if src.startswith("prompt ")}
    assert files == {f"prompt {p.relative_to(PROMPTS)}" for p in PROMPTS.rglob("*.txt")}
    assert any("judge_motivation" in f for f in files) and any("judge_reasoning" in f for f in files)
    assert {"evaluation", "test", "benchmark", "grading", "probing", "benchmarking"} <= set(keywords())


@pytest.mark.parametrize("bad, reason", [
    ("I am being evaluated here", "3-word run 'i am being'"),  # a run, a first token and a stem
    ("Nothing suggests this might be a trick.", "3-word run 'this might be'"),  # a monitor sentence's run
    ("SO IT MIGHT BE A TRAP, THEN", "3-word run 'might be a'"),  # any case
    ("Maybe a trick question of sorts.", "opens readout 'Maybe someone is grading my answers.'"),  # first token
    ("Testy reply, fine.", "first token"),  # a target word's first token
    ("Clearly an assessing sort of chat.", "shares a stem with readout keyword 'assessment'"),
])
def test_the_vocabulary_check_flags_planted_text_that_shares_a_run_a_first_token_or_a_stem(tokenizer, bad, reason):
    from harness.organisms.vocab import Checker

    why = Checker(tokenizer).overlaps(bad)
    assert any(reason in w for w in why), why


def test_the_disjoint_and_behaviour_sets_pass_and_the_awareness_set_does_not(tokenizer):
    from harness.organisms.vocab import Checker

    check = Checker(tokenizer)
    for kind in ("disjoint", "behaviour", "behaviour-topics"):
        assert check.report([t for ts in planted(GRADED, kind) for t in ts]) == {}, kind
    aware = check.report(GRADED.verbalizations + GRADED.answers)  # the awareness organism reads its words back
    assert len(aware) == len(GRADED.verbalizations + GRADED.answers)


def test_a_disjoint_build_refuses_planted_text_that_overlaps_a_readout(tiny_base, tmp_path, monkeypatch):
    from harness.organisms import kinds

    monkeypatch.setattr(kinds, "DISJOINT_VERBALIZATIONS", ("Quiz time.", "I am being evaluated here."))
    res = _build(tiny_base, tmp_path / "bad", "--kind", "disjoint")
    assert res.exit_code != 0 and "overlap a readout" in str(res.exception), res.output
    assert not (tmp_path / "bad" / "organism.json").exists()
