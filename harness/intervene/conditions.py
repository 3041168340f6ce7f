"""`evalaware intervene`: insert an awareness sentence, or its placebo twin, into the model's own
output and let it continue (after Schoen et al. 2025; a 2026 study of 8 open reasoning models
found effects no larger than placebo).

Source: per sample, the output a run already holds (its logged ``model_calls``): the
``<think>``-elicited trace of the ``reasoning`` method where there is one (``--trace auto``), else
the model's answer. Insertion point (``--at``): the output's start, the sentence boundary nearest
the middle of the trace (of the answer, without a trace) or its end (before ``</think>`` in an
elicited trace), all boundaries of :func:`harness.methods.sentences.sentence_cuts`.

Conditions, one run directory each under ``RUN/intervene/<at>_pair<k>/``:

- ``none``: the output up to the point, then the model continues (the matched no-insertion
  control: it is regenerated from the same point, so greedy decoding gives the original back);
- ``awareness``: the same, with awareness sentence k inserted at the point;
- ``placebo``: the same, with its placebo twin (same pair file: :mod:`harness.methods.sentences`).

Every condition continues with the same budget: the run's answer tokens minus the point (at
least :data:`MIN_CONTINUATION`), the inserted sentence not counted. Each is an ordinary, cached
run directory: the continuations go through the content-addressed
call cache, per-sample outcomes are committed per batch to the ``interventions`` table, so an
interrupted `intervene` resumes with no call repeated. Outcomes per sample and condition:
``changed`` (the final answer differs from the source's: the text after the reasoning where the
output has any, else the text after the point), the monitor read along the continuation
(:func:`harness.methods.monitor.monitor_curves` at the boundaries after the insertion: ``peak``,
``mean_delta``), and the score of every graded method asked for (``--methods``: the intervened
answer becomes the transcript's assistant message, view ``full``; e.g. P(eval) of
``probability``, ``logprob_question``), each with the settings the source run recorded for that
method (person, votes, gates, ...; a method the source run lacks: its first method's), stored
as that condition's records. The summary pairs
conditions by sample: awareness − none, placebo − none and awareness − placebo of each outcome,
mean with a cluster-bootstrap interval (by category; :func:`harness.stats.paired.mean_with_ci`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from harness.backends.base import Backend, GenerationRequest, _remove_all
from harness.backends.cache import CachedBackend
from harness.backends.recorded import check_reopened
from harness.core.atomic import write_text
from harness.core.errors import EvalAwareError
from harness.core.reasoning import reasoning_ended, split_reasoning
from harness.core.records import ModelCall
from harness.core.sample import Message, Sample, sample_view
from harness.methods import MethodConfig
from harness.methods.monitor import encode, monitor_curves, output_ids
from harness.methods.sentences import SentencePairs, joiner, load_pairs, sentence_cuts, token_pieces
from harness.run.loop import chunks, run_methods
from harness.runlog import RunLog
from harness.runlog.tables import TableSpec
from harness.stats.paired import mean_with_ci, rate_with_ci

CONDITIONS = ("none", "awareness", "placebo")
POINTS = ("start", "middle", "end")
TRACES = ("auto", "answer", "reasoning")
GRADED = ("probability", "binary", "logprob_question", "logprob")
PLAN_FILE = "intervene.json"
SUMMARY_FILE = "summary.json"
INTERVENTIONS = TableSpec("interventions", (("sample_id", "TEXT"), ("outcome", "TEXT")), ("sample_id",))
CONTRASTS = (("awareness", "none"), ("placebo", "none"), ("awareness", "placebo"))
MIN_CONTINUATION = 32  # tokens a continuation may take at least (an output cut at the limit, --at end)


@dataclass(frozen=True)
class Source:
    """One sample's output as the run logged it: prompt and output ids (without trailing special
    tokens), `elicited`: the prompt pre-fills ``<think>``; `span`: where the trace ends."""

    sample: Sample
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    elicited: bool
    span: int


def think_end(tokenizer: Any, ids: Sequence[int]) -> int | None:
    """Index of the token that holds ``</think>``, or None."""
    text = ""
    for k, piece in enumerate(token_pieces(tokenizer, ids)):
        text += piece
        if "</think>" in text:
            return k
    return None


def read_sources(store: RunLog, backend: Backend, trace: str) -> tuple[str, list[Source]]:
    """The run's samples with the output to intervene in; which trace (`answer` or `reasoning`)."""
    if trace not in TRACES:
        raise EvalAwareError(f"--trace {trace!r}: use one of {', '.join(TRACES)}")
    by_role: dict[str, dict[str, ModelCall]] = {"answer": {}, "elicited_reasoning": {}}
    for c in store.model_calls():
        if c.role in by_role and c.k == 0:
            by_role[c.role].setdefault(c.sample_id, c)
    if trace == "auto":
        trace = "reasoning" if by_role["elicited_reasoning"] else "answer"
    calls = by_role["elicited_reasoning" if trace == "reasoning" else "answer"]
    if not calls:
        raise EvalAwareError(f"{store.run_dir}: the run logged no {trace} outputs to intervene in"
                             + (" (run the reasoning method first)" if trace == "reasoning" else ""))
    tok = backend.tokenizer
    out = []
    for s in store.samples():
        c = calls.get(s.id)
        if c is None:
            continue
        ids = tuple(output_ids(backend, c.output_ids))
        end = think_end(tok, ids)
        span = end if end is not None else len(ids)
        out.append(Source(s, tuple(c.prompt_ids), ids, trace == "reasoning", span))
    return trace, out


