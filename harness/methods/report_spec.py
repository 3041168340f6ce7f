"""What a method declares about its place in the report, so the report names no method.

A method class sets ``report = ReportSpec(...)`` (:class:`harness.methods.base.Method`); records
written by other tools (the probes' ``probe`` records) get theirs through
:func:`register_prefix` (their package registers it when imported, as the CLI does). The report
asks :class:`Specs` for every method it finds in a run; a method nobody declared gets
:data:`DEFAULT` (shown generically, after the declared ones).

- ``order``: position in every table (ties broken by name).
- ``score``: what the method's ``score`` is, in words.
- ``constrainable``: ``--constrain`` holds this method's answers to a grammar (its rows are
  marked "constrained"; judged methods are marked through their judge's verdicts anyway).
- ``summary_note``: a sentence added to the summary's note when the method is in a run.
- ``family``: a section of its own shared by the methods of one family (:class:`Family`).
- ``kappa_pair``: the method's agreement with a partner method gets its own table, and, when
  the runs hold enough votes, the kappa-vs-votes experiment (:class:`KappaPair`).
- ``curve``: the records hold a curve along the model's output; the report plots its mean for
  eval and deploy samples and tabulates the signal it stands on (:class:`Curve`).
- ``scale``: what kind of number ``score`` is, so effects can be put on the log-odds scale
  (:mod:`harness.cues.scale`): ``probability`` (a P(eval)), ``share`` (a share of ``n_valid``
  votes or verdicts), ``log-ratio`` (already a log-ratio, in nats); ``log_odds_detail`` names a
  ``details`` key that holds the exact log-odds (the probes' ``decision``).
- ``readout``: False for records that are not an awareness readout but what the model did (the
  ``behaviour`` method): the report keeps them out of every readout table and links them to the
  readouts instead (:mod:`harness.reporting.linkage`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from harness.core.errors import EvalAwareError


@dataclass(frozen=True)
class Family:
    """A section shared by scored methods (the logprob methods, the probes): one row per method
    and per score variant recorded in ``details`` as ``<variant>_p_eval``.

    coverage_gated: variants count only where their ``<variant>_coverage`` reaches the record's
    ``min_coverage``, no AUROC is computed from fewer than ``MIN_AUROC_PER_CLASS`` scored samples
    per class (summary included), and a table lists each run's target words and gate."""

    title: str
    note: str
    order: int
    coverage_gated: bool = False


@dataclass(frozen=True)
class KappaPair:
    """`partner` vs the declaring method: a table titled `title`; with ``votes_experiment`` also
    kappa vs number of votes (votes aggregated as `aggregation` says, partner first)."""

    partner: str
    title: str
    votes_experiment: bool = False
    aggregation: str = ""


@dataclass(frozen=True)
class Curve:
    """A per-record curve: ``details[x]`` (positions in [0, 1]) and ``details[y]`` (values), drawn
    as the mean over eval and over deploy samples in equal-width bins of x; ``signal`` names
    per-record numbers in ``details`` whose means per class the report tabulates."""

    x: str
    y: str
    title: str
    xlabel: str
    ylabel: str
    signal: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReportSpec:
    order: int = 100
    score: str = "score"
    constrainable: bool = False
    summary_note: str | None = None
    family: Family | None = None
    kappa_pair: KappaPair | None = None
    curve: Curve | None = None
    scale: str = "probability"
    log_odds_detail: str | None = None
    readout: bool = True


SCALES = ("probability", "share", "log-ratio")
DEFAULT = ReportSpec()
_PREFIXES: dict[str, ReportSpec] = {}


def register_prefix(prefix: str, spec: ReportSpec) -> None:
    """Declare the report spec of records whose method name starts with `prefix` (records
    written outside :mod:`harness.methods`, e.g. by ``probes eval --write-records``); a prefix
    declared again with another spec is refused (it would silently replace the first)."""
    old = _PREFIXES.get(prefix)
    if old is not None and old != spec:
        raise EvalAwareError(f"report prefix {prefix!r} is registered twice, with different specs: "
                             f"{old} and {spec}")
    _PREFIXES[prefix] = spec


class Specs:
    """The specs the report reads: the registered methods' own (by name), then the prefixes
    registered by other packages, then :data:`DEFAULT`."""

    def __init__(self, declared: Mapping[str, ReportSpec]) -> None:
        self.declared = dict(declared)

    def __call__(self, method: str) -> ReportSpec:
        spec = self.declared.get(method)
        if spec is not None:
            return spec
        for prefix, s in sorted(_PREFIXES.items(), key=lambda kv: -len(kv[0])):
            if method.startswith(prefix):
                return s
        return DEFAULT

    def order(self, names: Iterable[str]) -> list[str]:
        """Methods in their declared order (undeclared ones last), ties by name."""
        return sorted(names, key=lambda m: (self(m).order, m))

    def pairs(self) -> list[tuple[str, str, KappaPair]]:
        """(partner, method, declaration) of every declared kappa pair, in method order."""
        return [(s.kappa_pair.partner, m, s.kappa_pair) for m in self.order(self.declared)
                for s in [self.declared[m]] if s.kappa_pair]
