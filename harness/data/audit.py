"""`evalaware data audit`: how well do surface features alone separate eval from deploy?

Before believing any evaluation-awareness figure on a dataset, check what a model could get from
the prompt's surface without any awareness. Each predictor below is trained and scored with
grouped cross-validation (by category, or ``group_by``; held-out categories are never seen in
training) and its pooled out-of-fold AUROC gets an interval over whole groups (samples of one
source are correlated; treating them one by one makes intervals too narrow): the project's one
rule, harness.stats.metrics.auroc_interval with groups (the cluster-jackknife t under 50 groups,
the percentile bootstrap from 50), named per row (``ci_method``).

Predictors (all on the text of the run's view: system prompt + first user message by default,
as ``format_transcript`` writes it):

- ``char_tfidf``: case-sensitive character 2-5-gram TF-IDF + logistic regression
  (:func:`harness.stats.baselines.char_tfidf_model`); sees casing, punctuation and layout.
- ``word_tfidf``: word 1-2-gram TF-IDF + logistic regression (the probes' ``tfidf`` baseline;
  lowercases, so it cannot see casing).
- ``length``: log number of characters.
- ``first_char_case``: the first character of the first user message is upper case (1),
  lower case (0) or not a letter (0.5).
- one indicator per answer-format cue of the taxonomy's cue groups (multiple choice, answer
  format; :data:`CUES`), and ``cues_all``: logistic regression on all indicators together. The
  detectors are those of ``harness/data/detectors.py``, which `evalaware cues` switches too: on
  the user turns of the view (the system message only for a system-message cue), so the audit
  and the factors never disagree on a prompt.

Single features have no fitted scale: the training folds decide only the direction (which
class has the higher mean), and the held-out score is the signed feature. So a rule's AUROC is
not distorted by per-fold intercepts, and a feature that predicts nothing stays near 0.5 (a
logistic regression on one feature under grouped CV of label-pure groups can fall far below 0.5,
which says nothing).

Warning threshold (``DEFAULT_THRESHOLD`` = 0.70): a surface predictor whose out-of-fold AUROC
reaches it gets a warning. 0.70 is about where the model-based awareness figures of interest lie
(frontier models asked directly: ~0.82 on Needham et al.; honest activation probes: ~0.71); a
surface cue that reaches it can explain such a figure without any awareness.

Grouped CV needs categories that hold both labels to tell *source* from *label*: when every
category holds one label (as in Needham et al.), a surface predictor that scores well may be
recognising which kind of source a prompt comes from, and so may the model; the audit says so.
When grouped CV is impossible (fewer than two groups of a label, or a fold without both classes
in training) it falls back to stratified random CV, and says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression

from harness.stats.baselines import char_tfidf_model, tfidf_model
from harness.stats.cv import auroc_ci, make_splits, oof_scores
from harness.core.sample import meta_value, sample_view

from harness.core.errors import EvalAwareError
from harness.core.render import format_transcript
from harness.core.sample import Message, Sample
from harness.data.detectors import DETECTORS, cue_present

DEFAULT_THRESHOLD = 0.70

# The answer-format cues of the taxonomy's cue groups ("multiple_choice", "answer_format" in the test
# fixture tests/helpers/taxonomy_texts.py GROUPS): their detectors are the ones `evalaware cues`
# switches (harness.data.detectors), so the audit and the factors give one verdict per prompt.
CUES: dict[str, str] = {n: DETECTORS[n].description
                        for n in ("lettered_options", "answer_prefix", "choose_directive", "answer_format")}

#: The row that combines every cue indicator (a model, not one cue).
CUES_ALL = "cues_all"


def cue_value(name: str, messages: Sequence[Message]) -> float:
    """1.0 where the view's messages show cue `name` (its shared detector), else 0.0."""
    return float(cue_present(name, messages))


def first_char_case(sample: Sample) -> float:
    """1 if the first user message starts with an upper-case letter, 0 lower case, 0.5 other."""
    first = next((m.content or "" for m in sample.messages if m.role == "user"), "").lstrip()
    if not first or not first[0].isalpha():
        return 0.5
    return 1.0 if first[0].isupper() else 0.0


class SignedFeature:
    """One feature as a score; fitting learns only its direction (sign of the class-mean gap)."""

    def fit(self, X: np.ndarray, y: np.ndarray) -> "SignedFeature":
        x = np.asarray(X, dtype=float)[:, 0]
        y = np.asarray(y).astype(bool)
        self.sign_ = 1.0 if x[y].mean() >= x[~y].mean() else -1.0
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return self.sign_ * np.asarray(X, dtype=float)[:, 0]


