"""Typed per-sample records: what a method (or a probe) concluded about one sample.

A :class:`Record` is stored in the run log as JSON (:meth:`Record.to_dict`), one per
(method, sample). Its layout, version :data:`RECORD_SCHEMA` (written as ``"schema"``):

- the sample's identity and slicing metadata: ``sample_id``, ``label``, ``category``,
  ``agentic``, ``eval_type``, ``n_turns``, ``task``, ``human_eval_probability``/``_source``;
- the decision: ``prediction`` ("eval"/"deploy"/None = undecided), ``score`` (P(eval)-like, for
  AUROC; None without signal), ``n_valid``/``n_invalid`` votes;
- ``n_answers``/``n_cut``: the model generations behind the record, and how many stopped at the
  token limit (absent for records without generations, e.g. probes); ``n_cut_context``: of those
  cut, the model's answers to the sample that the questions follow as cut, text kept (nothing a
  vote parses is lost: :meth:`harness.methods.base.Method.record`; absent in older records);
- ``details``: method-specific fields; its ``votes`` list holds one :class:`Vote` per question
  asked (typed here as :attr:`Record.votes`), a judged vote carries a :class:`Verdict`.

Records written before the version existed have the same layout and read as version 1; a newer
version is refused naming the record.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from harness.core.errors import StoreError
from harness.core.parsing import Parsed
from harness.core.sample import Sample

RECORD_SCHEMA = 1
UNVERIFIED = "unverified: no evidence quote occurs in the judged text"
COPIED = "unverified: an evidence quote is copied from the judge prompt, not the judged text"
_FLAGS = ("truncated", "cut", "constrained")


@dataclass(frozen=True)
class Evidence:
    """A quote the judge gave for its verdict; `verified`: found verbatim in the judged text;
    `copied`: not found there but in the judge prompt around it (:mod:`harness.methods.judge`)."""

    quote: str
    feature: str
    verified: bool
    copied: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"quote": self.quote, "feature": self.feature, "verified": self.verified}
        if self.copied:
            d["copied"] = True
        return d


@dataclass(frozen=True)
class Verdict:
    """A judge's reading of one text. `aware` is None when the judge's answer could not be
    parsed (`error` says why); `cut`: the verdict stopped at its token limit."""

    aware: bool | None
    evidence: tuple[Evidence, ...] = ()
    raw: str = ""
    error: str | None = None
    truncated: bool = False
    note: str | None = None
    cut: bool = False
    constrained: bool = False

    @property
    def copied(self) -> bool:
        """Some evidence quote is copied from the judge prompt instead of the judged text."""
        return any(e.copied for e in self.evidence)

    @property
    def unverified(self) -> bool:
        """The verdict quotes evidence and none of it occurs in the judged text, or some of it
        is copied from the judge prompt."""
        return bool(self.evidence) and (self.copied or not any(e.verified for e in self.evidence))

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def label(self) -> str | None:
        """The vote this verdict casts: "eval" (aware), "deploy" (not aware) or None."""
        return None if self.aware is None else ("eval" if self.aware else "deploy")

    def as_parsed(self) -> Parsed:
        """The verdict as a parsed vote; a failed verdict's error is prefixed "judge: ", an
        unverified one casts no vote."""
        if self.ok and self.unverified:
            return Parsed(None, f"judge: {COPIED if self.copied else UNVERIFIED}")
        return Parsed(self.label, None if self.ok else f"judge: {self.error}")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"aware": self.aware, "evidence": [e.to_dict() for e in self.evidence],
                             "raw": self.raw, "error": self.error}
        d.update({k: True for k in _FLAGS if getattr(self, k)})
        if self.unverified:
            d["unverified"] = True
        if self.note:
            d["note"] = self.note
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Verdict":
        ev = tuple(Evidence(str(e["quote"]), str(e.get("feature", "")), bool(e.get("verified", True)),
                            bool(e.get("copied")))
                   for e in d.get("evidence") or [])
        return cls(d.get("aware"), ev, d.get("raw", ""), d.get("error"), note=d.get("note"),
                   **{k: bool(d.get(k)) for k in _FLAGS})


@dataclass(frozen=True)
class Vote:
    """One question asked about a sample and its parsed answer: vote index `k`, prompt
    `variant`, parsed `value` (a label or a probability; None = unparseable, `error` says why),
    the judge's `verdict` where a judge read the answer, and the method's further fields
    (``answer``, ``reasoning``, ``finish_reason``, ``seed_offset``, label probabilities...).
    `variant` is None for votes that asked no prompt variant (absent from the JSON then)."""

    k: int
    variant: str | None = None
    value: Any = None
    error: str | None = None
    verdict: Verdict | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {**self.extra, "k": self.k, "value": self.value, "error": self.error}
        if self.variant is not None:
            d["variant"] = self.variant
        if self.verdict is not None:
            d["judge"] = self.verdict.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Vote":
        extra = {k: v for k, v in d.items() if k not in ("k", "variant", "value", "error", "judge")}
        judge = d.get("judge")
        return cls(int(d["k"]), d.get("variant"), d.get("value"), d.get("error"),
                   Verdict.from_dict(judge) if isinstance(judge, dict) else None, extra)


ROLES = ("answer", "question", "elicited_reasoning", "judge")


@dataclass(frozen=True)
class ModelCall:
    """One generation a method asked for about one sample, as the run log keeps it.

    `role`: ``answer`` (the model's own answer to the sample), ``question`` (vote `k`'s question
    about it), ``elicited_reasoning`` (the reasoning method's ``<think>``-prefilled trace),
    ``judge`` (the judge's verdict on vote `k`'s text); `prompt_ids`/`output_ids` are the exact
    token ids the model read and wrote, `text`/`reasoning` the backend's split of the output.
    A steered run is its own run directory: its calls carry the same roles."""

    sample_id: str
    role: str
    k: int
    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    text: str = ""
    reasoning: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"sample_id": self.sample_id, "role": self.role, "k": self.k,
                "prompt_ids": list(self.prompt_ids), "output_ids": list(self.output_ids),
                "text": self.text, "reasoning": self.reasoning}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelCall":
        return cls(d["sample_id"], d["role"], int(d["k"]), tuple(d["prompt_ids"]),
                   tuple(d["output_ids"]), d.get("text", ""), d.get("reasoning"))


_OPTIONAL = ("n_answers", "n_cut", "n_cut_context")  # absent from the JSON when None (records without generations)


@dataclass(frozen=True)
class Record:
    """What one method concluded about one sample (see the module docstring)."""

    sample_id: str
    method: str
    label: str
    prediction: str | None
    score: float | None
    n_valid: int
    n_invalid: int
    category: str | None = None
    agentic: bool | None = None
    eval_type: str | None = None
    n_turns: int | None = None
    human_eval_probability: float | None = None
    human_eval_source: str | None = None
    n_answers: int | None = None
    n_cut: int | None = None
    n_cut_context: int | None = None
    task: str | None = None
    votes: tuple[Vote, ...] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"schema": RECORD_SCHEMA}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("votes", "details") or (f.name in _OPTIONAL and v is None):
                continue
            d[f.name] = v
        d["details"] = dict(self.details)
        if self.votes is not None:
            d["details"]["votes"] = [v.to_dict() for v in self.votes]
        return d

    @classmethod
    def for_sample(cls, sample: Sample, method: str, prediction: str | None, score: float | None,
                   n_valid: int, n_invalid: int, **rest: Any) -> "Record":
        """A record about `sample`, with the sample's label and slicing metadata filled in."""
        m = sample.metadata
        return cls(sample.id, method, sample.label, prediction, score, n_valid, n_invalid,
                   category=m.category, agentic=m.agentic, eval_type=m.eval_type,
                   n_turns=sample.n_turns, human_eval_probability=m.human_eval_probability,
                   human_eval_source=m.human_eval_source, task=m.extra.get("task"), **rest)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Record":
        """A record from its JSON form; a newer version or a missing field is refused naming the
        record and the field."""
        who = f"record {d.get('method', '?')}/{d.get('sample_id', '?')}"
        version = d.get("schema", RECORD_SCHEMA)
        if version != RECORD_SCHEMA:
            raise StoreError(f"{who}: record schema version {version}; this evalaware reads "
                             f"{RECORD_SCHEMA}")
        known = {f.name for f in fields(cls)} - {"votes", "details"}
        missing = [k for k in ("sample_id", "method", "label", "prediction", "score", "n_valid",
                               "n_invalid") if k not in d]
        if missing:
            raise StoreError(f"{who}: missing field {missing[0]!r}")
        details = dict(d.get("details") or {})
        votes = details.pop("votes", None)
        return cls(**{k: d[k] for k in known if k in d}, details=details,
                   votes=None if votes is None else tuple(Vote.from_dict(v) for v in votes))

    @classmethod
    def coerce(cls, rec: "Record | Mapping[str, Any]") -> "Record":
        """A Record as is; a mapping read through :meth:`from_dict` (checked)."""
        return rec if isinstance(rec, Record) else cls.from_dict(rec)
