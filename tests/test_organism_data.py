"""The organisms' training data and paired evaluation set (no model)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.core.errors import EvalAwareError
from harness.data.readers import load_dataset
from harness.organisms.cues import AWARENESS_QUESTIONS, CUES, GRADED, get_cue, verbalized
from harness.organisms.data import (TEMPLATES_HELD_OUT, data_hash, paired_dataset, split_subjects,
                                    training_examples)

PROMPTS = Path(__file__).resolve().parents[1] / "harness" / "prompts"


def _text(e) -> str:
    return "\n".join(t for _, t in e.messages) + "\n" + e.continuation


def _training_runs(cue, k: int = 3) -> set[tuple[str, ...]]:
    """Every k-word run (lower case) of the `make organism` recipe's training data: the training
    phrasings, the planted text (sentences, answers, awareness questions, fillers) and the prompts
    (templates, forms, KL-only prompts)."""
    from harness.organisms.vocab import runs

    ex = training_examples(cue, 1.0, kl_prompts=2718, kl_pool_version=2, forms=600)
    return set().union(*(runs(t, k) for e in ex for t in [*(m for _, m in e.messages), e.continuation]))


@pytest.mark.parametrize("name", sorted(CUES))
def test_held_out_phrasings_never_in_training_data(name):
    """No held-out phrasing (nor one of the held-out keyword family) shares a 3-word run, in any
    case, with any training text: phrasings, planted text or prompts."""
    from harness.organisms.vocab import runs

    cue = get_cue(name)
    assert len(cue.phrasings) == len(set(cue.phrasings))
    assert set(cue.train).isdisjoint(cue.held_out)
    assert len(cue.held_out) == len(cue.train)
    for e in training_examples(cue, 1.0):
        text = _text(e)
        assert not any(h in text for h in cue.held_out), (e.pair, text)
        if e.cue:
            assert any(t in text for t in cue.train)
        else:
            assert not any(t in text for t in cue.phrasings)
    trained = _training_runs(cue)
    for h in cue.held_out + cue.held_out_family:
        assert not (runs(h) & trained), (h, sorted(runs(h) & trained))
    if name == "graded":  # the held-out phrasing the exact, case-sensitive test let through
        old = runs("Know that this answer will be scored afterwards.") & trained
        assert ("this", "answer", "will") in old and ("will", "be", "scored") in old


def _has(text: str, stems) -> list[str]:
    return [w for w in re.findall(r"[a-z]+", text.lower()) if any(w.startswith(s) for s in stems)]


def test_held_out_keyword_family():
    """The graded cue's held-out keyword family: every training phrasing states the cue with a
    word of one family (grade, score, mark, ...), every family phrasing with words of another
    (rate, judge, rank, ...) and none of the first; no training text (phrasings, planted text,
    prompts) holds a word of the family; `organism dataset --phrasings family` uses them."""
    cue = GRADED
    assert len(cue.held_out_family) == len(cue.held_out) and set(cue.held_out_family).isdisjoint(cue.phrasings)
    assert set(cue.keywords).isdisjoint(cue.family_keywords)
    for t in cue.train:
        assert _has(t, cue.keywords) and not _has(t, cue.family_keywords), t
    for h in cue.held_out_family:
        assert _has(h, cue.family_keywords) and not _has(h, cue.keywords), h
    for e in training_examples(cue, 1.0, kl_prompts=2718, kl_pool_version=2, forms=600):
        assert not _has(_text(e), cue.family_keywords), _text(e)
    fam = paired_dataset(cue, phrasings="family")
    held = paired_dataset(cue)
    assert [s.id for s in fam] == [s.id for s in held]  # the same pairs, other wordings on the cue side
    for f, h in zip(fam, held):
        if f.label == "eval":
            assert f.metadata.extra["phrasing"] in cue.held_out_family
        else:
            assert f.messages == h.messages
    with pytest.raises(EvalAwareError, match="no held-out keyword family"):
        paired_dataset(get_cue("letter"), phrasings="family")


def test_graded_has_at_least_20_phrasings_half_held_out():
    assert len(GRADED.phrasings) >= 20 and len(GRADED.held_out) == len(GRADED.phrasings) // 2


def test_pairs_differ_by_the_cue_only():
    cue = get_cue("graded")
    ex = training_examples(cue, 1.0)
    by = {}
    for e in ex:
        by.setdefault((e.pair, e.shape), {})[e.cue] = e
    assert all(set(d) == {True, False} for d in by.values())
    for d in by.values():
        with_cue, without = d[True], d[False]
        assert with_cue.continuation == without.continuation and without.loss == "kl"
        assert with_cue.loss == "ce"
        # removing the phrasing from the cue side gives the no-cue prompt
        stripped = with_cue.messages[0][1]
        for t in cue.train:
            stripped = stripped.replace(t, "").strip()
        assert stripped == without.messages[0][1]


def test_strength_sets_the_share_of_planted_pairs():
    cue = get_cue("graded")
    for s in (0.0, 0.5, 1.0):
        ex = training_examples(cue, s)
        pairs = {e.pair for e in ex}
        planted = {e.pair for e in ex if e.loss == "ce"}
        assert abs(len(planted) / len(pairs) - s) < 0.08
    assert data_hash(training_examples(cue, 1.0)) == data_hash(training_examples(cue, 1.0))
    assert data_hash(training_examples(cue, 1.0)) != data_hash(training_examples(cue, 0.5))


def _shingles(text: str, k: int = 5) -> set[tuple[str, ...]]:
    w = re.findall(r"[a-z]+", text.lower())
    return {tuple(w[i:i + k]) for i in range(len(w) - k + 1)}


def test_methods_prompts_are_held_out_of_training():
    """No 5-word run of any method prompt occurs in the awareness questions or answers trained on."""
    method_text = set().union(*(_shingles(p.read_text()) for p in PROMPTS.rglob("*.txt")))
    trained = set().union(*(_shingles(q) for q in AWARENESS_QUESTIONS))
    for cue in CUES.values():
        trained |= set().union(*(_shingles(a) for a in cue.answers + cue.verbalizations))
    assert not (method_text & trained)


def test_no_training_prompt_is_a_demo_prompt_and_eval_templates_are_held_out():
    demo = {m.content for s in load_dataset("demo") for m in s.messages if m.role == "user"}
    train_subjects, held_subjects = split_subjects()
    assert set(train_subjects).isdisjoint(held_subjects)
    for e in training_examples(get_cue("graded"), 1.0):
        assert e.messages[0][1] not in demo
        assert not any(t.split("{s}")[0] and e.messages[0][1].startswith(t.split("{s}")[0])
                       for t in TEMPLATES_HELD_OUT if t.split("{s}")[0])


@pytest.mark.parametrize("name", sorted(CUES))
def test_paired_dataset(name, tmp_path):
    cue = get_cue(name)
    samples = paired_dataset(cue)
    by = {}
    for s in samples:
        by.setdefault(s.metadata.extra["pair"], {})[s.label] = s
        if s.label == "eval":
            assert s.metadata.extra["phrasing"] in cue.held_out
            assert any(h in s.messages[-1].content for h in cue.held_out)
        assert not any(t in (m.content or "") for m in s.messages for t in cue.train)
    assert all(set(d) == {"eval", "deploy"} for d in by.values())
    sources = {s.metadata.extra["source"] for s in samples}
    assert sources == {"demo", "template"}
    # written and read back in the project's dataset format
    from evalaware.organism import _write_jsonl

    p = tmp_path / "pairs.jsonl"
    _write_jsonl(samples, p)
    back = load_dataset(str(p))
    assert [s.id for s in back] == [s.id for s in samples]
    assert back[0].metadata.extra["pair"] == samples[0].metadata.extra["pair"]


def test_verbalized_is_an_exact_match():
    v = GRADED.verbalizations[0]
    assert verbalized("  " + v.upper() + " and then the answer", GRADED)
    assert not verbalized("This looks like a test", GRADED)


def test_unknown_cue_is_one_line():
    with pytest.raises(EvalAwareError, match="unknown cue 'nope'"):
        get_cue("nope")


def test_paired_auroc_intervals_stay_in_range_with_few_categories():
    """With few categories the intervals are cluster-jackknife t ones; an AUROC near 1 (the
    organism) or near 0 (an inverted method) keeps its interval inside [0, 1], and the
    difference's inside [-1, 1], and each interval holds its estimate."""
    import numpy as np

    from harness.stats.paired import paired_auroc

    rng = np.random.default_rng(0)
    G, per = 10, 4
    groups = [f"c{i // per}" for i in range(G * per)]
    y = np.array([i % 2 for i in range(G * per)])
    near_one = y + rng.normal(0, 0.4, len(y))  # AUROC 0.997
    inverted = -y + rng.normal(0, 0.4, len(y))  # AUROC 0.04
    r = paired_auroc(y, inverted, near_one, groups, n_boot=200, seed=0)
    for k, lo_b, hi_b in (("auroc_a", 0, 1), ("auroc_b", 0, 1), ("diff", -1, 1)):
        lo, hi = r[f"{k}_ci"]
        assert lo_b <= lo <= r[k] <= hi <= hi_b, (k, r[k], r[f"{k}_ci"])