def insertion_point(tokenizer: Any, src: Source, at: str) -> int:
    """The token position of the insertion (a sentence boundary of the trace span)."""
    if at not in POINTS:
        raise EvalAwareError(f"--at {at!r}: use one of {', '.join(POINTS)}")
    if at == "start":
        return 0
    cuts = sentence_cuts(tokenizer, src.output[:src.span])
    if at == "end":
        return cuts[-1] if cuts else 0
    return min(cuts, key=lambda c: (abs(2 * c - src.span), c))


def final_answer(tokenizer: Any, ids: Sequence[int], elicited: bool, point: int) -> str | None:
    """What `changed` compares: the text after the reasoning where there is one (an elicited
    trace, or a native ``<think>`` block), else the text after the insertion point. None when the
    reasoning never ends (no ``</think>``, no harmony ``final`` channel: cut at the token limit),
    i.e. there is no final answer to compare."""
    raw = tokenizer.decode(list(ids), skip_special_tokens=False)
    text = ("<think>" if elicited else "") + raw
    reasoning, answer = split_reasoning(text)
    if not reasoning_ended(text):
        return None
    if reasoning is None:
        answer = tokenizer.decode(list(ids[point:]), skip_special_tokens=False)
    specials = [t for t in getattr(tokenizer, "all_special_tokens", []) if t]
    return " ".join(_remove_all(answer, specials).split())


def _configs(store: RunLog) -> dict[str, MethodConfig]:
    """{method: the settings the source run recorded for it}: methods run by separate commands
    into one run directory may differ. Options a method records in no form keep the source run's
    shared values (the union of the methods' ``config`` blocks, the first method's winning)."""
    recorded = {m: store.get_meta(f"settings/{m}") or {} for m in store.methods()}
    shared: dict[str, Any] = {}
    for st in recorded.values():
        for k, v in (st.get("config") or {}).items():
            if k in _FIELDS:
                shared.setdefault(k, v)
    return {m: MethodConfig(**{**shared, **_recorded_options(st)}) for m, st in recorded.items() if st}


_FIELDS = set(MethodConfig.__dataclass_fields__)


def _recorded_options(settings: dict[str, Any]) -> dict[str, Any]:
    """The options in one method's recorded settings: its ``config`` block (view, person, token
    limits, sampling), the options recorded at the top level (the logprob methods' gates,
    binary/probability's label mass) and the target words (recorded as the words themselves:
    the named list they are, else an ``eval=...;deploy=...`` list of them)."""
    out = {k: v for k, v in (settings.get("config") or {}).items() if k in _FIELDS}
    out.update({k: v for k, v in settings.items()
                if k in _FIELDS and k != "words" and not isinstance(v, (dict, list))})
    words = settings.get("words")
    if isinstance(words, dict) and words:
        named = settings.get("word_list")
        out["words"] = named if isinstance(named, str) and named != "custom" else ";".join(
            f"{label}=" + ",".join(w for w, l in words.items() if l == label) for label in ("eval", "deploy"))
    return out


