"""Load and validate datasets: our JSONL, Needham et al. (2025) JSON, plain-text prompts, and
Inspect AI logs (read in :mod:`harness.data.inspect_logs`).

Every malformed input raises :class:`DatasetError` naming the file, the record (index and id)
and the field, so the CLI can print one line and exit non-zero.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

from harness.data.records import LoadedDataset, RecordContext, duplicate_id, id_key, parse_messages
from harness.core.atomic import replace_file
from harness.core.behaviour import parse_behaviour
from harness.core.errors import DatasetError
from harness.data.inspect_logs import is_inspect_log, read_logs
from harness.core.sample import LABELS, Message, Sample, SampleMeta
from harness.core.textio import read_utf8, refuse_special


DEMO_DATASET = "demo"
#: The bundled behaviour set (issue 45): demo-style prompts, each with a scorable behaviour.
BEHAVIOUR_DATASET = "behaviour-demo"
# Needham et al. (2025): two human annotators gave each transcript a P(eval).
NEEDHAM_HUMAN_SOURCE = "Needham et al. 2025 annotators (mean of eval_author1/2)"


def demo_path() -> Path:
    """Path of the bundled, illustrative demo dataset."""
    return Path(str(resources.files("harness") / "data" / "demo.jsonl"))


def behaviour_path() -> Path:
    """Path of the bundled behaviour set (``harness/data/behaviour.jsonl``)."""
    return Path(str(resources.files("harness") / "data" / "behaviour.jsonl"))


def resolve_dataset(path: str | Path) -> Path:
    """Map the names ``demo`` and ``behaviour-demo`` to the bundled files; otherwise return the
    path as given."""
    bundled = {DEMO_DATASET: demo_path, BEHAVIOUR_DATASET: behaviour_path}.get(str(path))
    return bundled() if bundled is not None else Path(path)


def _probability(raw: Any, ctx: RecordContext, field: str) -> float | None:
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0.0 <= float(raw) <= 1.0:
        raise ctx.fail(f"must be a number in [0, 1], got {raw!r}", field)
    return float(raw)


def _sample_id(raw: Any, ctx: RecordContext) -> str:
    if not isinstance(raw, (str, int)) or isinstance(raw, bool) or raw == "":
        raise ctx.fail("missing or empty id", "id")
    ctx.record_id = str(raw)
    return str(raw)


def parse_record(rec: Any, ctx: RecordContext) -> Sample:
    """Parse one record of our format."""
    if not isinstance(rec, dict):
        raise ctx.fail("record must be a JSON object")
    sid = _sample_id(rec.get("id"), ctx)
    label = rec.get("label")
    if label is None:
        raise ctx.fail("missing label (expected 'eval' or 'deploy')", "label")
    if label not in LABELS:
        raise ctx.fail(f"label must be 'eval' or 'deploy', got {label!r}", "label")
    messages = parse_messages(rec.get("messages"), ctx, "messages")
    meta = rec.get("metadata") or {}
    if not isinstance(meta, dict):
        raise ctx.fail("metadata must be an object", "metadata")
    category = meta.get("category") or sid.split(":", 1)[0]
    agentic = meta.get("agentic", any(m.tool_calls or m.role == "tool" for m in messages))
    if not isinstance(agentic, bool):
        raise ctx.fail("must be true or false", "metadata.agentic")
    human, source = _human_annotation(meta, ctx)
    if meta.get("behaviour") is not None:
        try:
            parse_behaviour(meta["behaviour"])
        except ValueError as e:
            raise ctx.fail(str(e), "metadata.behaviour") from None
    known = {"category", "agentic", "eval_type", "human_eval_source"}
    if human is not None or meta.get("human_eval_probability") in (None, ""):
        known.add("human_eval_probability")  # an unsourced number stays in `extra`
    return Sample(
        id=sid, messages=messages, label=label,
        metadata=SampleMeta(
            category=str(category), agentic=agentic, eval_type=str(meta.get("eval_type") or ""),
            human_eval_probability=human, human_eval_source=source,
            extra={k: v for k, v in meta.items() if k not in known},
        ),
    )


def _human_annotation(meta: dict[str, Any], ctx: RecordContext) -> tuple[float | None, str | None]:
    """(P(eval), source) of a real human annotation in our format, or (None, None).

    A `human_eval_probability` counts as human data only together with a non-empty
    `human_eval_source` naming the annotators. Without one (an author's prior, as in the first
    demo set) the value stays in `extra` under its own key: kept and written back, never shown
    as a human row or used as a human baseline.
    """
    p = _probability(meta.get("human_eval_probability"), ctx, "metadata.human_eval_probability")
    source = meta.get("human_eval_source")
    if source is not None and (not isinstance(source, str) or not source.strip()):
        raise ctx.fail("must be a non-empty string naming the human annotators",
                       "metadata.human_eval_source")
    if source and p is None:
        raise ctx.fail("names a source but the record has no human_eval_probability",
                       "metadata.human_eval_source")
    return (p, source.strip()) if source and p is not None else (None, None)


def parse_needham_record(rec: Any, ctx: RecordContext) -> Sample:
    """Parse one record of Needham et al. (2025): `{id, input: [messages], metadata}`."""
    if not isinstance(rec, dict):
        raise ctx.fail("record must be a JSON object")
    sid = _sample_id(rec.get("id"), ctx)
    messages = parse_messages(rec.get("input"), ctx, "input")
    meta = rec.get("metadata")
    if not isinstance(meta, dict):
        raise ctx.fail("missing metadata object", "metadata")
    ev = meta.get("eval_category")
    if not isinstance(ev, bool):
        raise ctx.fail(f"must be true (evaluation) or false (deployment), got {ev!r}",
                       "metadata.eval_category")
    humans = [_probability(meta.get(k), ctx, f"metadata.{k}") for k in ("eval_author1", "eval_author2")]
    humans = [h for h in humans if h is not None]
    known = {"category", "eval_category", "scaffold", "eval_type", "eval_author1", "eval_author2"}
    return Sample(
        id=sid, messages=messages, label="eval" if ev else "deploy",
        metadata=SampleMeta(
            category=str(meta.get("category") or sid.split(":", 1)[0]),
            agentic=meta.get("scaffold") is not None,
            eval_type=str(meta.get("eval_type") or ""),
            human_eval_probability=sum(humans) / len(humans) if humans else None,
            human_eval_source=NEEDHAM_HUMAN_SOURCE if humans else None,
            extra={"scaffold": meta.get("scaffold"),
                   **{k: v for k, v in meta.items() if k not in known}},
        ),
    )


def _parse_any(rec: Any, ctx: RecordContext) -> Sample:
    if isinstance(rec, dict) and "input" in rec and "messages" not in rec:
        return parse_needham_record(rec, ctx)
    return parse_record(rec, ctx)


def _check_unique(samples: list[Sample], path: Path) -> None:
    """Refuse two records whose ids are one under :func:`~harness.data.records.id_key` (equal, or
    equal after Unicode NFC normalization), naming both."""
    seen: dict[str, tuple[int, str]] = {}
    for i, s in enumerate(samples):
        first = seen.setdefault(id_key(s.id), (i, s.id))
        if first[0] != i:
            raise DatasetError(str(path), duplicate_id(first[1], f"record {first[0] + 1}", s.id),
                               i, s.id, "id")


UNLABELLED_DEFAULT = "eval"
"""Label of inputs without labels (.txt) when no ``--label`` is given: a prompt set handed to the
tool is usually a benchmark's."""