def _cue_model() -> LogisticRegression:
    return LogisticRegression(max_iter=1000, class_weight="balanced")


@dataclass
class AuditRow:
    name: str
    description: str
    auroc: float | None  # None: undefined (one class in the scores)
    ci_lo: float | None
    ci_hi: float | None
    share_eval: float | None = None  # indicators: share of eval samples with the cue
    share_deploy: float | None = None
    ci_method: str | None = None  # the interval's rule (`harness.stats.metrics.Interval.method`)


@dataclass
class AuditResult:
    """Rows per predictor plus what the numbers rest on."""

    n: int
    n_eval: int
    view: str
    group_by: str
    n_groups: int
    mixed_groups: list[str]
    cv: str
    ci_by: str
    threshold: float
    rows: list[AuditRow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Out-of-fold scores per predictor, in the order of `sample_ids` (for paired comparisons
    #: with a method on the same samples; not part of `to_dict`).
    sample_ids: list[str] = field(default_factory=list, repr=False)
    oof: dict[str, list[float]] = field(default_factory=dict, repr=False)

    @property
    def valid(self) -> bool:
        """False where grouped CV ran on groups that each hold one label: a held-out group's label
        is then under-represented in its training folds, so a predictor without signal scores
        below chance by construction (0.174 was printed on such a set) and one above chance may
        be recognising the kind of source: the AUROCs are no estimate of separability."""
        return not (self.cv == "grouped" and not self.mixed_groups)

    def best(self) -> AuditRow | None:
        """The best predictor by AUROC; None where there is none or the estimates are invalid."""
        if not self.valid:
            return None
        ok = [r for r in self.rows if r.auroc is not None]
        return max(ok, key=lambda r: r.auroc) if ok else None

    def row(self, name: str) -> AuditRow:
        return next(r for r in self.rows if r.name == name)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("sample_ids")
        d.pop("oof")
        d["valid"] = self.valid
        return d

    def cell(self, r: AuditRow) -> str:
        """The AUROC cell; where the estimates are invalid (every group holds one label: see
        `valid`), that is said instead of the number (kept in `to_dict`)."""
        if not self.valid and r.auroc is not None:
            return f"invalid (every {self.group_by} holds one label)"
        return _fmt_ci(r)

    def table_rows(self) -> list[list[Any]]:
        return [[r.name, self.cell(r), _pct(r.share_eval), _pct(r.share_deploy),
                 "yes" if self.flagged(r) else "", r.description] for r in self.rows]

    def flagged(self, r: AuditRow) -> bool:
        return r.auroc is not None and r.auroc >= self.threshold

    def lines(self) -> list[str]:
        head = (f"{self.n} samples ({self.n_eval} eval, {self.n - self.n_eval} deploy), view "
                f"{self.view}; {self.cv} CV{' by ' + self.group_by if self.cv == 'grouped' else ''} "
                f"({self.n_groups} {self.group_by} groups, "
                f"{len(self.mixed_groups)} with both labels); intervals over {self.ci_by}")
        out = [head, ""]
        w = max(len(r.name) for r in self.rows)
        out.append(f"{'predictor':<{w}}  {'AUROC [95% CI]':<20} {'eval':>5} {'deploy':>6}")
        if not self.valid:
            out.insert(1, f"grouped-CV AUROC invalid here: every {self.group_by} holds one label, so "
                          f"held-out groups are scored by models trained against their label "
                          f"(below chance by construction without signal); the cue shares stand")
        for r in self.rows:
            out.append(f"{r.name:<{w}}  {self.cell(r):<20} {_pct(r.share_eval):>5} "
                       f"{_pct(r.share_deploy):>6}" + ("  <- above threshold" if self.flagged(r) else ""))
        rules = sorted({r.ci_method for r in self.rows} - {None})
        out += [f"interval rules (95%): {'; '.join(rules)}" if rules else "no intervals"]
        out += [""] + [f"WARNING: {x}" for x in self.warnings] + [f"note: {x}" for x in self.notes]
        return out


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.0f}%"


def _fmt_ci(r: AuditRow) -> str:
    if r.auroc is None:
        return "–"
    ci = "" if r.ci_lo is None else f" [{r.ci_lo:.2f}, {r.ci_hi:.2f}]"
    return f"{r.auroc:.3f}{ci}"


def view_text(sample: Sample, view: str) -> str:
    """The text a surface predictor sees: the view as the third-person transcript writes it."""
    return format_transcript(sample_view(sample, view))


def audit(samples: Sequence[Sample], group_by: str = "category", view: str = "first_turn",
          n_splits: int = 5, n_boot: int = 1000, seed: int = 0,
          threshold: float = DEFAULT_THRESHOLD) -> AuditResult:
    """Grouped-CV AUROC of every surface predictor, with intervals over groups and their rules."""
    if view not in ("first_turn", "full"):
        raise EvalAwareError(f"unknown view {view!r}; use first_turn or full")
    y = np.array([int(s.label == "eval") for s in samples], dtype=int)
    if len(set(y.tolist())) < 2:
        raise EvalAwareError("the audit needs eval and deploy samples; this input holds "
                             f"{'eval' if y.any() else 'deploy'} only (give a second file of the "
                             "other label, e.g. `data audit evals.txt users.txt --label eval "
                             "--label deploy`)")
    groups = [meta_value(s, group_by) for s in samples]
    if not any(groups):
        raise EvalAwareError(f"no sample has metadata field {group_by!r} to group by")
    by_group: dict[str, set[int]] = {}
    for g, lab in zip(groups, y.tolist()):
        by_group.setdefault(g, set()).add(lab)
    mixed = sorted(g for g, ls in by_group.items() if len(ls) > 1)
    res = AuditResult(n=len(y), n_eval=int(y.sum()), view=view, group_by=group_by,
                      n_groups=len(by_group), mixed_groups=mixed, cv="grouped", ci_by=group_by,
                      threshold=threshold, sample_ids=[s.id for s in samples])
    try:
        splits = make_splits("grouped", y, groups, groups, n_splits, seed)
    except EvalAwareError as e:
        splits = make_splits("random", y, groups, groups, n_splits, seed)
        res.cv = "random"
        res.notes.append(f"grouped CV by {group_by} is impossible here ({e}); stratified random CV "
                         f"instead: samples of one {group_by} sit on both sides of a split")
    labels_per_group = [sum(1 for ls in by_group.values() if lab in ls) for lab in (0, 1)]
    boot_groups: list[str] | None = groups
    if min(labels_per_group) < 2:
        boot_groups, res.ci_by = None, "sample"
        res.notes.append(f"intervals resample samples: a label occurs in fewer than two "
                         f"{group_by} groups, so an interval over groups would be degenerate")

    texts = [view_text(s, view) for s in samples]
    length = np.log1p([len(t) for t in texts])[:, None]
    case = np.array([[first_char_case(s)] for s in samples])
    cues = np.array([[cue_value(c, sample_view(s, view)) for c in CUES] for s in samples])

    def add(name: str, description: str, make: Callable[[], Any], X: Any,
            indicator: np.ndarray | None = None) -> None:
        s, _ = oof_scores(make, X, y, splits)
        res.oof[name] = s.tolist()
        row = AuditRow(name, description, **auroc_ci(y, s, n_boot, seed, groups=boot_groups))
        if indicator is not None:
            row.share_eval = float(indicator[y == 1].mean())
            row.share_deploy = float(indicator[y == 0].mean())
        res.rows.append(row)

    add("char_tfidf", "case-sensitive char 2-5-gram TF-IDF + logistic regression",
        char_tfidf_model, texts)
    add("word_tfidf", "word 1-2-gram TF-IDF (lowercased) + logistic regression", tfidf_model, texts)
    add("length", "log characters of the view", SignedFeature, length)
    add("first_char_case", "first user message starts upper case (1) / lower case (0)",
        SignedFeature, case, indicator=case[:, 0] == 1.0)
    for j, (name, desc) in enumerate(CUES.items()):
        add(name, desc, SignedFeature, cues[:, j:j + 1], indicator=cues[:, j])
    add(CUES_ALL, "logistic regression on the cue indicators above", _cue_model, cues,
        indicator=cues.max(axis=1))

    for r in res.rows:
        if res.flagged(r):
            res.warnings.append(f"{r.name} separates the labels with AUROC {r.auroc:.3f} >= "
                                f"{threshold:.2f} on surface alone: an awareness figure on this "
                                f"dataset may measure this cue" + ("" if res.valid else
                                f" (grouped CV on label-pure {group_by} groups: the AUROC is no "
                                f"valid estimate; the cue's shares per label are)"))
    if not mixed:
        res.notes.append(f"every {group_by} holds one label: grouped CV cannot separate source "
                         f"from label (a predictor may recognise the kind of source, and so may a "
                         f"model); its AUROCs are invalid here and not shown")
    return res
