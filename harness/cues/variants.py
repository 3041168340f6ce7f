"""Counterfactual samples: each sample with one factor switched (``single`` design), with every
on/off combination of up to four factors (``factorial``), or with every factor it shows removed
(``neutralize``: its format-neutralized twin).

A variant is an ordinary :class:`~harness.core.sample.Sample` (any dataset format, Inspect logs
included) whose metadata ``extra`` holds ``pair`` (the original's id), ``factor`` and
``direction`` (``add`` / ``remove``; in the factorial design ``factor`` is the cell, e.g.
``grading=1,formatting=0``, and ``direction`` is ``cell``). Label and category are the
original's. A variant is refused, with the reason, when its own transform cannot apply or when
it also switches another of the chosen factors (the detectors before and after disagree), so
every estimated change is the change of one factor.

A ``neutralize`` twin applies, one after another in the order of the factors and in passes
until a pass removes nothing, the removal of each factor the sample shows (each removal checked
as in ``single``: a removal that cannot apply exactly, or that would switch another factor *on*,
is refused and the factor stays, with the reason of the last pass); one that also switches off another factor the sample shows is kept and says so
(``also_removed``). Its metadata ``extra`` holds ``changes`` (the removals made, in order) and
``kept`` (the factors it still shows, each with the reason its removal was refused); a sample with no removal made has no twin (its
twin is itself: the same prompt, the same score).

A factor whose own code fails (a user's factor from a ``--factors`` file whose ``detect``, ``add``
or ``remove`` raises anything but :class:`~harness.cues.factors.NotApplicable`) stops the plan
with one :class:`FactorError` naming the factor, the sample and the exception.
"""

from __future__ import annotations

import itertools
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from harness.core.errors import EvalAwareError
from harness.core.sample import Sample
from harness.cues.factors import Factor, NotApplicable

DESIGNS = ("single", "factorial", "neutralize")
NEUTRAL = "neutralized"  # the twin's suffix and factor name
MAX_FACTORIAL = 4
SEP = "~"  # between the original's id and the variant's suffix


@dataclass
class Plan:
    """The originals, their variants and the refusals ({sample, factor, direction, reason})."""

    design: str
    factors: list[Factor]
    turns: str
    originals: list[Sample]
    variants: list[Sample] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)
    present: dict[str, dict[str, bool]] = field(default_factory=dict)  # sample id -> factor -> present

    @property
    def samples(self) -> list[Sample]:
        return self.originals + self.variants

    def counts(self) -> dict[str, dict[str, Any]]:
        """Per factor: samples with / without it, variants built per direction, refusals by reason."""
        out: dict[str, dict[str, Any]] = {}
        for f in self.factors:
            n_with = sum(1 for p in self.present.values() if p[f.name])
            built = Counter(str(v.metadata.extra["direction"]) for v in self.variants
                            if v.metadata.extra["factor"] == f.name
                            or any(f.name in (c["factor"], *c["also_removed"])
                                   for c in v.metadata.extra.get("changes", ())))
            reasons = Counter(r["reason"] for r in self.refused if r["factor"] == f.name)
            out[f.name] = {"description": f.description, "n_present": n_with,
                           "n_absent": len(self.present) - n_with, "n_add": built.get("add", 0),
                           "n_remove": built.get("remove", 0), "refused": dict(sorted(reasons.items()))}
        return out


def _variant(s: Sample, suffix: str, messages: Sequence[Any], **extra: Any) -> Sample:
    ex = dict(s.metadata.extra)
    if "pair" in ex:  # the dataset's own pair id (e.g. an organism's paired set) is kept apart
        ex["dataset_pair"] = ex.pop("pair")
    ex.update(pair=s.id, **extra)
    return replace(s, id=f"{s.id}{SEP}{suffix}", messages=tuple(messages),
                   metadata=replace(s.metadata, extra=ex))


class FactorError(EvalAwareError):
    """A factor's detect/add/remove raised on a sample (its code failed: not a refusal)."""


@contextmanager
def _factor_code(f: Factor, sample: Sample, doing: str) -> Iterator[None]:
    """Run a factor's own code: whatever it raises but :class:`NotApplicable` (``sys.exit``
    included, as for a factor file itself) becomes one :class:`FactorError` line."""
    try:
        yield
    except (NotApplicable, FactorError):
        raise
    except (Exception, SystemExit) as e:
        raise FactorError(f"factor {f.name!r} raised {type(e).__name__}: {e} while {doing} "
                          f"sample {sample.id!r}") from None


def _states(factors: Sequence[Factor], messages: Sequence[Any], turns: str,
            sample: Sample) -> dict[str, bool]:
    out = {}
    for f in factors:
        with _factor_code(f, sample, "detecting it in"):
            out[f.name] = bool(f.detect(messages, turns))
    return out