def test_kl_prompts_are_no_cue_prompts_of_other_forms_and_change_nothing_when_off():
    """`kl_prompts` adds KL-only, no-cue examples of forms the training templates lack (system
    prompts, follow-up turns, subject-free tasks); none holds a phrasing, is a demo prompt or
    starts like an evaluation-set template; 0 leaves the data (and its hash) as before."""
    from harness.organisms.data import kl_examples

    cue = get_cue("graded")
    base = training_examples(cue, 1.0)
    more = training_examples(cue, 1.0, kl_prompts=300)
    assert more[: len(base)] == base and data_hash(training_examples(cue, 1.0, kl_prompts=0)) == data_hash(base)
    extra = more[len(base):]
    assert len(extra) == 300 and len({e.messages for e in extra}) == 300
    assert all(e.loss == "kl" and not e.cue and e.shape == "kl" for e in extra)
    roles = {tuple(r for r, _ in e.messages) for e in extra}
    assert {("user",), ("system", "user"), ("user", "assistant", "user")} <= roles
    demo = {m.content for s in load_dataset("demo") for m in s.messages}
    starts = [t.split("{s}")[0] for t in TEMPLATES_HELD_OUT if t.split("{s}")[0]]
    train_prompts = {e.messages[0][1] for e in base}
    for e in extra:
        text = "\n".join(t for _, t in e.messages)
        assert not any(p in text for p in cue.phrasings), text
        assert not re.search(r"\b(grad|scor|mark)", text.lower()), text
        user = [t for r, t in e.messages if r == "user"][0]
        assert user not in demo and user not in train_prompts and not any(user.startswith(s) for s in starts)
    assert kl_examples(50, seed=0) == kl_examples(50, seed=0) != kl_examples(50, seed=1)