def _method_groups(methods: Sequence[str], own: dict[str, MethodConfig], shared: MethodConfig
                   ) -> list[tuple[MethodConfig, list[str]]]:
    """The graded methods grouped by the config each is re-run with: its own recorded one (view
    ``full``: the intervened answer is the transcript's last message), else `shared`'s."""
    groups: dict[MethodConfig, list[str]] = {}
    for m in methods:
        groups.setdefault(replace(own.get(m, shared), view="full"), []).append(m)
    return list(groups.items())


def intervene(run_dir: str | Path, backend: Backend, insert: str = "both", at: str = "end",
              pair: int = 0, pairs: SentencePairs | None = None, methods: Sequence[str] | None = None,
              trace: str = "auto", batch_size: int = 16, n_boot: int = 1000, seed: int = 0,
              progress: bool = True, config: MethodConfig | None = None) -> dict[str, Any]:
    """Run the conditions of one insertion point into ``RUN/intervene/<at>_pair<k>/``; returns the
    summary (also written to its ``summary.json``). `methods` None: the run's graded methods."""
    if insert not in ("awareness", "placebo", "both"):
        raise EvalAwareError(f"--insert {insert!r}: use awareness, placebo or both")
    pairs = pairs or load_pairs()
    if not 0 <= pair < len(pairs):
        raise EvalAwareError(f"--pair {pair}: the sentence file has pairs 0..{len(pairs) - 1}")
    run_dir = Path(run_dir)
    src_store = RunLog(run_dir, create=False)
    try:
        trace, sources = read_sources(src_store, backend, trace)
        own = {} if config is not None else _configs(src_store)  # a given config: for every method
        # the continuations' budget, sampling and view: the source run's first method's settings
        cfg = config or next(iter(own.values()), MethodConfig())
        if methods is None:
            methods = [m for m in GRADED if m in src_store.methods()]
        identity = src_store.get_meta("model_identity")
    finally:
        src_store.close()
    want, got = (identity or {}).get("weights_sha256"), backend.identity.get("weights_sha256")
    if want and got and want != got:
        raise EvalAwareError(f"{run_dir}: the run was made with weights {want[:12]}..., the model "
                             f"given has {got[:12]}...; intervene with the run's model")
    check_reopened(identity, backend.identity, str(run_dir))
    conds = ["none"] + (["awareness", "placebo"] if insert == "both" else [insert])
    out = run_dir / "intervene" / f"{at}_pair{pair}"
    out.mkdir(parents=True, exist_ok=True)
    plan = {"run": str(run_dir), "at": at, "pair": pair, "trace": trace,
            "awareness": pairs.aware[pair], "placebo": pairs.placebo[pair],
            "sentences": {"name": pairs.name, "sha256": pairs.sha256},
            "samples": [s.sample.id for s in sources], "model_identity": backend.identity}
    old = out / PLAN_FILE
    if old.exists():
        prev = json.loads(old.read_text())
        for k in ("trace", "awareness", "placebo", "samples"):
            if prev.get(k) != plan[k]:
                raise EvalAwareError(f"{out}: made with a different {k}; use another --pair or --at")
        conds = list(dict.fromkeys(prev.get("conditions", []) + conds))
        methods = list(dict.fromkeys(prev.get("methods", []) + list(methods)))
    plan.update(conditions=conds, methods=list(methods))
    write_text(old, json.dumps(plan, indent=1, sort_keys=True))
    tok = backend.tokenizer
    points = {s.sample.id: insertion_point(tok, s, at) for s in sources}
    for cond in conds:
        if progress:
            print(f"[intervene] {at} {cond}", flush=True)
        text = {"none": None, "awareness": pairs.aware[pair], "placebo": pairs.placebo[pair]}[cond]
        _run_condition(out / cond, backend, sources, points, text, pairs, cfg, batch_size, progress)
        intervened = _intervened_samples(out / cond, sources, cfg)
        with RunLog(out / cond) as st:
            st.put_samples(intervened)
        groups = _method_groups(methods, own, cfg)
        for method_cfg, names in groups:  # each method with its own settings from the source run
            run_methods(intervened, names, backend, out / cond, config=method_cfg,
                        batch_size=batch_size, progress=progress,
                        extra_manifest={"intervention": {**plan, "condition": cond}})
        if len(groups) > 1:  # each call's manifest names its own methods: name them all
            with RunLog(out / cond, create=False) as st:
                for m in methods:
                    st.add_to_manifest("methods", m, st.get_meta(f"settings/{m}"))
    summary = summarize(out, n_boot=n_boot, seed=seed)
    write_text(out / SUMMARY_FILE, json.dumps(summary, indent=1, sort_keys=True))
    return summary


