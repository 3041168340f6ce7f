"""Method details declared as types: the method-specific fields of a record that code below the
methods (statistics, the report) reads, and the one way to read them from a record.

A record's ``details`` hold what a method adds to the common fields (:mod:`harness.core.records`).
Most are for people and exports; the ones other layers compute with are declared here as a
:class:`Detail` (a frozen dataclass whose field names are the JSON keys): the method writes them
with :meth:`Detail.to_dict` and names the classes in its ``details`` attribute
(:class:`harness.methods.base.Method`); statistics and the report read them with
:meth:`Detail.of`, never by key. They live here, below both, because statistics sits below the
methods. :func:`details_of` and :func:`votes_of` read a record in either form (a
:class:`~harness.core.records.Record` or its JSON mapping).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Mapping, TypeVar

from harness.core.records import Record, Vote

D = TypeVar("D", bound="Detail")
NO_SIGNAL = "no_signal"  # SignalGate.error of a logprob record below --min-coverage


def details_of(record: Record | Mapping[str, Any]) -> Mapping[str, Any]:
    """A record's method details (its votes excluded for a :class:`Record`)."""
    if isinstance(record, Record):
        return record.details
    return record.get("details") or {}


def votes_of(record: Record | Mapping[str, Any]) -> tuple[Vote, ...]:
    """A record's votes as typed :class:`Vote` s (none: empty; a vote without its index ``k``
    reads as its position)."""
    if isinstance(record, Record):
        return record.votes or ()
    return tuple(Vote.from_dict({"k": i, **v}) for i, v in enumerate(details_of(record).get("votes") or ()))


@dataclass(frozen=True)
class Detail:
    """Declared details: each field is one key of a record's ``details`` (or, for a vote detail,
    of a vote's fields); a record (or vote) carries this detail where one of its :attr:`MARKS`
    fields is present and not None."""

    MARKS: ClassVar[tuple[str, ...]]

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def read(cls: type[D], source: Mapping[str, Any]) -> D | None:
        """The detail from a mapping of fields; None where it has none of :attr:`MARKS`."""
        if all(source.get(k) is None for k in cls.MARKS):
            return None
        return cls(**{k: source[k] for k in cls.keys() if k in source})

    @classmethod
    def of(cls: type[D], record: Record | Mapping[str, Any]) -> D | None:
        """The detail a record carries; None where it carries none (another method's record)."""
        return cls.read(details_of(record))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SignalGate(Detail):
    """The logprob methods' signal gate: a record whose target words carry less probability than
    ``--min-coverage`` has no score, ``signal`` False and ``error`` :data:`NO_SIGNAL`."""

    MARKS: ClassVar[tuple[str, ...]] = ("error", "min_coverage")
    error: str | None = None
    signal: bool | None = None
    min_coverage: float | None = None

    @property
    def no_signal(self) -> bool:
        return self.error == NO_SIGNAL


@dataclass(frozen=True)
class LabelVote(Detail):
    """A vote's answer-option probabilities (question methods with an answer format): each option's
    share (``label_probs``), their raw total at the label position (``label_mass``), the score
    from them (``label_score``), where it was read (``label_position``), and whether the vote was
    withheld from the score for a mass below the run's ``--min-label-mass``."""

    MARKS: ClassVar[tuple[str, ...]] = ("label_mass",)
    label_mass: float = 0.0
    label_score: float | None = None
    label_probs: dict[str, float] | None = None
    label_position: str | None = None
    label_withheld: bool = False

    @classmethod
    def of_vote(cls, vote: Vote) -> "LabelVote | None":
        """The vote's label probabilities; None where it has no numeric ``label_mass``."""
        mass = vote.extra.get("label_mass")
        if isinstance(mass, bool) or not isinstance(mass, (int, float)):
            return None
        return cls.read(vote.extra)

    def to_dict(self) -> dict[str, Any]:
        """The vote's fields (``label_withheld`` only when True, as votes have always stored it)."""
        d = asdict(self)
        if not self.label_withheld:
            del d["label_withheld"]
        return d


