"""The monitor's rows of `evalaware organism validate` (issue 36 item 4): own and cross reads, position 0
reported apart from the rest.

An organism is trained to open its answer with a planted sentence, and the monitor
(:mod:`harness.methods.monitor`) reads position 0 (the prompt alone, before any answer token),
exactly where the training target sits: there an organism's own monitor reads back what it was
trained to say, not awareness. So:

- **Reads.** ``own``: each model's monitor over its own answers (its sub-run). Two cross reads per
  organism O and the reference R, each its own resumable sub-run (:class:`CrossRead`):
  ``reference reads organism`` (R's monitor over O's answers: do the organism's *answers* carry
  the signal to a model that was not fine-tuned?) and ``organism reads reference`` (O's monitor
  over R's answers: did the organism's *reading* shift?). A cross read's samples end with the
  writer's own answer as the assistant's message (:func:`written_samples`), which the monitor
  reads as a dataset response.
- **Parts.** Each read twice: ``position 0`` (the curve at the start) and ``later`` (the peak over
  positions > 0; a sample with none leaves those rows with its pair, counted ``n_no_later``).
  Every later prefix still holds the answer's opening, the planted training target, so ``later``
  shows the signal at later positions, not beyond the opening.
  Position 0 depends on the reader alone (the prefix is the prompt), so a cross read's position-0
  row equals its reader's own: a check of the wiring, not new information.
- **Rows.** Every read is compared with the reference's own read of the same part, on the pairs
  scored in every read of that part (:func:`harness.organisms.validate.compare`: AUROC difference,
  within-pair double difference, intervals naming their rule).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from harness.core.sample import Message, Sample, sample_view
from harness.organisms.validate import Model, Recs, compare, method_records, scored_pairs
from harness.runlog import RunLog

METHOD = "monitor"
READS = ("own", "reference reads organism", "organism reads reference")
PARTS = ("position 0", "later")
#: What "later" is not: every prefix past position 0 still holds the answer's opening, where an
#: organism's planted sentence (its training target) sits.


@dataclass(frozen=True)
class CrossRead:
    """One model's monitor over another's answers: sub-run ``cross-<reader>-reads-<writer>``."""

    reader: Model
    writer: Model

    @property
    def name(self) -> str:
        return f"cross-{self.reader.name}-reads-{self.writer.name}"


def cross_reads(reference: Model, organisms: Sequence[Model]) -> list[CrossRead]:
    """Per organism: the reference over its answers, then it over the reference's."""
    return [c for o in organisms for c in (CrossRead(reference, o), CrossRead(o, reference))]


def read_names(reference: Model, organism: Model) -> dict[str, str]:
    """{read: sub-run name} of one organism's reads (:data:`READS`)."""
    return {"own": organism.name, "reference reads organism": CrossRead(reference, organism).name,
            "organism reads reference": CrossRead(organism, reference).name}


def written_samples(store: RunLog, tokenizer: Any, view: str) -> list[Sample]:
    """The writer's samples, each with its view (`view`) followed by the writer's own answer as
    the assistant's message: the ``answer`` call (k = 0) its monitor read (not another method's
    answer in the same sub-run, which may differ in length), decoded whole (reasoning included,
    trailing special tokens dropped). Samples the writer's monitor did not answer are left out."""
    calls = {}
    for c in store.model_calls(method=METHOD, role="answer"):
        if c.k == 0:
            calls.setdefault(c.sample_id, c)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    out = []
    for s in store.samples():
        c = calls.get(s.id)
        if c is None:
            continue
        ids = list(c.output_ids)
        while ids and ids[-1] in special:
            ids.pop()
        msgs = tuple(sample_view(s, view))
        if msgs[-1].role == "assistant":
            msgs = msgs[:-1]
        text = tokenizer.decode(ids, skip_special_tokens=False)
        out.append(replace(s, messages=msgs + (Message("assistant", text),)))
    return out


# --- parts ---------------------------------------------------------------------------------------

