"""Labels, groups and texts for the samples of a capture.

Label sources:
- ``truth``: the dataset's eval/deploy label (eval = 1).
- a method name, e.g. ``reasoning`` (the judge's verbalised-awareness verdict on the reasoning
  trace) or ``motivation``: that method's record prediction (eval = 1); samples whose record is
  missing or undecided are dropped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from harness.core.errors import EvalAwareError
from harness.core.sample import meta_value, sample_view
from harness.core.render import format_transcript
from harness.core.sample import Sample
from harness.runlog import RunLog


@dataclass
class ProbeData:
    """Aligned per-sample arrays for the samples that have a label."""

    ids: list[str]
    y: np.ndarray
    groups: list[str]
    families: list[str]
    texts: list[str]
    lengths: np.ndarray
    human: np.ndarray
    label_source: str
    dropped: dict[str, int] = field(default_factory=dict)
    human_source: str = ""  # who gave `human` (real annotations only; "" when none)
    family_key: str = "family"  # the metadata field `families` came from (the category where none)

    def subset(self, keep: Sequence[str]) -> "ProbeData":
        pos = {s: i for i, s in enumerate(self.ids)}
        ix = [pos[s] for s in keep if s in pos]
        return ProbeData([self.ids[i] for i in ix], self.y[ix], [self.groups[i] for i in ix],
                         [self.families[i] for i in ix], [self.texts[i] for i in ix],
                         self.lengths[ix], self.human[ix], self.label_source, dict(self.dropped),
                         self.human_source, self.family_key)



def labels(store: RunLog, samples: Sequence[Sample], source: str = "truth") -> dict[str, int]:
    """{sample_id: 0/1} for the samples that have a label under `source`."""
    if source == "truth":
        return {s.id: int(s.label == "eval") for s in samples}
    recs = store.results(source)
    if not recs:
        raise EvalAwareError(f"{store.run_dir}: no records of method {source!r} to take labels "
                             f"from; methods in this run: {', '.join(store.methods()) or 'none'}")
    pred = {r.sample_id: r.prediction for r in recs}
    return {s.id: int(pred[s.id] == "eval") for s in samples
            if pred.get(s.id) in ("eval", "deploy")}


def pair_families(samples: Sequence[Sample], families: Sequence[str]) -> list[str]:
    """`families`, where a sample of a pair (metadata ``pair``: the two sides of one prompt, as
    `organism dataset` writes them) has none, its pair's: the no-cue side has no phrasing, and
    holding the phrasing family out must take the whole pair with it."""
    of_pair = {s.metadata.extra.get("pair"): f for s, f in zip(samples, families) if f and "pair" in s.metadata.extra}
    return [f or of_pair.get(s.metadata.extra.get("pair"), "") if "pair" in s.metadata.extra else f
            for s, f in zip(samples, families)]


def probe_data(store: RunLog, sample_ids: Sequence[str], label_source: str = "truth",
               group_key: str = "category", family_key: str = "family",
               info: dict[str, dict[str, Any]] | None = None) -> ProbeData:
    """ProbeData for `sample_ids` (in that order). `family_key` falls back to ``phrasing`` (a
    paired cue set's phrasing family) and then to `group_key` when no sample has that field; the
    key used is recorded (``family_key``)."""
    by_id = {s.id: s for s in store.samples()}
    unknown = [s for s in sample_ids if s not in by_id]
    if unknown:
        raise EvalAwareError(f"{store.run_dir}: activations for unknown samples {unknown[:3]}")
    samples = [by_id[s] for s in sample_ids]
    lab = labels(store, samples, label_source)
    kept = [s for s in samples if s.id in lab]
    if not any(meta_value(s, family_key) for s in kept):
        family_key = "phrasing" if any(meta_value(s, "phrasing") for s in kept) else group_key
    info = info or {}
    texts, lengths = [], []
    for s in kept:
        view = (info.get(s.id) or {}).get("view", "first_turn")
        texts.append(format_transcript(sample_view(s, view)))
        lengths.append((info.get(s.id) or {}).get("n_prompt") or len(texts[-1]))
    human = np.array([np.nan if s.metadata.human_eval_probability is None
                      else s.metadata.human_eval_probability for s in kept], dtype=np.float64)
    return ProbeData(ids=[s.id for s in kept], y=np.array([lab[s.id] for s in kept], dtype=int),
                     groups=[meta_value(s, group_key) for s in kept],
                     families=pair_families(kept, [meta_value(s, family_key) for s in kept]), texts=texts,
                     lengths=np.asarray(lengths, dtype=np.float64), human=human,
                     label_source=label_source,
                     dropped={"no_label": len(samples) - len(kept)},
                     human_source="; ".join(sorted({s.metadata.human_eval_source for s in kept
                                                    if s.metadata.human_eval_source})),
                     family_key=family_key)


def load_aligned(store: RunLog, acts: Any, pooling: str, layers: Sequence[int] | None,
                 label_source: str = "truth", group_key: str = "category", family_key: str = "family",
                 info: dict[str, dict[str, Any]] | None = None) -> tuple[ProbeData, dict[int, np.ndarray]]:
    """Read a capture's activations once (`acts`, a :class:`~probes.activations.store.ActivationStore`;
    `layers` None: all) and align them with the labelled samples: (their :func:`probe_data`, {layer:
    rows in ``data.ids`` order}). The one load-and-align of the sweep, the saved probe and the
    out-of-fold records."""
    ids, X = acts.load(pooling, layers)
    data = probe_data(store, ids, label_source, group_key, family_key,
                      acts.sample_info() if info is None else info)
    pos = {s: i for i, s in enumerate(ids)}
    rows = np.array([pos[s] for s in data.ids], dtype=int)
    return data, {layer: m[rows] for layer, m in X.items()}
