"""Evidence extraction: motivation records judged aware -> features, each with verbatim quotes and
the sample it came from.

Record schema (the motivation method, harness/methods/motivation.py)::

    record["prediction"]                      "eval" when the majority of votes are aware
    record["details"]["votes"][k]["answer"]   the model's answer to variant k
    record["details"]["votes"][k]["judge"]    {"aware": bool|None, "evidence": [{"quote", "feature",
                                               "verified"}], "raw": str, "error": str|None}

Decisions:
- scope "majority" (default): aware votes of records whose prediction is "eval" (the samples the
  method calls evaluations); scope "votes": every aware vote, whatever the majority.
- An evidence item without a feature description (empty, or a placeholder such as the judge
  prompt's "none stated") uses its quote as the feature text (``from_quote``); an item with
  neither is skipped and counted.
- Quotes the judge could not verify as substrings are kept, flagged ``verified: false``. When the
  judge left ``verified`` out, it is computed here against the vote's answer (whitespace- and
  case-insensitive).
- A verdict flagged ``unverified`` (aware, but none of its quotes occurs in the judged text; the
  motivation method casts no vote for it, :mod:`harness.methods.judge`) is no aware vote here either: it
  is counted in ``votes_unverified`` and gives no features. That is where a judge that copies the
  prompt's example instead of quoting the answer ends up.
- Evidence of the same feature text in one vote is merged (quotes concatenated).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from harness.taxonomy import TaxonomyError

SCOPES = ("majority", "votes")
NO_FEATURE = frozenset({"none stated", "none", "n/a", "na", "not stated", "unknown", "unspecified",
                        "no feature", "none given"})
_WS = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Collapse whitespace and strip surrounding quotes/punctuation."""
    return _WS.sub(" ", text).strip().strip("\"'`“”‘’").strip(" .;:,").strip()


def feature_key(text: str) -> str:
    """Key under which identical feature descriptions are clustered together."""
    return normalize_text(text).lower()


@dataclass(frozen=True)
class Quote:
    text: str
    verified: bool


@dataclass
class Feature:
    """One cue the model cited in one vote of one sample."""

    text: str
    sample_id: str
    vote: int
    variant: str | None
    quotes: list[Quote] = field(default_factory=list)
    from_quote: bool = False
    label: str | None = None
    category: str | None = None

    @property
    def key(self) -> str:
        return feature_key(self.text)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ExtractStats:
    records: int = 0
    records_eval: int = 0
    votes: int = 0
    votes_aware: int = 0
    votes_unjudged: int = 0
    votes_unverified: int = 0
    samples_with_features: int = 0
    features: int = 0
    features_from_quote: int = 0
    evidence_skipped: int = 0
    quotes: int = 0
    quotes_unverified: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def _where(rec: dict[str, Any], i: int, k: int | None = None) -> str:
    sid = rec.get("sample_id", f"#{i}") if isinstance(rec, dict) else f"#{i}"
    return f"record {i} (sample_id={sid!r})" + (f" vote {k}" if k is not None else "")


def _in_text(quote: str, text: str | None) -> bool:
    return bool(text) and _WS.sub(" ", quote).strip().lower() in _WS.sub(" ", text).lower()


def _evidence(rec: dict[str, Any], i: int, k: int, vote: dict[str, Any]) -> list[dict[str, Any]]:
    judge = vote.get("judge")
    if not isinstance(judge, dict):
        raise TaxonomyError(f"{_where(rec, i, k)}: field 'judge' must be an object, "
                            f"got {type(judge).__name__}")
    ev = judge.get("evidence") or []
    if not isinstance(ev, list):
        raise TaxonomyError(f"{_where(rec, i, k)}: field 'judge.evidence' must be a list")
    for j, e in enumerate(ev):
        if not isinstance(e, dict):
            raise TaxonomyError(f"{_where(rec, i, k)}: judge.evidence[{j}] must be an object")
        for f in ("quote", "feature"):
            if e.get(f) is not None and not isinstance(e[f], str):
                raise TaxonomyError(f"{_where(rec, i, k)}: judge.evidence[{j}].{f} must be a string")
    return ev


def _votes(rec: Any, i: int) -> list[dict[str, Any]]:
    if not isinstance(rec, dict):
        raise TaxonomyError(f"record {i}: expected an object, got {type(rec).__name__}")
    if not isinstance(rec.get("sample_id"), str):
        raise TaxonomyError(f"record {i}: field 'sample_id' missing or not a string")
    votes = (rec.get("details") or {}).get("votes") if isinstance(rec.get("details"), dict) else None
    if not isinstance(votes, list):
        raise TaxonomyError(f"{_where(rec, i)}: field 'details.votes' missing or not a list "
                            f"(is this a motivation record?)")
    for k, v in enumerate(votes):
        if not isinstance(v, dict):
            raise TaxonomyError(f"{_where(rec, i, k)}: expected an object")
    return votes


def extract_features(records: Iterable[dict[str, Any]], scope: str = "majority"
                     ) -> tuple[list[Feature], ExtractStats]:
    """Features from the aware votes of `records` (see the module docstring for the rules)."""
    if scope not in SCOPES:
        raise TaxonomyError(f"scope must be one of {SCOPES}, got {scope!r}")
    stats, out = ExtractStats(), []
    samples: set[str] = set()
    for i, rec in enumerate(records):
        votes = _votes(rec, i)
        stats.records += 1
        is_eval = rec.get("prediction") == "eval"
        stats.records_eval += is_eval
        for k, vote in enumerate(votes):
            stats.votes += 1
            judge = vote.get("judge")
            if judge is not None and not isinstance(judge, dict):
                raise TaxonomyError(f"{_where(rec, i, k)}: field 'judge' must be an object, "
                                    f"got {type(judge).__name__}")
            aware = judge.get("aware") if judge else None
            if aware is None:
                stats.votes_unjudged += 1
            if aware is True and judge.get("unverified"):
                stats.votes_unverified += 1
                continue
            if aware is not True:
                continue
            stats.votes_aware += 1
            if scope == "majority" and not is_eval:
                continue
            merged: dict[str, Feature] = {}
            for e in _evidence(rec, i, k, vote):
                quote = normalize_text(e.get("quote") or "")
                text = normalize_text(e.get("feature") or "")
                if text.lower() in NO_FEATURE:
                    text = ""
                if not text and not quote:
                    stats.evidence_skipped += 1
                    continue
                feat = merged.get(feature_key(text or quote))
                if feat is None:
                    feat = Feature(text=text or quote, sample_id=rec["sample_id"],
                                   vote=int(vote.get("k", k)), variant=vote.get("variant"),
                                   from_quote=not text, label=rec.get("label"),
                                   category=rec.get("category"))
                    merged[feat.key] = feat
                if quote and all(q.text != quote for q in feat.quotes):
                    verified = e.get("verified")
                    if verified is None:
                        verified = _in_text(quote, vote.get("answer"))
                    feat.quotes.append(Quote(quote, bool(verified)))
            for feat in merged.values():
                out.append(feat)
                samples.add(feat.sample_id)
                stats.features += 1
                stats.features_from_quote += feat.from_quote
                stats.quotes += len(feat.quotes)
                stats.quotes_unverified += sum(not q.verified for q in feat.quotes)
    stats.samples_with_features = len(samples)
    return out, stats