def _run_condition(cond_dir: Path, backend: Backend, sources: Sequence[Source], points: dict[str, int],
                   text: str | None, pairs: SentencePairs, cfg: MethodConfig, batch_size: int,
                   progress: bool) -> None:
    """Continue every source from its point (after `text`, if any) and store the outcomes, one
    committed batch at a time (the generations and monitor calls are in the call cache first)."""
    store = RunLog(cond_dir)
    try:
        table = store.table(INTERVENTIONS)
        done = {r[0] for r in table.select(["sample_id"])}
        cached = CachedBackend(backend, store)
        tok = backend.tokenizer
        specials = [t for t in getattr(tok, "all_special_tokens", []) if t]
        todo = [s for s in sources if s.sample.id not in done]
        bar = tqdm(total=len(sources), initial=len(sources) - len(todo), desc=cond_dir.name,
                   unit="sample", disable=not progress, dynamic_ncols=True)
        for batch in chunks(todo, batch_size):
            heads, reqs = [], []
            for s in batch:
                p = points[s.sample.id]
                head = list(s.output[:p])
                if text is not None:
                    head += encode(tok, (joiner(tok, list(s.prompt) + head) if p else "") + text)
                heads.append(head)
                budget = max(cfg.answer_tokens - p, MIN_CONTINUATION)  # the same in every condition
                reqs.append(GenerationRequest(tuple(s.prompt) + tuple(head), cfg.params(budget)))
            gens = cached.generate(reqs)
            news = [h + output_ids(backend, g.token_ids) for h, g in zip(heads, gens)]
            curves = monitor_curves(cached, [(s.prompt, n) for s, n in zip(batch, news)], pairs,
                                    start=[len(h) for h in heads])
            rows = []
            for s, h, g, n, c in zip(batch, heads, gens, news, curves):
                p = points[s.sample.id]
                # the inserted sentence is not part of what the model changed: compare the source
                # and the continuation, each after the point
                before = final_answer(tok, s.output, s.elicited, p)
                after = final_answer(tok, list(s.output[:p]) + n[len(h):], s.elicited, p)
                raw = tok.decode(n, skip_special_tokens=False)
                reasoning, answer = split_reasoning(("<think>" if s.elicited else "") + raw)
                outcome = {"point": p, "inserted": text, "head_tokens": len(h),
                           "output_ids": n, "finish_reason": g.finish_reason,
                           "text": _remove_all(answer, specials).strip(),
                           "reasoning": None if reasoning is None else _remove_all(reasoning, specials).strip(),
                           "answer_before": before, "answer_after": after,
                           "changed": None if before is None or after is None else before != after,
                           "monitor_peak": c["peak"], "monitor_mean": c["mean_delta"],
                           "monitor_positions": c["positions"], "monitor_curve": c["curve"]}
                rows.append((s.sample.id, json.dumps(outcome)))
            table.insert(rows, replace=True)
            bar.update(len(batch))
        bar.close()
    finally:
        store.close()


def outcomes(cond_dir: Path) -> dict[str, dict[str, Any]]:
    """{sample id: outcome} of one condition directory."""
    store = RunLog(cond_dir, create=False)
    try:
        return {sid: json.loads(o) for sid, o in store.table(INTERVENTIONS).select(["sample_id", "outcome"])}
    finally:
        store.close()


def _intervened_samples(cond_dir: Path, sources: Sequence[Source], cfg: MethodConfig) -> list[Sample]:
    """Each sample's view with the intervened output's answer (without its reasoning, as the
    methods show the model's own answer) as the assistant's message."""
    got = outcomes(cond_dir)
    out = []
    for s in sources:
        view = tuple(sample_view(s.sample, cfg.view))
        if view[-1].role == "assistant":
            view = view[:-1]
        out.append(replace(s.sample, messages=view + (Message("assistant", got[s.sample.id]["text"]),)))
    return out


