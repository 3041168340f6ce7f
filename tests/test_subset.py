"""`--limit N`: deterministic, label-balanced, category-spread, nested; `--first N`: file order."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.data.readers import load_dataset
from harness.core.errors import EvalAwareError
from harness.core.sample import Message, Sample, SampleMeta
from harness.data.subset import select, stratified


def _sample(sid: str, label: str, category: str) -> Sample:
    return Sample(id=sid, label=label, messages=(Message("user", sid),),
                  metadata=SampleMeta(category=category))


def _sorted_dataset(n_eval: int = 30, n_deploy: int = 20, cats: int = 5) -> list[Sample]:
    """Sorted by label then category, as real files often are."""
    return ([_sample(f"e{i % cats}:{i}", "eval", f"e{i % cats}") for i in range(n_eval)]
            + [_sample(f"d{i % cats}:{i}", "deploy", f"d{i % cats}") for i in range(n_deploy)])


def test_demo_limit_holds_both_labels_where_first_does_not():
    demo = load_dataset("demo")
    first = select(demo, first=16)
    assert first == demo[:16]
    n_cats = len({s.metadata.category for s in demo})
    for n in (2, 4, 16):
        chosen = select(demo, limit=n)
        labels = Counter(s.label for s in chosen)
        assert labels["eval"] == labels["deploy"] == n // 2
        # each label's picks take the sources in turn (the bundled set has both labels in every
        # source, so the two labels may share one)
        for lab in ("eval", "deploy"):
            assert len({s.metadata.category for s in chosen if s.label == lab}) == min(n // 2, n_cats)
        assert chosen == select(demo, limit=n)  # same N, same samples
        assert [s.id for s in chosen] == [s.id for s in demo if s in chosen]  # dataset order kept


def test_choice_depends_on_ids_only_and_is_pinned():
    data = _sorted_dataset()
    chosen = [s.id for s in stratified(data, 6)]
    shuffled = data[:]
    random.Random(1).shuffle(shuffled)
    assert sorted(s.id for s in stratified(shuffled, 6)) == sorted(chosen)
    # Pinned: a changed rule would silently add new samples to existing run directories.
    assert chosen == ["e2:7", "e1:21", "e3:23", "d3:3", "d0:5", "d4:14"]


def test_odd_n_and_a_short_label():
    data = _sorted_dataset(n_eval=30, n_deploy=3)
    labels = Counter(s.label for s in stratified(data, 5))
    assert labels == {"eval": 3, "deploy": 2}  # the odd one to the larger label
    labels = Counter(s.label for s in stratified(data, 10))
    assert labels == {"eval": 7, "deploy": 3}  # the short label gives its share away
    assert len(stratified(data, 1000)) == 33


def test_limit_and_first_checks():
    data = _sorted_dataset()
    with pytest.raises(EvalAwareError, match="not both"):
        select(data, limit=2, first=2)
    with pytest.raises(EvalAwareError, match="--limit must be a positive"):
        select(data, limit=0)
    assert select(data) == data


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["eval", "deploy"]), st.integers(0, 6)),
                min_size=1, max_size=60),
       st.integers(1, 60))
def test_nested_balanced_and_spread(rows, n):
    data = [_sample(f"c{c}:{i}", lab, f"c{c}-{lab}") for i, (lab, c) in enumerate(rows)]
    small, big = stratified(data, n), stratified(data, n + 1)
    assert set(s.id for s in small) <= set(s.id for s in big)  # a smaller N's samples stay
    assert len(small) == min(n, len(data))
    have = Counter(s.label for s in data)
    got = Counter(s.label for s in small)
    # balanced: a label has fewer than the other only when it has no more samples to give
    for a, b in (("eval", "deploy"), ("deploy", "eval")):
        if got[a] < got[b] - 1:
            assert got[a] == have[a]
    # spread: within a label, category counts differ by at most one unless a category ran out
    for lab in ("eval", "deploy"):
        per_cat = Counter(s.metadata.category for s in small if s.label == lab)
        avail = Counter(s.metadata.category for s in data if s.label == lab)
        if per_cat:
            top = max(per_cat.values())
            assert all(per_cat[c] >= top - 1 or per_cat[c] == avail[c] for c in avail)
