"""The science of `evalaware organism validate`: every method's sensitivity and specificity, read from the
run directories of the base model, a reference and one or more organisms (issue 36, items 2, 3,
6 and 8's spillover).

- **Reference.** Every comparison is organism - reference on the same scored pairs. The
  reference is a sham organism (nothing planted, the same recipe: so the difference is what was
  planted, not what fine-tuning does) or, without one, the base model.
- **Roles.** An organism's card names its kind: ``aware`` and ``disjoint`` rows measure
  *sensitivity*; a ``behaviour`` row measures *specificity* (the cue changes the answer in a way
  that says nothing about being tested: a method that moves there measures "something changed");
  a ``sham`` given as an organism is a *null* row (it should not differ from the reference).
- **Rows.** Per method and organism: AUROC (cue vs no-cue) of the reference and the organism
  [category-cluster intervals, the same resamples for both], their difference, and the
  within-pair double difference: mean over pairs of [score(cue) - score(no cue)] on the
  organism minus the same on the reference (and, on the log-odds scale, the same of the exact
  log-odds beside it, in nats: it still moves where P(eval) rounds to 1.0). A pair leaves whole
  when any model left one side unscored, so every model and row stands on the same pairs
  (:func:`scored_pairs`). Methods whose votes carry a prompt variant and a label-mass gate
  (binary, probability) get a second row, ``within variant``: only the pairs whose two sides
  were scored on the same variants in each model of that comparison (base, reference,
  organism), so another organism in the run does not change it (the gate withholds votes
  depending on the label, so the plain row may compare different prompt variants across the
  sides). Its caveat: it selects pairs on the
  gate, an outcome the cue can move; compare it with the plain row.
- **Scale.** A method's AUROCs rank by the exact log-odds (:class:`~harness.core.details.LogOdds`)
  where every record of every model in the comparison has one, else by the score: one scale per
  comparison, named in the row (``scale``), as :func:`harness.stats.summaries.ranked`.
- **Flag.** Where the base's or the reference's AUROC interval already excludes 0.5 the method
  reads the cue's text: a difference is then over a model that is not at chance.
- **Spillover.** Mean log-odds of each logprob-scored method on the no-cue prompts, organism vs
  reference, on one scale for both models: the exact log-odds where every record of both has one,
  else the clipped logit of every score (:func:`clipped_logit`; the records without an exact
  log-odds and the clipped scores counted), beside the first-token KL of `organism measure`
  where its JSON is found.

The monitor's own and cross reads, position 0 apart from the rest: :mod:`harness.organisms.validate_monitor`.
A behaviour method in the run (not a readout: ``ReportSpec.readout``) gets no rows and no verdict
here but the coupling table (:mod:`harness.organisms.coupling`): within cue prompts, how well each
readout predicts the behaviour change, pooled and within topic, the verdict on the coupled
organism's within-topic AUROC (a permutation test), which must lie beyond its topic-matched null's
(an organism of kind ``behaviour-topics`` in the run) and beyond the base's and the sham
reference's readout on the same labels.

Every interval names its rule (``*_method``; :mod:`harness.stats.paired`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from harness.core.details import LogOdds
from harness.core.errors import EvalAwareError
from harness.methods import report_specs
from harness.methods.base import REGISTRY
from harness.organisms.coupling import coupling, coupling_lines
from harness.methods.logprob import REPORT_FAMILY as LOGPROB_FAMILY
from harness.runlog import RunLog
from harness.stats.metrics import LOGIT_EPS, clipped_logit as logit_clipped
from harness.stats.summaries import rank_values as _ranks, ranking_scale
from harness.organisms.verdicts import decide, pair_index, role_of
from harness.stats.decision import Rule
from harness.stats.paired import mean_with_ci, paired_auroc, within_pair_differences

#: Scores are clipped to [EPS, 1 - EPS] before the logit (where a record has no exact log-odds).
EPS = LOGIT_EPS
CI_NOTE = "95%, whole categories resampled (the same resamples for every model); each interval's rule in its row"
#: What a ``within variant`` row must say beside its verdict.
WITHIN_VARIANT_CAVEAT = "selected on the gate, which the cue can move; compare with the plain row"
#: The plain monitor row's label where the split rows (position 0 / later) exist.
MONITOR_ALL = "monitor (all positions, incl. 0)"


@dataclass(frozen=True)
class Model:
    """One model of a validate run: its sub-run directory name, the model, and its kind (``base``
    for the base model; an organism's card kind otherwise)."""

    name: str
    model: str
    kind: str
    card_sha256: str | None = None
    group: str = ""  # the recipe without its seed (a digest): builds of one group are seeds of one row

    @property
    def role(self) -> str:
        return "base" if self.kind == "base" else role_of(self.kind)

    @property
    def label(self) -> str:
        return self.name if self.kind in ("base", self.name) else f"{self.name} ({self.kind})"


# --- records -------------------------------------------------------------------------------------

Recs = Mapping[str, Mapping[str, Mapping[str, Any]]]  # model name -> sample id -> record


def scored_pairs(recs: Recs, pairs: Mapping[str, str]) -> list[str]:
    """The sample ids of the pairs whose two sides are scored by every model in `recs`: a pair
    with one side unscored (by any model) leaves whole, so AUROCs and within-pair differences of
    every model are over the same pairs and no sample stays without its partner."""
    names = list(recs)
    first = recs[names[0]] if names else {}
    ok = [i for i in first if all(i in recs[n] and recs[n][i].get("score") is not None for n in names)]
    sides: dict[str, int] = {}
    for i in ok:
        sides[pairs.get(i, i)] = sides.get(pairs.get(i, i), 0) + 1
    return [i for i in ok if sides[pairs.get(i, i)] == 2]


def scored_variants(rec: Mapping[str, Any]) -> frozenset[str] | None:
    """The prompt variants whose votes make a record's score: votes not withheld by the label-mass
    gate where the score is the label probability, else votes with a parsed value. None for a
    record whose votes name no variant."""
    votes = (rec.get("details") or {}).get("votes") or []
    if not votes or not any("variant" in v for v in votes):
        return None
    by_label = (rec.get("details") or {}).get("score_source") == "label_probability"

    def kept(v: Mapping[str, Any]) -> bool:
        if by_label:
            return not v.get("label_withheld") and v.get("label_score") is not None
        return v.get("value") is not None and not v.get("error")

    return frozenset(str(v.get("variant")) for v in votes if kept(v))


def has_variant_gate(recs: Recs) -> bool:
    """Whether a method's records carry prompt variants and a label-mass gate (binary, probability)."""
    for by_id in recs.values():
        for r in by_id.values():
            d = r.get("details") or {}
            if "min_label_mass" in d and scored_variants(r) is not None:
                return True
    return False


def same_variant_ids(recs: Recs, ids: Sequence[str], pairs: Mapping[str, str]) -> list[str]:
    """Of `ids` (whole pairs), those of the pairs whose two sides were scored on the same variants
    in every model of `recs` (pass the models of one comparison only: :func:`sensitivity`)."""
    sides: dict[str, list[str]] = {}
    for i in ids:
        sides.setdefault(pairs.get(i, i), []).append(i)
    keep = set()
    for p, members in sides.items():
        if len(members) == 2 and all(
                scored_variants(by_id[members[0]]) == scored_variants(by_id[members[1]])
                and scored_variants(by_id[members[0]]) for by_id in recs.values()):
            keep.add(p)
    return [i for i in ids if pairs.get(i, i) in keep]


def clipped_logit(rec: Mapping[str, Any]) -> tuple[float | None, bool]:
    """(logit of a record's score clipped to [EPS, 1 - EPS], whether it was clipped); (None,
    False) for an unscored record. The exact log-odds, where a record has one, is
    :meth:`LogOdds.value`; :func:`spillover` uses one or the other for all records."""
    s = rec.get("score")
    if s is None:
        return None, False
    return logit_clipped(float(s))


def logprob_methods(methods: Sequence[str]) -> list[str]:
    """The methods among `methods` whose score is a logprob P(eval) (the logprob report family)."""
    out = []
    for m in methods:
        cls = REGISTRY.get(m)
        if cls is not None and getattr(getattr(cls, "report", None), "family", None) is LOGPROB_FAMILY:
            out.append(m)
    return out


# --- rows ----------------------------------------------------------------------------------------

def _excludes_half(ci: Sequence[float] | None) -> bool:
    return bool(ci) and (ci[0] > 0.5 or ci[1] < 0.5)  # type: ignore[index]


def _pair_diffs(row: dict[str, Any], suffix: str, pid: Sequence[str], y: Sequence[int],
                scores: tuple[Sequence[float], Sequence[float]], cat_of: Mapping[str, Any], n_boot: int,
                seed: int) -> list[str]:
    """Each model's mean within-pair difference (cue - no cue) and the double difference (organism -
    reference, per pair) of `scores` (reference's, organism's) into `row` as ``pair_diff_reference``,
    ``pair_diff_organism``, ``double_diff`` + `suffix`; the pairs both models scored."""
    diffs = {}
    for name, s in zip(("reference", "organism"), scores):
        p, d = within_pair_differences(pid, y, s)
        diffs[name] = dict(zip(p, d))
        row[f"pair_diff_{name}{suffix}"] = mean_with_ci(d, [cat_of[q] for q in p], n_boot, seed)
    both = [p for p in diffs["organism"] if p in diffs["reference"]]
    dd = [diffs["organism"][p] - diffs["reference"][p] for p in both]
    row[f"double_diff{suffix}"] = mean_with_ci(dd, [cat_of[p] for p in both], n_boot, seed)
    return both


def compare(recs: Recs, ids: Sequence[str], pairs: Mapping[str, str], reference: str, organism: str,
            base: str | None, n_boot: int, seed: int, scale: str | None = None) -> dict[str, Any]:
    """One row on the scored pairs `ids`: AUROC of reference (``auroc_a``) and organism
    (``auroc_b``) with the difference b - a (the same resamples), each model's mean within-pair
    difference of the score, the double difference (organism - reference, per pair) and, where the
    base is not the reference, the base's AUROC on the same pairs. The AUROCs rank by `scale`
    (``log-odds`` or ``score``; None: :func:`ranking_scale` over the models of the row); on the
    log-odds scale the within-pair and double differences of the exact log-odds (nats) come beside
    the score's (``*_log_odds``)."""
    ref, org = recs[reference], recs[organism]
    shown = [base] if base is not None and base not in (reference, organism) else []
    if scale is None:
        scale = ranking_scale(recs, ids, [reference, organism, *shown])
    y = [1 if ref[i]["label"] == "eval" else 0 for i in ids]
    cats = [ref[i].get("category") for i in ids]
    ranked = _ranks(ref, ids, scale), _ranks(org, ids, scale)
    row = paired_auroc(y, *ranked, cats, n_boot, seed)
    row["scale"] = scale
    # the same score on every sample, bitwise: the readout cannot see this organism at all (a frozen
    # probe whose layer lies below every block the organism's training changed reads the same
    # activations); its row gets no verdict
    row["identical"] = bool(ids) and all(ref[i]["score"] == org[i]["score"]
                                         and LogOdds.value(ref[i]) == LogOdds.value(org[i]) for i in ids)
    pid = [pairs.get(i, i) for i in ids]
    cat_of = dict(zip(pid, cats))
    scores = [ref[i]["score"] for i in ids], [org[i]["score"] for i in ids]
    both = _pair_diffs(row, "", pid, y, scores, cat_of, n_boot, seed)
    if scale == "log-odds":  # beside the score's: a P(eval) that rounds to 1.0 on both sides of a
        # pair has a score difference of 0 where its exact log-odds still move
        _pair_diffs(row, "_log_odds", pid, y, ranked, cat_of, n_boot, seed)
    row["n_pairs"] = len(both)
    for name in shown:
        b = paired_auroc(y, _ranks(recs[name], ids, scale), ranked[1], cats, n_boot, seed)
        row.update(auroc_base=b["auroc_a"], auroc_base_ci=b["auroc_a_ci"], auroc_base_ci_method=b["auroc_a_ci_method"])
    row["reads_cue_text"] = _excludes_half(row.get("auroc_a_ci")) or _excludes_half(row.get("auroc_base_ci"))
    return row


def spillover(recs: Recs, reference: str, organism: str, n_boot: int, seed: int) -> dict[str, Any]:
    """Mean log-odds on the no-cue prompts scored by both models (``mean_reference``,
    ``mean_organism``) and of the per-sample difference organism - reference (``diff``), with
    category-cluster intervals, on one scale (``scale``): the exact log-odds where every such
    record of both models has one, else the clipped logit of every score; ``no_log_odds``
    counts the records without an exact log-odds (those that made it fall back), ``clipped``
    the scores clipped (on the logit scale). One build against one (the reference's first): a
    secondary row with no builds' variance to add, clustered on category only (likely too narrow
    where templates vary); the kind's pooled spillover, clustered on category and template with the
    builds' part in its interval, is the verdict block's (:func:`harness.organisms.verdicts.spillover`)."""
    ref, org = recs[reference], recs[organism]
    deploy = [i for i in ref if ref[i].get("label") == "deploy"]
    ids = [i for i in deploy if i in org and ref[i].get("score") is not None and org[i].get("score") is not None]
    cats = [ref[i].get("category") for i in ids]
    exact = {"reference": [LogOdds.value(ref[i]) for i in ids], "organism": [LogOdds.value(org[i]) for i in ids]}
    missing = {k: sum(v is None for v in vals) for k, vals in exact.items()}
    clipped = {"reference": 0, "organism": 0}
    if ids and not any(missing.values()):
        scale, lo_r, lo_o = "log-odds", exact["reference"], exact["organism"]
    else:
        scale, vals = "clipped logit", {}
        for k, by_id in (("reference", ref), ("organism", org)):
            got = [clipped_logit(by_id[i]) for i in ids]
            vals[k] = [v for v, _ in got]
            clipped[k] = sum(c for _, c in got)
        lo_r, lo_o = vals["reference"], vals["organism"]
    return {"n": len(ids), "n_unscored": len(deploy) - len(ids), "scale": scale, "no_log_odds": missing,
            "clipped": clipped, "eps": EPS,
            "mean_reference": mean_with_ci(lo_r, cats, n_boot, seed),
            "mean_organism": mean_with_ci(lo_o, cats, n_boot, seed),
            "diff": mean_with_ci([b - a for a, b in zip(lo_r, lo_o)], cats, n_boot, seed)}


def measured_kl(organism_dir: str, card: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The first-token KL on no-cue prompts of `organism measure` for this organism: its JSON next
    to the directory (``DIR.measure24.json``, else ``DIR.measure*.json``), else the card's
    ``measure`` block; None where neither has it."""
    d = Path(organism_dir.rstrip("/"))
    found = [d.parent / f"{d.name}.measure24.json", *sorted(d.parent.glob(f"{d.name}.measure*.json"))]
    for p in found:
        if p.is_file():
            try:
                kl = json.loads(p.read_text()).get("first_token_kl_no_cue")
            except (json.JSONDecodeError, AttributeError) as e:
                raise EvalAwareError(f"{p}: not an `organism measure` JSON ({e})") from None
            if kl:
                return {**kl, "source": str(p)}
    kl = ((card or {}).get("measure") or {}).get("first_token_kl_no_cue")
    return {**kl, "source": "card"} if kl else None


def row_groups(organisms: Sequence[Model]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """({row label: the sub-runs of its builds}, {row label: role}): organisms of one kind and one
    recipe (seed aside) are the builds of one row; a kind with several recipes gets a row per
    recipe, labelled kind@digest."""
    groups: dict[tuple[str, str], list[str]] = {}
    for o in organisms:
        groups.setdefault((o.kind, o.group), []).append(o.name)
    per_kind: dict[str, int] = {}
    for kind, _ in groups:
        per_kind[kind] = per_kind.get(kind, 0) + 1
    kinds, roles = {}, {}
    for (kind, group), names in groups.items():
        label = kind if per_kind[kind] == 1 else f"{kind}@{group[:6]}"
        kinds[label], roles[label] = names, role_of(kind)
    return kinds, roles


# --- the table -----------------------------------------------------------------------------------

def method_records(store: RunLog, method: str, ids: Collection[str] | None = None) -> dict[str, dict[str, Any]]:
    """One method's records in `store` by sample id (of the samples in `ids`, when given)."""
    return {r["sample_id"]: r for r in store.result_dicts(method) if ids is None or r["sample_id"] in ids}


def method_rows(m: str, recs: Recs, pairs: Mapping[str, str], organisms: Sequence[Model], reference: Model,
                base: Model | None, n_boot: int, seed: int) -> list[dict[str, Any]]:
    """One method's rows per organism: ``all`` on the pairs every model scored, and where the
    method has a variant gate ``within variant``, of those the pairs scored on the same variants
    in that comparison's models (base, reference, organism): another organism does not move it."""
    ids = scored_pairs(recs, pairs)
    n_all = len(set().union(*(set(r) for r in recs.values())))
    gated = has_variant_gate(recs)
    rows = []
    for o in organisms:
        subsets = [("all", ids)]
        if gated:
            own = list(dict.fromkeys([*([base.name] if base is not None else []), reference.name, o.name]))
            subsets.append(("within variant", same_variant_ids({n: recs[n] for n in own}, ids, pairs)))
        for subset, sel in subsets:
            row = {"method": m, "organism": o.name, "kind": o.kind, "role": o.role, "subset": subset,
                   "reference_label": reference.label,
                   **compare(recs, sel, pairs, reference.name, o.name, None if base is None else base.name,
                             n_boot, seed),
                   "n_unscored": n_all - len(ids)}
            if subset != "all":
                row["n_other_variants"] = len(ids) - len(sel)
                row["caveat"] = WITHIN_VARIANT_CAVEAT
            rows.append(row)
    return rows


def sensitivity(out: Path, methods: Sequence[str], organisms: Sequence[Model], reference: Model,
                base: Model | None, n_boot: int, seed: int,
                kl: Mapping[str, dict[str, Any] | None] | None = None, rule: Rule = Rule(),
                references: Sequence[Model] = (), ids: Collection[str] | None = None) -> dict[str, Any]:
    """The verdicts under the declared rule (``decision``: :func:`harness.organisms.verdicts.decide`,
    every readout alike) and, as secondary columns, every method's AUROC rows (per organism; plus a
    ``within variant`` row where the method has a variant gate) and the spillover of the logprob
    methods on the clipped-logit scale, from the sub-runs under `out`.

    `references`: every build of the reference (seeds of one null-sham recipe, `reference` the
    first; default: `reference` alone): the verdicts pool them all, the secondary rows compare
    with `reference`, the first build. `ids`: the samples this run asked for (its `--limit`); a
    sub-run holding more (resumed, or taken with ``--reuse``) is read on these alone.

    ``rows``: every AUROC row; ``methods``: the first organism's plain row per method (the
    one-organism view); ``spillover``: per organism and logprob method; ``coupling``: per behaviour
    method among `methods`, :func:`harness.organisms.coupling.coupling` over every model."""
    specs = report_specs()
    behaviours = [m for m in methods if not specs(m).readout]
    methods = [m for m in methods if m not in behaviours]
    refs = list(references) or [reference]
    models = [*([base] if base is not None and base.name != reference.name else []), *refs, *organisms]
    stores = {m.name: RunLog(out / m.name, create=False) for m in models}
    res: dict[str, Any] = {
        "reference": {"name": reference.name, "model": reference.model, "kind": reference.kind,
                      "card_sha256": reference.card_sha256},
        "references": [{"name": r.name, "model": r.model, "card_sha256": r.card_sha256} for r in refs],
        "base": None if base is None else {"name": base.name, "model": base.model},
        "organisms": {o.name: {"model": o.model, "kind": o.kind, "role": o.role, "card_sha256": o.card_sha256}
                      for o in organisms},
        "organism_card_sha256": organisms[0].card_sha256 if organisms else None,
        "rows": [], "methods": {}, "spillover": [], "ci": None, "coupling": {},
        "kinds": {m.name: m.kind for m in models}}
    try:
        samples = [s for s in stores[reference.name].samples() if ids is None or s.id in ids]
        pairs = {s.id: str(s.metadata.extra.get("pair", s.id)) for s in samples}
        recs_by_method = {m: {n: method_records(st, m, ids) for n, st in stores.items()} for m in methods}
        kinds, roles = row_groups(organisms)
        res["decision"] = decide(recs_by_method, pair_index(samples), [r.name for r in refs], kinds,
                                 base.name if base is not None and base.name != reference.name else None, rule,
                                 roles)
        for m in methods:
            rows = method_rows(m, recs_by_method[m], pairs, organisms, reference, base, n_boot, seed)
            res["rows"] += rows
            first = next((r for r in rows if organisms and r["organism"] == organisms[0].name
                          and r["subset"] == "all"), None)
            if first is not None:
                res["methods"][m] = first
            res["ci"] = CI_NOTE
        for b in behaviours:
            res["coupling"][b] = coupling({n: method_records(st, b, ids) for n, st in stores.items()}, recs_by_method,
                                          pair_index(samples), [m.name for m in models], n_boot, seed,
                                          res["kinds"])
        for m in logprob_methods(methods):
            recs = {n: method_records(st, m, ids) for n, st in stores.items()}
            for o in organisms:
                res["spillover"].append({"method": m, "organism": o.name, "kind": o.kind,
                                         **spillover(recs, reference.name, o.name, n_boot, seed),
                                         "first_token_kl": (kl or {}).get(o.name)})
    finally:
        for st in stores.values():
            st.close()
    return res


# --- verdicts and lines --------------------------------------------------------------------------

def fmt_ci(ci: Any) -> str:
    """An interval as printed in validate's and measure's lines ([-] without one)."""
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "[-]"


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"


def _label(r: Mapping[str, Any], split: bool) -> str:
    """A row's method as shown: the plain monitor row, beside its split rows, says it includes
    position 0 (sensitivity.json keeps ``method``)."""
    return MONITOR_ALL if split and r["method"] == "monitor" and "read" not in r else r["method"]


def _log_odds_dd(r: Mapping[str, Any]) -> str:
    lo = r.get("double_diff_log_odds") or {}
    return "" if lo.get("mean") is None else f"; log-odds {_f(lo['mean'])} {fmt_ci(lo.get('ci'))} nats"


def _first_build(table: Mapping[str, Any]) -> str:
    refs = table.get("references") or []
    return "" if len(refs) < 2 else (f"; {ref_name(table)} is the first of the reference's {len(refs)} builds "
                                     f"(the verdicts above pool all of them)")


def ref_name(table: Mapping[str, Any]) -> str:
    """The secondary rows' reference: its sub-run name (``base`` without a sham)."""
    return (table.get("reference") or {}).get("name", "base")


def sensitivity_lines(table: dict[str, Any]) -> list[str]:
    """sensitivity.md: the verdicts first, then the table, the spillover and the interval rules."""
    rows = table.get("rows") or [{**r, "method": m} for m, r in table["methods"].items()]
    ref = ref_name(table)
    split = any("read" in r for r in rows)
    out = [*(table.get("decision") or {}).get("lines", ["Verdicts: none (no decision table)"]), "",
           f"Secondary: AUROC (cue vs no cue) and the score's within-pair differences, organism vs {ref}, "
           f"on the pairs every model scored (no verdict rests on them)" + _first_build(table),
           f"| method | organism | role | pairs | n scored | AUROC {ref} | AUROC organism | difference | "
           f"within-pair diff {ref} | within-pair diff organism | double difference | AUROC base |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pr, po, dd = r.get("pair_diff_reference") or {}, r.get("pair_diff_organism") or {}, r.get("double_diff") or {}
        n = f"{r['n']} ({r['n_unscored']} unscored" + (f", scale: {r['scale']}" if r.get("scale") else "") + (
            f", {r['n_other_variants']} other variants" if "n_other_variants" in r else "") + (
            f", {r['n_no_later']} with no later position" if r.get("n_no_later") else "") + ")"
        base = f"{_f(r['auroc_base'])} {fmt_ci(r.get('auroc_base_ci'))}" if "auroc_base" in r else "-"
        out.append(f"| {_label(r, split)} | {r.get('organism', '-')} ({r.get('kind', '-')}) | {r.get('role', '-')} | "
                   f"{r.get('subset', 'all')} | {n} | {_f(r['auroc_a'])} {fmt_ci(r['auroc_a_ci'])} | "
                   f"{_f(r['auroc_b'])} {fmt_ci(r['auroc_b_ci'])} | {_f(r['diff'])} {fmt_ci(r['diff_ci'])} | "
                   f"{_f(pr.get('mean'))} {fmt_ci(pr.get('ci'))} | {_f(po.get('mean'))} {fmt_ci(po.get('ci'))} | "
                   f"{_f(dd.get('mean'))} {fmt_ci(dd.get('ci'))}{_log_odds_dd(r)} | {base} |")
    if any(r.get("subset") == "within variant" for r in rows):
        out.append(f"\nwithin variant: the pairs scored on the same variants in each comparison's models; "
                   f"{WITHIN_VARIANT_CAVEAT}.")
    spill = table.get("spillover") or []
    if spill:
        out += ["", f"Spillover: mean log-odds of P(eval) on the no-cue prompts, organism vs {ref}, one scale per "
                    f"row: the exact log-odds where every record of both has one, else the logit of every score "
                    f"clipped to [{EPS:g}, 1 - {EPS:g}] (records without exact log-odds and clipped scores counted)",
                f"| method | organism | n | scale (no exact log-odds {ref} / organism) | {ref} | organism | "
                f"organism - {ref} | clipped ({ref} / organism) | first-token KL (organism measure) |",
                "|---|---|---|---|---|---|---|---|---|"]
        for s in spill:
            k = s.get("first_token_kl")
            kls = f"{_f(k.get('mean'))} {fmt_ci(k.get('ci'))}" if k else "-"
            nl = s.get("no_log_odds") or {}
            out.append(f"| {s['method']} | {s['organism']} ({s['kind']}) | {s['n']} ({s['n_unscored']} unscored) | "
                       f"{s.get('scale', '-')} ({nl.get('reference', '-')} / {nl.get('organism', '-')}) | "
                       f"{_f(s['mean_reference']['mean'])} {fmt_ci(s['mean_reference']['ci'])} | "
                       f"{_f(s['mean_organism']['mean'])} {fmt_ci(s['mean_organism']['ci'])} | "
                       f"{_f(s['diff']['mean'])} {fmt_ci(s['diff']['ci'])} | "
                       f"{s['clipped']['reference']} / {s['clipped']['organism']} | {kls} |")
    out.append(f"\nintervals: {table['ci'] or '-'}")
    for r in rows:
        rules = {k: r.get(f"{k}_method") for k in ("auroc_a_ci", "auroc_b_ci", "diff_ci", "auroc_base_ci")}
        rules |= {k: (r.get(k) or {}).get("ci_method")
                  for k in ("pair_diff_reference", "pair_diff_organism", "double_diff", "double_diff_log_odds")}
        named = "; ".join(f"{k}: {v}" for k, v in rules.items() if v)
        if named:
            out.append(f"- {r['method']} [{r.get('organism', '-')}, {r.get('subset', 'all')}]: {named}")
    for s in spill:
        out.append(f"- spillover {s['method']} [{s['organism']}]: diff: {s['diff'].get('ci_method') or '-'}")
    for b, t in (table.get("coupling") or {}).items():
        out += [f"\nbehaviour method: {b}", *coupling_lines(t, table.get("kinds") or {})]
    return out