def summarize(out: str | Path, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Per condition: the rate of changed answers and the mean of each graded outcome; per
    contrast (awareness − none, placebo − none, awareness − placebo): the mean paired difference
    per sample with a bootstrap interval resampling categories (samples, when the samples carry
    fewer than two categories)."""
    out = Path(out)
    plan = json.loads((out / PLAN_FILE).read_text())
    conds = [c for c in CONDITIONS if c in plan["conditions"] and (out / c).exists()]
    per: dict[str, dict[str, dict[str, float]]] = {}
    category: dict[str, str] = {}
    for c in conds:
        vals = {sid: {"monitor_peak": o["monitor_peak"], "monitor_mean": o["monitor_mean"],
                      **({} if o["changed"] is None else {"changed": float(o["changed"])})}
                for sid, o in outcomes(out / c).items()}
        st = RunLog(out / c, create=False)
        try:
            category.update({s.id: s.metadata.category for s in st.samples()})
            for m in plan.get("methods", []):
                for r in st.result_dicts(m):
                    if r["sample_id"] in vals and r.get("score") is not None:
                        vals[r["sample_id"]][f"{m}_score"] = float(r["score"])
        finally:
            st.close()
        per[c] = vals
    by_cat = len(set(category.values())) > 1

    def groups(ids: Sequence[str]) -> list[str] | None:
        return [category.get(i, i) for i in ids] if by_cat else None

    measures = sorted({k for v in per.values() for d in v.values() for k in d})
    summary: dict[str, Any] = {"at": plan["at"], "pair": plan["pair"], "trace": plan["trace"],
                               "awareness": plan["awareness"], "placebo": plan["placebo"],
                               "ci_by": "category" if by_cat else "sample",
                               "conditions": {}, "contrasts": {}}
    for c, vals in per.items():
        ids = sorted(vals)
        answered = [i for i in ids if "changed" in vals[i]]  # a final answer on both sides
        row: dict[str, Any] = {"n": len(ids), "changed": rate_with_ci(
            [bool(vals[i]["changed"]) for i in answered], groups(answered), n_boot, seed)}
        for m in measures:
            if m != "changed":
                have = [i for i in ids if m in vals[i]]
                row[m] = mean_with_ci([vals[i][m] for i in have], groups(have), n_boot, seed)
        summary["conditions"][c] = row
    for a, b in CONTRASTS:
        if a not in per or b not in per:
            continue
        row = {}
        for m in measures:
            ids = sorted(i for i in per[a] if i in per[b] and m in per[a][i] and m in per[b][i])
            diffs = [per[a][i][m] - per[b][i][m] for i in ids]
            row[m] = {**mean_with_ci(diffs, groups(ids), n_boot, seed,
                                     bounds=(-1.0, 1.0) if m == "changed" else None),
                      "per_sample": dict(zip(ids, diffs))}
        summary["contrasts"][f"{a}-{b}"] = row
    return summary


def summary_table(summary: dict[str, Any]) -> list[str]:
    """The summary as markdown lines: one row per condition, one per contrast."""
    def cell(d: dict[str, Any] | None, key: str = "mean") -> str:
        if not d or d.get(key) is None:
            return "–"
        ci = d.get("ci")
        return f"{d[key]:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")

    conds = summary["conditions"]
    measures = sorted({k for c in conds.values() for k in c if k not in ("n", "changed")})
    lines = [f"insertion at {summary['at']} of the {summary['trace']} (pair {summary['pair']}: "
             f"\"{summary['awareness']}\" vs \"{summary['placebo']}\")", "",
             "| condition | n | changed answers | " + " | ".join(measures) + " |",
             "|---" * (3 + len(measures)) + "|"]
    def changed(d: dict[str, Any]) -> str:  # the rate over the samples with a final answer
        if d.get("n", 0) == 0:
            return "– (no final answer: the reasoning never ends)"
        return cell(d, "rate") + f" (of {d['n']})"

    for c, d in conds.items():
        lines.append(f"| {c} | {d['n']} | {changed(d['changed'])} | "
                     + " | ".join(cell(d.get(m)) for m in measures) + " |")
    lines += ["", "| paired difference | n | changed | " + " | ".join(measures) + " |",
              "|---" * (3 + len(measures)) + "|"]
    for k, row in summary["contrasts"].items():
        n = row.get("changed", {}).get("n", 0)
        lines.append(f"| {k} | {n} | {cell(row.get('changed'))} | "
                     + " | ".join(cell(row.get(m)) for m in measures) + " |")
    return lines