def _apply(f: Factor, messages: Sequence[Any], direction: str, turns: str, sample: Sample) -> Any:
    with _factor_code(f, sample, f"{'adding it to' if direction == 'add' else 'removing it from'}"):
        return f.apply(messages, direction, turns)


def build_plan(samples: Sequence[Sample], factors: Sequence[Factor], design: str = "single",
               turns: str = "first") -> Plan:
    """Every applicable counterfactual of `samples` (see the module docstring)."""
    if design not in DESIGNS:
        raise EvalAwareError(f"unknown --design {design!r}; use {', '.join(DESIGNS)}")
    if design == "factorial" and not 1 <= len(factors) <= MAX_FACTORIAL:
        raise EvalAwareError(f"--design factorial takes 1 to {MAX_FACTORIAL} factors "
                             f"({len(factors)} given); name them with --factors a,b,c")
    ids = [s.id for s in samples]
    clash = [i for i in ids if SEP in i and i.split(SEP)[0] in set(ids)]
    if clash:
        raise EvalAwareError(f"sample id {clash[0]!r} looks like a variant of another sample "
                             f"(contains {SEP!r}); give the dataset unique ids without {SEP!r}")
    plan = Plan(design, list(factors), turns, list(samples))
    for s in samples:
        plan.present[s.id] = before = _states(factors, s.messages, turns, s)
        if design == "single":
            for f in factors:
                d = "remove" if before[f.name] else "add"
                try:
                    out = _apply(f, s.messages, d, turns, s)
                    after = _states(factors, out, turns, s)
                    moved = [n for n in before if n != f.name and after[n] != before[n]]
                    if moved:
                        raise NotApplicable(f"also switches {', '.join(moved)}")
                except NotApplicable as e:
                    plan.refused.append({"sample": s.id, "factor": f.name, "direction": d, "reason": str(e)})
                    continue
                plan.variants.append(_variant(s, f"{f.name}:{d}", out, factor=f.name, direction=d))
        elif design == "neutralize":
            twin = _neutralized(s, factors, turns, before, plan.refused)
            if twin is not None:
                plan.variants.append(twin)
        else:
            cells, why = _cells(s, factors, turns, before)
            if why:
                plan.refused.append({"sample": s.id, "factor": "*", "direction": "cell", "reason": why})
                continue
            plan.variants += cells
    return plan


def cell_name(state: dict[str, bool]) -> str:
    return ",".join(f"{k}={int(v)}" for k, v in state.items())


def _cells(s: Sample, factors: Sequence[Factor], turns: str, before: dict[str, bool]
           ) -> tuple[list[Sample], str | None]:
    """Every on/off cell of the factors except the original's own (the original is its cell);
    or the reason the sample cannot take part (one cell cannot be built exactly)."""
    out = []
    for bits in itertools.product((False, True), repeat=len(factors)):
        want = {f.name: b for f, b in zip(factors, bits)}
        if want == before:
            continue
        msgs: Any = s.messages
        try:
            # removals first, so an addition never meets the text it would have to remove
            for f in sorted(factors, key=lambda f: want[f.name]):
                if want[f.name] != before[f.name]:
                    msgs = _apply(f, msgs, "add" if want[f.name] else "remove", turns, s)
        except NotApplicable as e:
            return [], f"cell {cell_name(want)}: {e}"
        if _states(factors, msgs, turns, s) != want:
            return [], f"cell {cell_name(want)}: the detectors disagree with the cell"
        out.append(_variant(s, cell_name(want), msgs, factor=cell_name(want), direction="cell", cell=want))
    return out, None


def _neutralized(s: Sample, factors: Sequence[Factor], turns: str, before: dict[str, bool],
                 refused: list[dict[str, str]]) -> Sample | None:
    """The sample with every factor it shows removed, in order (see the module docstring); None
    when no removal could be made. Refusals are appended to `refused`."""
    msgs: Any = s.messages
    state = dict(before)
    changes: list[dict[str, Any]] = []
    why: dict[str, str] = {}
    progress = True
    while progress:  # passes until none removes anything: a removal refused early may apply later
        progress, why = False, {}
        for f in factors:
            if not state[f.name]:
                continue
            try:
                out = _apply(f, msgs, "remove", turns, s)
                after = _states(factors, out, turns, s)
                on = [n for n in after if after[n] and not state[n]]
                if on:
                    raise NotApplicable(f"also switches on {', '.join(on)}")
            except NotApplicable as e:
                why[f.name] = str(e)
                continue
            changes.append({"factor": f.name,
                            "also_removed": [n for n in after if n != f.name and state[n] and not after[n]]})
            msgs, state, progress = out, after, True
    kept = [{"factor": n, "reason": why.get(n, "")} for n, on in state.items() if on]
    refused += [{"sample": s.id, "factor": k["factor"], "direction": "remove", "reason": k["reason"]} for k in kept]
    if not changes:
        return None
    return _variant(s, NEUTRAL, msgs, factor=NEUTRAL, direction="remove", changes=changes, kept=kept)