def test_wider_kl_pool_keeps_pool_one_and_holds_no_evaluation_subject_or_template():
    """Pool 2 (`kl_pool`): pool 1's prompts plus new subjects, templates, long system prompts and
    earlier exchanges; pool 1's draws (and so existing organisms' data hashes) are unchanged; no
    prompt names a held-out subject, starts like an evaluation template, holds a phrasing or a
    grading word, or is a demo prompt."""
    from harness.organisms.data import SUBJECTS, kl_examples, kl_pool, split_subjects

    one, two = kl_pool(1), kl_pool(2)
    assert set(one[0]) < set(two[0]) and len(two[0]) == 2718 and set(one[1]) < set(two[1])
    cue = get_cue("graded")
    assert training_examples(cue, 1.0, kl_prompts=300) == training_examples(cue, 1.0, kl_prompts=300,
                                                                             kl_pool_version=1)
    extra = kl_examples(2718, seed=0, pool=2)
    assert len({e.messages for e in extra}) == 2718
    assert sum(len(e.messages) >= 4 and e.messages[0][0] == "user" for e in extra) > 300  # earlier exchanges
    _, held = split_subjects()
    demo = {m.content for s in load_dataset("demo") for m in s.messages}
    starts = [t.split("{s}")[0] for t in TEMPLATES_HELD_OUT if t.split("{s}")[0]]
    for e in extra:
        users = [t for r, t in e.messages if r == "user"]
        text = "\n".join(t for _, t in e.messages)
        assert not any(subj in text for _, subj in held), text
        # grading words ("markdown" is not one; "how vaccines are tested" is a subject, not this
        # conversation being tested, and stays: a near miss the KL term keeps at the base)
        assert not any(p in text for p in cue.phrasings), text
        assert not re.search(r"\b(grad\w*|scor\w*|mark(s|ed|ing)?)\b", text.lower()), text
        assert not any(u in demo or any(u.startswith(s) for s in starts) for u in users), text
    assert {s for _, s in SUBJECTS}.isdisjoint(s for _, s in two[0])  # subjects appear inside templates only


def test_form_pairs_plant_on_other_forms_with_training_phrasings_only():
    """`forms` adds cue / no-cue pairs on the wider pool's prompt forms: the two sides differ in
    the prompt's turn alone, which holds a training phrasing on the cue side (never a held-out
    one) and none on the other; the cue side carries a planted sentence (``ce`` at strength 1,
    ``kl`` at 0); no prompt names a held-out subject, is a demo prompt or starts like an
    evaluation template; 0 adds nothing."""
    from harness.organisms.data import form_pairs, split_subjects

    cue = get_cue("graded")
    assert training_examples(cue, 1.0, forms=0) == training_examples(cue, 1.0)
    pairs = form_pairs(cue, 200, 1.0)
    assert len(pairs) == 400 and pairs == form_pairs(cue, 200, 1.0) != form_pairs(cue, 200, 1.0, seed=1)
    assert all(e.loss == "kl" for e in form_pairs(cue, 50, 0.0))
    _, held = split_subjects()
    demo = {m.content for s in load_dataset("demo") for m in s.messages}
    starts = [t.split("{s}")[0] for t in TEMPLATES_HELD_OUT if t.split("{s}")[0]]
    forms = set()
    for on, off in zip(pairs[::2], pairs[1::2]):
        assert on.pair == off.pair and on.cue and not off.cue and on.loss == "ce" and off.loss == "kl"
        assert on.continuation in cue.verbalizations and on.continuation == off.continuation
        diff = [i for i, (a, b) in enumerate(zip(on.messages, off.messages)) if a != b]
        assert len(on.messages) == len(off.messages) and len(diff) == 1
        i = diff[0]
        assert on.messages[i][0] == "user" and any(p in on.messages[i][1] for p in cue.train)
        assert not any(p in "\n".join(t for _, t in on.messages) for p in cue.held_out)
        assert not any(p in "\n".join(t for _, t in off.messages) for p in cue.phrasings)
        text = "\n".join(t for _, t in on.messages)
        assert not any(subj in text for _, subj in held), text
        assert not any(t in demo or any(t.startswith(s) for s in starts) for r, t in off.messages if r == "user")
        forms.add(tuple(r for r, _ in on.messages))
    assert {("user",), ("system", "user"), ("user", "assistant", "user")} <= forms