def part_score(rec: Mapping[str, Any], part: str) -> float | None:
    """A monitor record's score for `part`: the curve at position 0, or the peak over positions
    > 0 (None where the record has no such position or no score)."""
    if rec.get("score") is None:
        return None
    d = rec.get("details") or {}
    points = list(zip(d.get("positions") or [], d.get("curve") or []))
    if part == "position 0":
        return next((float(v) for p, v in points if p == 0), None)
    if part == "later":
        later = [float(v) for p, v in points if p > 0]
        return max(later) if later else None
    raise ValueError(f"part {part!r}: use one of {', '.join(PARTS)}")


def part_records(recs: Recs, part: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Every read's records with `score` replaced by the part's score."""
    return {n: {i: {**r, "score": part_score(r, part)} for i, r in by_id.items()} for n, by_id in recs.items()}


def no_later(recs: Recs) -> set[str]:
    """Sample ids that some read scored but with no position > 0 (an empty answer)."""
    return {i for by_id in recs.values() for i, r in by_id.items()
            if r.get("score") is not None and part_score(r, "later") is None}


# --- rows ----------------------------------------------------------------------------------------

def monitor_rows(recs: Recs, pairs: Mapping[str, str], reference: Model, organisms: Sequence[Model],
                 base: Model | None, n_boot: int, seed: int) -> list[dict[str, Any]]:
    """Per organism, read and part: a row comparing the read with the reference's own read of the
    same part. `recs`: {sub-run name: monitor records} of the reference, the base, every organism
    and every cross read. Per part, the pairs are those scored in every read of every organism."""
    base_name = None if base is None or base.name == reference.name else base.name
    rows = []
    n_all = len(set().union(*(set(r) for r in recs.values())))
    missing = no_later(recs)
    for part in PARTS:
        sub = part_records(recs, part)
        ids = scored_pairs(sub, pairs)
        for o in organisms:
            for read, name in read_names(reference, o).items():
                if name not in recs:  # a cross read an archive lacks (`organism judge`)
                    continue
                row = compare(sub, ids, pairs, reference.name, name,  # a part's score: no log-odds of its own
                              base_name if read == "own" else None, n_boot, seed, scale="score")
                rows.append({"method": METHOD, "organism": o.name, "kind": o.kind, "role": o.role,
                             "read": read, "part": part, "subset": f"{read}: {part}", "sub_run": name,
                             "reference_label": reference.label, **row, "n_unscored": n_all - len(ids),
                             "n_no_later": len(missing) if part == "later" else 0})
    return rows


def add_monitor(table: dict[str, Any], out: Path, reference: Model, organisms: Sequence[Model],
                base: Model | None, n_boot: int, seed: int, ids: Collection[str] | None = None,
                skip_missing_cross: bool = False) -> dict[str, Any]:
    """Add the monitor's own and cross reads, position 0 apart (``rows``, each with ``read`` and
    ``part``), to `table` from the sub-runs under `out` (their samples in `ids`, when given): secondary
    AUROC rows; the monitor's verdict is the declared rule's over its plain score, like every readout's.
    `skip_missing_cross`: a cross read with no sub-run under `out` leaves its rows out (`organism
    judge`, over archives whose reference is another build) instead of failing."""
    names = [*([base.name] if base is not None else []), reference.name, *(o.name for o in organisms),
             *(c.name for c in cross_reads(reference, organisms))]
    recs: dict[str, dict[str, dict[str, Any]]] = {}
    crossed = {c.name for c in cross_reads(reference, organisms)}
    for n in dict.fromkeys(names):
        if skip_missing_cross and n in crossed and not (out / n).is_dir():  # `judge`: an archive lacks it
            continue
        with RunLog(out / n, create=False) as st:
            recs[n] = method_records(st, METHOD, ids)
            if n == reference.name:
                pairs = {s.id: str(s.metadata.extra.get("pair", s.id)) for s in st.samples()
                         if ids is None or s.id in ids}
    rows = monitor_rows(recs, pairs, reference, organisms, base, n_boot, seed)
    table["rows"] = [*table.get("rows", []), *rows]
    return table