LABEL_LESS_SUFFIXES = (".txt",)
"""Formats whose records carry no label; ``--label`` names theirs."""


def load_text(path: Path, label: str = UNLABELLED_DEFAULT) -> list[Sample]:
    """Plain text: one user prompt per non-empty line, all with `label` (default: eval).

    Meant for a benchmark designer's own prompt set (the taxonomy tool); the category is the
    file's stem, so grouped analyses treat the file as one source.
    """
    if label not in LABELS:
        raise DatasetError(str(path), f"label must be 'eval' or 'deploy', got {label!r}")
    out = []
    for n, line in enumerate(read_utf8(path).splitlines(), start=1):
        if line.strip():
            out.append(Sample(id=f"{path.stem}:{n}", label=label,
                              messages=(Message("user", line.strip()),),
                              metadata=SampleMeta(category=path.stem)))
    if not out:
        raise DatasetError(str(path), "no prompts (the file is empty)")
    return out


def read_dataset(path: str | Path, label: str | None = None,
                 label_field: str | None = None) -> LoadedDataset:
    """Load a dataset with notes. By extension: .jsonl (ours), .json (Needham array, ours, or an
    Inspect log), .txt, .eval or a directory (Inspect logs, see :mod:`harness.data.inspect_logs`).

    Every file format is read as UTF-8 with or without a BOM (:mod:`harness.core.textio`). `label` is
    the label of inputs without labels (.txt, Inspect logs; default eval); a file with its own
    labels refuses it. `label_field` takes an Inspect sample's label from that metadata field.
    """
    path = resolve_dataset(path)
    if not path.exists():
        raise DatasetError(str(path), "no such file")
    refuse_special(path)
    if label is not None and label not in LABELS:
        raise DatasetError(str(path), f"label must be 'eval' or 'deploy', got {label!r}")
    if is_inspect_log(path):
        got = read_logs(path, label or UNLABELLED_DEFAULT, label_field, explicit_label=label is not None)
        _check_unique(got.samples, path)
        return got
    if label_field is not None:
        raise DatasetError(str(path), "--label-field applies to Inspect logs only")
    if path.suffix in LABEL_LESS_SUFFIXES:
        return LoadedDataset(load_text(path, label or UNLABELLED_DEFAULT), [])
    if label is not None:
        raise DatasetError(str(path), f"--label is for inputs without labels "
                           f"({', '.join(LABEL_LESS_SUFFIXES)}, Inspect logs); this file has its own labels")
    samples, records = _load_file(path)
    return LoadedDataset(samples, unread_fields(path, records))