@dataclass(frozen=True)
class LabelGate(Detail):
    """A label-probability record's score: the mean ``label_score`` of the votes kept, the plain
    vote score beside it, the run's ``min_label_mass`` and how many votes it withheld."""

    MARKS: ClassVar[tuple[str, ...]] = ("min_label_mass",)
    min_label_mass: float = 0.0
    label_votes_withheld: int = 0
    vote_score: float | None = None
    score_source: str = "label_probability"


@dataclass(frozen=True)
class LogOdds(Detail):
    """The exact log-odds of a record's score where its method forms one from log-probabilities
    (the logprob methods: log P(eval words) - log P(deploy words), never logit(score)): finite
    where the score rounds to exactly 0 or 1, so rankings need not tie there. None: no score, or
    an infinite log-odds (a class without mass)."""

    MARKS: ClassVar[tuple[str, ...]] = ("log_odds",)
    log_odds: float | None = None

    @classmethod
    def value(cls, record: Record | Mapping[str, Any]) -> float | None:
        """The record's finite log-odds; None where it holds none (another method's record, a run
        recorded before the field)."""
        d = cls.of(record)
        v = None if d is None else d.log_odds
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
        return float(v)


@dataclass(frozen=True)
class LayerSelection(Detail):
    """How a probe record's layer was chosen (``probes eval --write-records``: each fold's own,
    nested, :func:`probes.apply.write_oof_records`; ``probes apply``): the rule and the layer that
    scored the record; and, where the sweep drew one, the ``sweep_*`` fields: the sweep's best
    layer, chosen on all the data, with its permutation p and null
    (:func:`evalaware.probes.selection_null`). Those are the sweep's, not the records' own: a
    nested record's layer was chosen without its fold and may differ."""

    MARKS: ClassVar[tuple[str, ...]] = ("layer_selection",)
    layer_selection: str | None = None
    layer: int | None = None
    sweep_best_layer: int | None = None
    sweep_selection_p: float | None = None
    sweep_null_mean: float | None = None
    sweep_null_q95: float | None = None
    sweep_n_perm: int | None = None


@dataclass(frozen=True)
class ScoreVariant:
    """One score variant a logprob record carries beside its score (``tokenization.scoring``'s
    naive, top20 and aware): its P(eval), the target words' coverage and its exact log-odds,
    written as ``<name>_p_eval``, ``<name>_coverage`` and ``<name>_log_odds``."""

    SUFFIXES: ClassVar[tuple[str, ...]] = ("_p_eval", "_coverage", "_log_odds")
    name: str
    p_eval: float | None = None
    coverage: float | None = None
    log_odds: float | None = None

    @classmethod
    def names(cls, record: Record | Mapping[str, Any]) -> tuple[str, ...]:
        """The variants `record` carries (those with a ``<name>_p_eval`` key), sorted."""
        return tuple(sorted(k[:-len("_p_eval")] for k in details_of(record) if k.endswith("_p_eval")))

    @classmethod
    def of(cls, record: Record | Mapping[str, Any], name: str) -> "ScoreVariant | None":
        """Variant `name` of `record`; None where it carries none. A non-numeric value reads as None."""
        d = details_of(record)
        if f"{name}_p_eval" not in d:
            return None

        def num(v: Any) -> float | None:
            return None if isinstance(v, bool) or not isinstance(v, (int, float)) else float(v)

        p, cov, lo = (num(d.get(name + s)) for s in cls.SUFFIXES)
        return cls(name, p, cov, lo if lo is None or math.isfinite(lo) else None)


@dataclass(frozen=True)
class BehaviourOutcome(Detail):
    """A ``behaviour`` record's outcome (:mod:`harness.core.behaviour`): the sample's declared
    ``behaviour_kind`` and what it means (``behaviour_what``), whether the answer ``behaved``
    (None: no outcome, ``behaviour_error`` says why), and a choice's ``chosen`` option."""

    MARKS: ClassVar[tuple[str, ...]] = ("behaviour_kind",)
    behaviour_kind: str | None = None
    behaviour_what: str | None = None
    behaved: bool | None = None
    chosen: str | None = None
    behaviour_error: str | None = None