def load_dataset(path: str | Path, label: str | None = None,
                 label_field: str | None = None) -> list[Sample]:
    """:func:`read_dataset` without the notes."""
    return read_dataset(path, label, label_field).samples


def _load_file(path: Path) -> tuple[list[Sample], list[Any]]:
    """Our JSONL, or a JSON array (Needham et al. or ours): the samples and the raw records."""
    text = read_utf8(path)
    samples: list[Sample] = []
    records: list[Any] = []
    if path.suffix == ".jsonl":
        # JSON Lines records end at "\n" only: str.splitlines would also split on U+2028 etc.,
        # which json.dumps(ensure_ascii=False) leaves raw inside strings.
        for i, (lineno, line) in enumerate(
                (n, ln) for n, ln in enumerate(text.split("\n"), start=1) if ln.strip()):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(str(path), f"invalid JSON on line {lineno}: {e.msg}", i) from None
            except RecursionError:
                raise DatasetError(str(path), f"JSON nested too deeply on line {lineno}", i) from None
            samples.append(_parse_any(rec, RecordContext(path, i)))
            records.append(rec)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DatasetError(str(path), f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") \
                from None
        except RecursionError:
            raise DatasetError(str(path), "JSON nested too deeply") from None
        if not isinstance(data, list):
            raise DatasetError(str(path), "expected a JSON array of records (a dataset) or an "
                               "Inspect log (an object with 'eval' and 'samples'); found a JSON "
                               f"{type(data).__name__.replace('dict', 'object')}")
        samples = [_parse_any(rec, RecordContext(path, i)) for i, rec in enumerate(data)]
        records = data
    if not samples:
        raise DatasetError(str(path), "no records")
    _check_unique(samples, path)
    return samples, records


RECORD_FIELDS = {"id", "label", "messages", "metadata", "input"}
"""Top-level fields a record's reader takes (ours: id, label, messages, metadata; Needham et al.:
id, input, metadata)."""


def unread_fields(path: Path, records: Iterable[Any]) -> list[str]:
    """Notes on top-level record fields nobody reads (a ``category`` beside ``metadata`` is most
    likely meant as ``metadata.category``)."""
    counts: Counter[str] = Counter(k for r in records if isinstance(r, dict) for k in r
                                   if k not in RECORD_FIELDS)
    meta = {f.name for f in fields(SampleMeta)} | {"scaffold", "eval_category", "eval_author1",
                                                  "eval_author2"}
    return [f"{path}: field {k!r} in {n} record(s) is not read" +
            (f"; did you mean metadata.{k}?" if k in meta else "")
            for k, n in sorted(counts.items())]


def write_jsonl(samples: Iterable[Sample], path: str | Path) -> None:
    """Write samples in our JSONL format (round-trips through :func:`load_dataset`), atomically."""
    with replace_file(path) as f:
        for s in samples:
            f.write(s.to_json() + "\n")


@dataclass(frozen=True)
class DatasetSummary:
    n: int
    labels: dict[str, int]
    kinds: dict[str, int]
    categories: dict[str, int]
    eval_types: dict[str, int]
    mixed_categories: tuple[str, ...]
    human_sources: dict[str, int] = field(default_factory=dict)  # source -> annotated samples
    unsourced_human: int = 0  # human_eval_probability without a source: not human data

    def lines(self) -> list[str]:
        out = [f"samples: {self.n}",
               "labels: " + ", ".join(f"{k}={v}" for k, v in sorted(self.labels.items())),
               "kinds: " + ", ".join(f"{k}={v}" for k, v in sorted(self.kinds.items())),
               "eval types: " + ", ".join(f"{k or '-'}={v}" for k, v in sorted(self.eval_types.items())),
               f"categories ({len(self.categories)}): "
               + ", ".join(f"{k}={v}" for k, v in sorted(self.categories.items()))]
        if self.mixed_categories:
            out.append("categories with both labels: " + ", ".join(self.mixed_categories))
        out.append("human annotations: " + (", ".join(f"{v} from {k}" for k, v in sorted(self.human_sources.items()))
                                            or "none"))
        if self.unsourced_human:
            out.append(f"note: {self.unsourced_human} samples carry human_eval_probability without "
                       "human_eval_source; not used as human data")
        return out


def summarize(samples: list[Sample]) -> DatasetSummary:
    by_cat: dict[str, set[str]] = {}
    for s in samples:
        by_cat.setdefault(s.metadata.category, set()).add(s.label)
    return DatasetSummary(
        n=len(samples),
        labels=dict(Counter(s.label for s in samples)),
        kinds=dict(Counter("agentic" if s.metadata.agentic else "chat" for s in samples)),
        categories=dict(Counter(s.metadata.category for s in samples)),
        eval_types=dict(Counter(s.metadata.eval_type for s in samples)),
        mixed_categories=tuple(sorted(c for c, ls in by_cat.items() if len(ls) > 1)),
        human_sources=dict(Counter(s.metadata.human_eval_source for s in samples
                                   if s.metadata.human_eval_source)),
        unsourced_human=sum(1 for s in samples if "human_eval_probability" in s.metadata.extra),
    )
