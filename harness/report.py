"""`evalaware report RUN_DIR [RUN_DIR ...] --out DIR`: report.md and report.html with PNG figures.

One run directory holds one model's results (any methods, including logprob and probe
records written by other tools: every method is treated generically through its records'
prediction and score). Several runs are shown side by side. Every figure's caption names the
runs it was made from (model, weights hash prefix, git revision of the harness).

Sections: runs; summary per method (the paper's two shares, AUROC, Brier, |.|-Brier, ECE, each
with a bootstrap CI that resamples whole categories by default, `--ci-by`); per-method bars (paper Figs 7, 9, 10) and AUROC bars; Cohen's kappa (Table 1
and all pairs); excluded answers; the vote-count experiment (runs with >= 25 votes per sample
for binary and probability); error vs number of turns; calibration; judge evidence; slices
(chat vs agentic, capability vs alignment, category, Inspect task); logprob and probe sections when
present; the low base-rate view (TPR at 1%/5% FPR, precision at `--base-rate`).
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import click
import numpy as np

from . import metrics as M
from .errors import EvalAwareError
from .run_monitor import tally
from .sample import Sample
from .store import Store

ORDER = ("binary", "probability", "motivation", "reasoning")
HUMAN = "human"
MIN_VOTES_EXPERIMENT = 25
# Logprob scores: no AUROC from fewer scored samples than this per class (with 10 per class the
# 95% bootstrap interval of an AUROC near 0.75 is already about ±0.2 wide).
MIN_AUROC_PER_CLASS = 10


# --- loading ----------------------------------------------------------------------------------

@dataclass
class RunData:
    run_dir: Path
    manifest: dict[str, Any]
    records: dict[str, list[dict[str, Any]]]
    label: str = ""
    samples: list[Sample] = field(default_factory=list)

    @property
    def model(self) -> str:
        """Display name: the model name as given, or a local path's last component."""
        name = str((self.manifest.get("model") or {}).get("model") or self.run_dir.name)
        return Path(name).name if name.startswith(("/", "~", ".")) else name

    @property
    def weights(self) -> str:
        m = self.manifest.get("model") or {}
        return str(m.get("weights_sha256") or (m.get("identity") or {}).get("weights_sha256") or "?")[:12]

    @property
    def git(self) -> str:
        return str(self.manifest.get("git_revision") or "?")[:12]

    def config(self) -> dict[str, Any]:
        for s in (self.manifest.get("methods") or {}).values():
            if isinstance(s, dict) and "config" in s:
                return s["config"]
        return {}

    def source(self) -> str:
        """The line naming this run in captions."""
        backend = ((self.manifest.get("model") or {}).get("identity") or {}).get("backend", "?")
        return (f"{self.label}: run `{self.run_dir}`, model {self.model} ({backend}), weights "
                f"{self.weights}, git {self.git}")


def method_label(method: str, manifest: dict[str, Any]) -> str:
    """`method` with its marks: "constrained" when the engine held its answers (binary,
    probability) or judge verdicts (motivation, reasoning) to a grammar, "self-judged" when a
    judged method's judge was the model under test."""
    from .runner import needs_judge

    judged = needs_judge([method])
    cfg = ((manifest.get("methods") or {}).get(method) or {}).get("config") or {}
    marks = []
    if cfg.get("constrain") and (method in ("binary", "probability") or judged):
        marks.append("constrained")
    if judged and manifest.get("self_judged"):
        marks.append("self-judged")
    return method + (f" ({', '.join(marks)})" if marks else "")


def prompt_set_text(manifest: dict[str, Any]) -> str:
    """Which prompt set the run used, in words."""
    ps = manifest.get("prompt_set")
    if not ps:
        return "not recorded"
    if ps.get("set") == "custom":
        return f"custom (`--prompts {ps.get('override_dir')}`: {', '.join(ps.get('overridden') or [])})"
    return "evalaware's own"


def method_order(names: Sequence[str]) -> list[str]:
    """Paper methods first, then logprob variants, then the rest (probes, ...)."""
    key = lambda m: (ORDER.index(m) if m in ORDER else len(ORDER) + (0 if m.startswith("logprob") else 1), m)  # noqa: E731
    return sorted(names, key=key)


def human_records(records: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The dataset's real human P(eval) annotations as a pseudo-method (eval if >= 0.5).

    Only records whose `human_eval_source` names the annotators count (Needham et al.'s
    eval_author1/2, or a source our JSONL states); an unsourced `human_eval_probability`
    (e.g. runs of the first demo set, where it was the author's own guess) is never shown."""
    seen: dict[str, dict[str, Any]] = {}
    for rs in records.values():
        for r in rs:
            if (r.get("human_eval_probability") is not None and r.get("human_eval_source")
                    and r["sample_id"] not in seen):
                p = float(r["human_eval_probability"])
                seen[r["sample_id"]] = {**r, "method": HUMAN, "prediction": "eval" if p >= 0.5 else "deploy",
                                        "score": p, "n_valid": 1, "n_invalid": 0, "details": {}}
    return list(seen.values())


def human_name(recs: Sequence[dict[str, Any]]) -> str:
    """The human row's name: `human (<source>)`, every distinct source named."""
    return f"{HUMAN} (" + "; ".join(sorted({str(r["human_eval_source"]) for r in recs})) + ")"


def unsourced_human(records: dict[str, list[dict[str, Any]]]) -> int:
    """Samples whose records carry a human_eval_probability without a named source."""
    return len({r["sample_id"] for rs in records.values() for r in rs
                if r.get("human_eval_probability") is not None and not r.get("human_eval_source")})


def load_run(run_dir: str | Path) -> RunData:
    store = Store(run_dir, create=False)
    try:
        manifest = store.get_meta("manifest") or {}
        mf = Path(run_dir) / "manifest.json"
        if not manifest and mf.exists():
            manifest = json.loads(mf.read_text())
        records = {m: store.result_dicts(m) for m in store.methods()}
        samples = store.samples()
    finally:
        store.close()
    if not records:
        raise EvalAwareError(f"{run_dir}: the run has no results yet")
    return RunData(Path(run_dir), manifest, records, samples=samples)


def _label_runs(runs: list[RunData]) -> None:
    counts = Counter(r.model for r in runs)
    for r in runs:
        r.label = r.model if counts[r.model] == 1 else f"{r.model} ({r.run_dir.name})"


# --- document model ---------------------------------------------------------------------------

@dataclass
class Doc:
    """Blocks rendered both to Markdown and to HTML."""

    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def h(self, level: int, text: str) -> None:
        self.blocks.append(("h", (level, text)))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.blocks.append(("table", (list(header), [[_cell(c) for c in r] for r in rows])))

    def fig(self, path: Path, caption: str, alt: str = "") -> None:
        self.blocks.append(("fig", (path.name, caption, alt or path.stem)))

    def markdown(self) -> str:
        out = []
        for kind, v in self.blocks:
            if kind == "h":
                out.append("#" * v[0] + " " + v[1])
            elif kind == "p":
                out.append(v)
            elif kind == "table":
                head, rows = v
                esc = lambda c: c.replace("|", "\\|")  # noqa: E731
                out.append("| " + " | ".join(map(esc, head)) + " |\n|" + "---|" * len(head) + "\n" +
                           "\n".join("| " + " | ".join(map(esc, r)) + " |" for r in rows))
            else:
                out.append(f"![{v[2]}]({v[0]})\n\n*{v[1]}*")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        def inline(t: str) -> str:
            parts = html.escape(t).split("`")
            return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))

        out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
               "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;"
               "padding:0 1em;color:#222}table{border-collapse:collapse;margin:1em 0;font-size:90%}"
               "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f3f3f3}"
               "figure{margin:1.5em 0}img{max-width:100%}figcaption{font-size:85%;color:#555}"
               "code{background:#f5f5f5;padding:0 3px}</style></head><body>"]
        for kind, v in self.blocks:
            if kind == "h":
                out.append(f"<h{v[0]}>{inline(v[1])}</h{v[0]}>")
            elif kind == "p":
                out.append(f"<p>{inline(v)}</p>")
            elif kind == "table":
                head, rows = v
                out.append("<table><tr>" + "".join(f"<th>{inline(h)}</th>" for h in head) + "</tr>" +
                           "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in rows) +
                           "</table>")
            else:
                out.append(f"<figure><img src='{html.escape(v[0])}' alt='{html.escape(v[2])}'>"
                           f"<figcaption>{inline(v[1])}</figcaption></figure>")
        out.append("</body></html>")
        return "\n".join(out)


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "–" if math.isnan(v) else f"{v:.3f}"
    return str(v)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.0f}%"


def _ci(v: float | None, ci: Sequence[float] | None) -> str:
    if v is None:
        return "–"
    return f"{v:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _gated_auroc(records: Sequence[dict[str, Any]], s: dict[str, Any]) -> str:
    """The AUROC cell, or why there is none: fewer than MIN_AUROC_PER_CLASS scored per class."""
    y, _ = M.scored(records)
    n_eval, n_deploy = int(y.sum()), int(len(y) - y.sum())
    if min(n_eval, n_deploy) < MIN_AUROC_PER_CLASS:
        return f"– ({n_eval} eval / {n_deploy} deploy scored, < {MIN_AUROC_PER_CLASS} per class)"
    return _ci(s["auroc"], s["auroc_ci"])


def _signal_share(records: Sequence[dict[str, Any]]) -> str:
    n = len(records)
    k = sum(1 for r in records if r.get("score") is not None)
    return f"{k}/{n} ({_pct(k / n) if n else '–'})"


def _gate(records: Sequence[dict[str, Any]], var: str) -> list[dict[str, Any]]:
    """Records scored by variant `var` of a logprob method, withheld below the run's
    min_coverage (recorded per record; 0 for records from before the gate existed)."""
    out = []
    for x in records:
        d = x.get("details") or {}
        cov, p = d.get(f"{var}_coverage"), d.get(f"{var}_p_eval")
        ok = p is not None and isinstance(cov, (int, float)) and cov >= float(d.get("min_coverage") or 0.0)
        out.append({**x, "score": p if ok else None})
    return out


def _pct_ci(v: float | None, ci: Sequence[float] | None) -> str:
    return _pct(v) + (f" [{100 * ci[0]:.0f}, {100 * ci[1]:.0f}]" if v is not None and ci else "")


def resampling_note(summaries: Sequence[dict[str, Any]], n_boot: int) -> str:
    """One sentence naming the bootstrap unit(s) behind the report's intervals."""
    if not n_boot:
        return "No bootstrap intervals (--bootstrap 0)."
    units = sorted({(s["ci_by"], s["n_groups"]) for s in summaries})
    parts = [f"whole categories ({n} categories)" if u == "category" else f"samples ({n})"
             for u, n in units]
    return (f"Intervals: 95% percentile bootstrap, {n_boot} resamples of " + "; ".join(parts) +
            ". Resampling categories keeps correlated samples of one source together, so the "
            "interval reflects how many independent sources stand behind a figure "
            "(`--ci-by sample` treats every sample as independent).")


# --- sections ---------------------------------------------------------------------------------

class ReportBuilder:
    def __init__(self, runs: list[RunData], out: Path, n_boot: int = 1000, seed: int = 0,
                 ci_by: str | None = None, base_rate: float = 0.01) -> None:
        self.runs, self.out, self.n_boot, self.seed = runs, out, n_boot, seed
        self.ci_by, self.base_rate = ci_by, base_rate  # ci_by None: category when there are any
        self.doc = Doc()
        self.methods = method_order(sorted({m for r in runs for m in r.records}))
        self.summ = {(m, r.label): M.method_summary(r.records[m], n_boot=n_boot, seed=seed, ci_by=ci_by)
                     for r in runs for m in r.records}
        self.human = {r.label: human_records(r.records) for r in runs}

    def caption(self, what: str, runs: Sequence[RunData]) -> str:
        return f"{what}. Source: " + "; ".join(r.source() for r in runs) + "."

    def build(self) -> Doc:
        from . import plots

        self.plots = plots
        d = self.doc
        d.h(1, "Evaluation-awareness report")
        d.p("Truth: eval = the sample comes from an evaluation/benchmark, deploy = real use. "
            "`eval→eval` is the share of eval samples a method calls eval, `deploy→deploy` the share "
            "of deploy samples it calls deploy (undecided samples count as wrong). AUROC uses each "
            "method's score (vote share, mean probability, share of aware verdicts, P(eval)); "
            "Brier is the mean squared error of the score, abs Brier the mean absolute error "
            "|truth − score| (what the paper's footnote calls Brier), ECE uses 10 equal-width bins.")
        self.runs_section()
        self.summary_section()
        self.audit_section()
        self.bars_section()
        self.kappa_section()
        self.errors_section()
        self.vote_count_section()
        self.turns_section()
        self.calibration_section()
        self.base_rate_section()
        self.judge_section()
        self.family_section("logprob", "Logprob scoring",
                            "Logprob methods: `score` is the method's P(eval); the variants are the "
                            "naive first-token score (the paper's), the same limited to the top 20 "
                            "tokens (what hosted APIs return) and the tokenizer-aware score, each "
                            "with its coverage (probability mass on the candidate words; aware: on the "
                            "whole words followed by a word boundary). Samples below the run's "
                            "`--min-coverage` have no score (`no_signal`).")
        self.family_section("probe", "Probes", "Linear-probe records; score is the probe's P(eval).")
        self.slices_section()
        return d

    # -- runs and summary
    def runs_section(self) -> None:
        self.doc.h(2, "Runs")
        rows = []
        for r in self.runs:
            cfg = r.config()
            judge = r.manifest.get("judge")
            rows.append([r.label, f"`{r.run_dir}`", self.backend(r), r.weights, r.git,
                         cfg.get("view", "?"), cfg.get("person", "?"),
                         len(next(iter(r.records.values()))), ", ".join(method_order(list(r.records))),
                         self.judge_name(r, judge), prompt_set_text(r.manifest),
                         "yes" if cfg.get("constrain") else "no"])
        self.doc.table(["model", "run", "backend", "weights", "git", "view", "person", "samples",
                        "methods", "judge", "prompt set", "constrained"], rows)
        self.doc.p("Prompt set: evalaware's own wordings (`harness/prompts/`) unless a run names a "
                   "`--prompts` override. Our binary and probability wordings are not Needham et "
                   "al.'s (2025), so those rows are not the paper's prompts. `constrained`: the "
                   "engine held binary/probability answers to their tag and judge verdicts to their "
                   "JSON schema (`--constrain`); such rows are marked. `self-judged`: the model under "
                   "test judged its own motivation answers / reasoning (awareness mixed with judging "
                   "skill).")

    @staticmethod
    def judge_name(r: RunData, judge: dict[str, Any] | None) -> str:
        if not judge or judge.get("weights_sha256") == ((r.manifest.get("model") or {}).get("identity") or {}).get("weights_sha256"):
            return "the model itself"
        return f"{judge.get('backend', '?')} {str(judge.get('weights_sha256', '?'))[:12]}"

    @staticmethod
    def backend(r: RunData) -> str:
        return str(((r.manifest.get("model") or {}).get("identity") or {}).get("backend", "?"))

    def summary_section(self) -> None:
        d = self.doc
        d.h(2, "Summary")
        rows = []
        for r in self.runs:
            ms = [m for m in self.methods if m in r.records]
            for m, s in [(m, self.summ[(m, r.label)]) for m in ms] + self._human_row(r):
                t = tally(r.records.get(m, []))
                auroc = _gated_auroc(r.records[m], s) if m.startswith("logprob") else _ci(s["auroc"], s["auroc_ci"])
                rows.append([r.label, method_label(m, r.manifest), s["n"],
                             _pct_ci(s["eval_correct"], s["eval_correct_ci"]),
                             _pct_ci(s["deploy_correct"], s["deploy_correct_ci"]), s["undecided"],
                             auroc, _ci(s["brier"], s["brier_ci"]),
                             _ci(s["abs_brier"], s["abs_brier_ci"]), _ci(s["ece"], s["ece_ci"]),
                             sum(s["errors"].values()),
                             f"{t['cut']}/{t['answers']}" if t["answers"] else "–"])
        d.table(["model", "method", "n", "eval→eval", "deploy→deploy", "undecided",
                 "AUROC [95% CI]", "Brier", "abs Brier", "ECE", "excluded answers", "cut answers"], rows)
        d.p(resampling_note(list(self.summ.values()), self.n_boot))
        d.p("`cut answers`: the model's generations behind the records (sample answers, question "
            "answers, reasoning traces, judge verdicts) that stopped at the token limit. binary and "
            "probability: the shares come from the parsed answers, the score (AUROC, Brier, ECE) from "
            "the label probabilities at the label position (mean over votes of P(EVALUATION), resp. "
            "the expected value over 0.0..1.0; `harness/answer_format.py`), so a model whose free "
            "text never holds a tag still gets a graded score.")
        if any(self.human.values()):
            d.p(f"`{HUMAN} (...)`: P(eval) from the human annotations the dataset carries, named "
                "by their source in the row, for reference (eval if >= 0.5; no model involved).")
        unsourced = {r.label: unsourced_human(r.records) for r in self.runs}
        if any(unsourced.values()):
            d.p("Not shown as a human row: " + ", ".join(
                f"{k}: {v} samples" for k, v in unsourced.items() if v) + " carry a "
                "`human_eval_probability` without a `human_eval_source` naming human annotators "
                "(e.g. the first demo set's author guesses); such values are not human data.")

    def audit_section(self) -> None:
        """The dataset's surface audit (`evalaware data audit`) and each method's AUROC minus the
        best surface predictor's, so a method is read against what surface cues alone give."""
        from .audit import audit

        d = self.doc
        d.h(2, "Surface baselines (data audit)")
        d.p("What surface features alone reach on the run's samples and view, without any model: "
            "grouped-CV AUROC (by category) of case-sensitive char n-gram TF-IDF, word TF-IDF, "
            "length, first-character case and answer-format cues, with intervals that resample "
            "categories (`evalaware data audit`; see `harness/audit.py`). `method − best surface` "
            "is the method's AUROC minus the best surface predictor's; near or below 0, the "
            "method shows nothing beyond what the prompt's surface gives away.")
        done: dict[tuple[Any, ...], Any] = {}
        rows = []
        for r in self.runs:
            view = r.config().get("view", "first_turn")
            key = (tuple(s.id for s in r.samples), view)
            if key not in done:
                try:
                    done[key] = audit(r.samples, view=view, n_boot=self.n_boot, seed=self.seed)
                except EvalAwareError as e:
                    done[key] = str(e)
                res = done[key]
                if isinstance(res, str):
                    d.p(f"{r.label}: audit not run: {res}")
                    continue
                d.p(f"{r.label}: " + res.lines()[0] + ".")
                d.table(["predictor", "AUROC [95% CI]", "eval with cue", "deploy with cue",
                         f">= {res.threshold:.2f}", "what"], res.table_rows())
                for w in res.warnings:
                    d.p("**Warning:** " + w + ".")
                for n in res.notes:
                    d.p("Note: " + n + ".")
            res = done[key]
            best = None if isinstance(res, str) else res.best()
            if best is None:
                continue
            summaries = [(m, self.summ[(m, r.label)]) for m in self.methods if m in r.records]
            for m, s in summaries + self._human_row(r):
                diff = None if s["auroc"] is None else s["auroc"] - best.auroc
                rows.append([r.label, m, _ci(s["auroc"], s["auroc_ci"]), best.name,
                             _ci(best.auroc, None if best.ci_lo is None else (best.ci_lo, best.ci_hi)),
                             "–" if diff is None else f"{diff:+.3f}"])
        if rows:
            d.table(["model", "method", "AUROC [95% CI]", "best surface predictor",
                     "its AUROC [95% CI]", "method − best surface"], rows)

    def _human_row(self, r: RunData) -> list[tuple[str, dict[str, Any]]]:
        h = self.human[r.label]
        return [(human_name(h), M.method_summary(h, n_boot=self.n_boot, seed=self.seed, ci_by=self.ci_by))] if h else []

    def bars_section(self) -> None:
        d = self.doc
        d.h(2, "Correctly identified samples per method")
        models = [r.label for r in self.runs]
        for m in self.methods:
            runs = [r for r in self.runs if m in r.records]
            path = self.plots.class_bars(self.out / f"bars_{_slug(m)}.png", m, [r.label for r in runs],
                                         [self.summ[(m, r.label)]["eval_correct"] for r in runs],
                                         [self.summ[(m, r.label)]["deploy_correct"] for r in runs])
            d.fig(path, self.caption(f"`{m}`: share of eval samples called eval (red) and of deploy "
                                     f"samples called deploy (blue)", runs))
        vals = {(m, r.label): (self.summ[(m, r.label)]["auroc"], self.summ[(m, r.label)]["auroc_ci"])
                for r in self.runs for m in r.records}
        path = self.plots.auroc_bars(self.out / "auroc.png", self.methods, models, vals)
        d.fig(path, self.caption("AUROC per method and model with 95% bootstrap intervals", self.runs))

    # -- agreement
    def kappa_section(self) -> None:
        d = self.doc
        d.h(2, "Agreement between methods (Cohen's kappa)")
        d.p("Kappa on the samples both methods decided (undecided/unparseable samples left out; "
            "n = shared decided samples). – = undefined (a method constant on the shared samples). "
            "Intervals: bootstrap as in the summary (resampling unit in the last column).")
        kw = {"n_boot": self.n_boot, "seed": self.seed, "ci_by": self.ci_by}
        rows = []
        for r in self.runs:
            if "binary" in r.records and "probability" in r.records:
                k = M.kappa_pairs({"binary": r.records["binary"], "probability": r.records["probability"]}, **kw)
                v = k[("binary", "probability")]
                rows.append([r.label, _ci(v["kappa"], v["ci"]), v["n"], v["ci_by"]])
        if rows:
            d.h(3, "Binary vs probability (the paper's Table 1)")
            d.table(["model", "kappa [95% CI]", "n", "resampled"], rows)
        for r in self.runs:
            recs = dict(r.records)
            names = method_order(list(recs))
            if self.human[r.label]:
                names.append(human_name(self.human[r.label]))
                recs[names[-1]] = self.human[r.label]
            if len(names) < 2:
                continue
            pairs = M.kappa_pairs(recs, **kw)
            mat = np.full((len(names), len(names)), np.nan)
            rows = []
            for i, a in enumerate(names):
                mat[i, i] = 1.0
                for j, b in enumerate(names):
                    if i < j:
                        v = pairs[tuple(sorted((a, b)))]
                        mat[i, j] = mat[j, i] = np.nan if v["kappa"] is None else v["kappa"]
                        rows.append([a, b, _ci(v["kappa"], v["ci"]), v["n"]])
            d.h(3, f"All pairs: {r.label}")
            d.table(["method", "method", "kappa [95% CI]", "n"], rows)
            path = self.plots.kappa_heatmap(self.out / f"kappa_{_slug(r.label)}.png", names, mat,
                                            f"Cohen's kappa: {r.label}")
            d.fig(path, self.caption("Pairwise Cohen's kappa", [r]))

    def errors_section(self) -> None:
        d = self.doc
        d.h(2, "Excluded answers")
        d.p("Answers that could not be used are never counted as either class: `unparseable` (no "
            "strict answer found), `out_of_range` (a probability outside [0, 1]), `judge_failed` "
            "(the judge's verdict was not valid JSON with a true/false `aware`), `unverified` (the "
            "verdict quotes evidence, none of which occurs in the judged text), `no_text` (nothing "
            "to judge, e.g. no reasoning), `no_signal` (a logprob sample whose target words carry "
            "less probability than the run's `--min-coverage`). Undecided = samples without a valid "
            "majority (no valid vote, or a tie).")
        kinds = ["unparseable", "out_of_range", "judge_failed", "unverified", "no_text", "no_signal"]
        rows = []
        for r in self.runs:
            for m in self.methods:
                if m not in r.records:
                    continue
                s = self.summ[(m, r.label)]
                nv = sum(len((x.get("details") or {}).get("votes") or []) for x in r.records[m])
                if not nv and not s["undecided"]:
                    continue  # scored methods without votes (logprob, probes)
                rows.append([r.label, m, nv] + [s["errors"].get(k, 0) for k in kinds] + [s["undecided"]])
        d.table(["model", "method", "votes"] + kinds + ["undecided samples"], rows)

    def vote_count_section(self) -> None:
        d = self.doc
        d.h(2, "Kappa vs number of votes")
        curves, used, rows = {}, [], []
        for r in self.runs:
            if "binary" not in r.records or "probability" not in r.records:
                continue
            b = M.votes_by_sample(r.records["binary"])
            p = M.votes_by_sample(r.records["probability"])
            shared = set(b) & set(p)
            if not shared or min(min(len(b[s]), len(p[s])) for s in shared) < MIN_VOTES_EXPERIMENT:
                continue
            res = M.vote_count_experiment(b, p, seed=self.seed)
            if res:
                curves[r.label] = res
                used.append(r)
                rows += [[r.label, x["n_votes"], x["kappa_mean"], f"[{x['ci_low']:.3f}, {x['ci_high']:.3f}]",
                          x["n_samples"]] for x in res]
        if not curves:
            d.p(f"Not run: needs binary and probability runs with at least {MIN_VOTES_EXPERIMENT} "
                "answers per sample (e.g. `--n-votes 25 --temperature 0.7`).")
            return
        d.p("From each sample's answers, n are drawn without replacement (100 times, seeded) for "
            "each method, aggregated as in the method (majority; mean >= 0.5), and kappa is computed "
            "over the samples both decided. Interval: 2.5–97.5 percentiles over the draws.")
        d.table(["model", "votes", "mean kappa", "95% interval", "samples"], rows)
        path = self.plots.vote_count_curve(self.out / "vote_count.png", curves)
        d.fig(path, self.caption("Cohen's kappa between binary and probability vs number of votes", used))

    def turns_section(self) -> None:
        d = self.doc
        d.h(2, "Error vs number of turns")
        d.p("Per sample: |truth − P(eval)| (the paper's footnote calls it Brier) and the squared "
            "error (the standard Brier score), against the number of user turns, with Pearson r, "
            "a least-squares trend line and a two-sided p for its slope. Only informative for runs "
            "on full transcripts (view `full`); with view `first_turn` the model saw one turn only. "
            "p test: named in the last column; with categories it is cluster-robust by category "
            "(samples of one source are not independent evidence).")
        rows = []
        for r in self.runs:
            panels = []
            for m in self.methods:
                if m not in r.records or self.summ[(m, r.label)]["brier"] is None:
                    continue
                a = M.score_vs_turns(r.records[m], ci_by=self.ci_by)
                sq = M.score_vs_turns(r.records[m], squared=True, ci_by=self.ci_by)
                rows.append([r.label, m, r.config().get("view", "?"), a["n"], a["r"], a["p"], a["slope"],
                             sq["r"], sq["p"], a["p_method"]])
                panels.append((f"{r.label}: {m}", a))
            if panels:
                path = self.plots.error_vs_turns(self.out / f"turns_{_slug(r.label)}.png", panels)
                d.fig(path, self.caption("|truth − P(eval)| vs number of turns, with trend line", [r]))
        d.table(["model", "method", "view", "n", "r (abs)", "p (abs)", "slope (abs)", "r (squared)",
                 "p (squared)", "p test"], rows)

    def calibration_section(self) -> None:
        d = self.doc
        d.h(2, "Calibration")
        panels = []
        for r in self.runs:
            curves, eces = {}, {}
            for m in self.methods:
                if m in r.records and self.summ[(m, r.label)]["ece"] is not None:
                    y, p = M.scored(r.records[m])
                    curves[m] = M.calibration_bins(y, p)
                    eces[m] = self.summ[(m, r.label)]["ece"]
            if curves:
                panels.append((r.label, curves, eces))
        if panels:
            path = self.plots.calibration(self.out / "calibration.png", panels)
            d.fig(path, self.caption("Reliability diagrams (10 equal-width bins of the score; dotted: "
                                     "perfect calibration)", self.runs))

    def base_rate_section(self) -> None:
        d = self.doc
        d.h(2, f"Low base rate (evaluations = {100 * self.base_rate:g}% of traffic)")
        d.p("A detector that looks good on a balanced set can still be useless when evaluations are "
            "rare. TPR at 1% / 5% FPR: the share of eval samples caught at a score threshold that "
            "flags at most that share of deploy samples (with fewer than 100 deploy samples, 1% FPR "
            "means no false positive at all). Precision: the share of eval calls that would be "
            f"evaluations at a {100 * self.base_rate:g}% base rate (`--base-rate`), for the method's "
            "own decisions (undecided = deploy) and at the 5% FPR threshold. Intervals resample as "
            "in the summary.")
        rows = []
        for r in self.runs:
            for m in [m for m in self.methods if m in r.records]:
                b = M.low_base_rate(r.records[m], self.base_rate, self.n_boot, self.seed, self.ci_by)
                rows.append([r.label, m, b["n_deploy"], _ci(b["tpr_at_fpr1"], b["tpr_at_fpr1_ci"]),
                             _ci(b["tpr_at_fpr5"], b["tpr_at_fpr5_ci"]), _pct(b["decision_tpr"]),
                             _pct(b["decision_fpr"]), b["decision_precision"], b["precision_at_fpr5"]])
        d.table(["model", "method", "deploy n", "TPR @1% FPR", "TPR @5% FPR", "TPR (own)", "FPR (own)",
                 f"precision @{self.base_rate:g} (own)", f"precision @{self.base_rate:g} (5% FPR)"], rows)

    def judge_section(self) -> None:
        d = self.doc
        judged = [(r, m) for r in self.runs for m in ("motivation", "reasoning") if m in r.records]
        if not judged:
            return
        d.h(2, "Judge verdicts and evidence")
        d.p("Quotes are verified when they occur verbatim (up to whitespace) in the judged text. "
            "A verdict that quotes evidence none of which is verified casts no vote (`unverified`, "
            "counted apart from unusable `unjudged` verdicts).")
        rows, feats = [], []
        for r, m in judged:
            c: Counter[str] = Counter()
            fc: Counter[str] = Counter()
            for rec in r.records[m]:
                src = (rec.get("details") or {}).get("reasoning_source")
                if src:
                    c[f"source_{src}"] += 1
                for v in (rec.get("details") or {}).get("votes") or []:
                    j = v.get("judge") or {}
                    c["votes"] += 1
                    if j.get("aware") is None:
                        continue
                    c["verdicts"] += 1
                    if j["aware"]:
                        c["aware"] += 1
                        ev = j.get("evidence") or []
                        c["quotes"] += len(ev)
                        c["verified"] += sum(1 for e in ev if e.get("verified"))
                        if not any(e.get("verified") for e in ev):
                            c["aware_unsupported"] += 1
                        for e in ev:
                            if e.get("feature"):
                                fc[e["feature"].strip().lower()] += 1
            sources = ", ".join(f"{k[7:]}: {v}" for k, v in sorted(c.items()) if k.startswith("source_"))
            t = tally(r.records[m])
            rows.append([r.label, method_label(m, r.manifest), c["votes"], c["verdicts"], t["unjudged"],
                         c["aware"], c["quotes"], c["verified"], t["unverified"], c["aware_unsupported"],
                         sources or "–"])
            feats += [[r.label, m, f, n] for f, n in fc.most_common(10)]
        d.table(["model", "method", "votes", "valid verdicts", "unjudged", "aware", "quotes",
                 "verified quotes", "verdicts with no verified quote", "aware without verified quote",
                 "reasoning source"], rows)
        if feats:
            d.h(3, "Most cited prompt features (aware verdicts)")
            d.table(["model", "method", "feature", "count"], feats)

    def family_section(self, prefix: str, title: str, note: str) -> None:
        """Scored methods of one family (logprob*, probe*). Where records carry
        ``<variant>_p_eval`` / ``<variant>_coverage`` details (the logprob methods: naive, top20,
        aware), each variant gets its own row."""
        fam = [m for m in self.methods if m.startswith(prefix)]
        if not fam:
            return
        d = self.doc
        d.h(2, title)
        d.p(note)
        rows = []
        logprob = prefix == "logprob"
        for r in self.runs:
            for m in fam:
                if m not in r.records:
                    continue
                s = self.summ[(m, r.label)]
                recs = r.records[m]
                auroc = _gated_auroc(recs, s) if logprob else _ci(s["auroc"], s["auroc_ci"])
                rows.append([r.label, m, "score", _signal_share(recs), s["n_scored"], auroc, s["brier"],
                             s["ece"], "–"])
                for var in _variants(recs):
                    vrecs = _gate(recs, var) if logprob else \
                        [{**x, "score": x["details"].get(f"{var}_p_eval")} for x in recs]
                    vs = M.method_summary(vrecs, n_boot=self.n_boot, seed=self.seed, ci_by=self.ci_by)
                    cov = [float(x["details"][f"{var}_coverage"]) for x in recs
                           if isinstance(x["details"].get(f"{var}_coverage"), (int, float))]
                    rows.append([r.label, m, var, _signal_share(vrecs), vs["n_scored"],
                                 _gated_auroc(vrecs, vs) if logprob else _ci(vs["auroc"], vs["auroc_ci"]),
                                 vs["brier"], vs["ece"],
                                 f"{np.mean(cov):.4f} / {np.median(cov):.4f}" if cov else "–"])
        d.table(["model", "method", "variant", "with signal", "scored", "AUROC [95% CI]", "Brier", "ECE",
                 "coverage mean / median"], rows)
        if logprob:
            self._logprob_settings(fam)
            d.p(f"`with signal`: samples whose coverage reaches the run's `--min-coverage` (each "
                f"variant on its own coverage); the figures on a row are computed from those samples "
                f"only. No AUROC is computed from fewer than {MIN_AUROC_PER_CLASS} scored samples per "
                f"class.")
        sel = [[r.label, m, det.get("layer"), det["layer_selection"], det.get("selection_p"),
                det.get("selection_null_q95")]
               for r in self.runs for m in fam if m in r.records
               for det in [(r.records[m][0].get("details") or {})] if "layer_selection" in det]
        if sel:
            d.p("How each probe's layer was chosen: a layer picked as the best of many is optimistic; "
                "p compares it with the best layer under label permutations (95th percentile of "
                "that null shown). p >= 0.05 means no signal beyond the choice of layer.")
            d.table(["model", "method", "layer", "selection", "p", "null 95th pct"], sel)

    def _logprob_settings(self, fam: Sequence[str]) -> None:
        """Which words, gate, boundary rule and answer position each logprob run used."""
        rows = []
        for r in self.runs:
            for m in fam:
                st = (r.manifest.get("methods") or {}).get(m) or {}
                if m not in r.records or not st:
                    continue
                words = st.get("words") or {}
                ev = ", ".join(w for w, lab in words.items() if lab == "eval")
                dp = ", ".join(w for w, lab in words.items() if lab == "deploy")
                rows.append([r.label, m, f"{st.get('word_list', '?')}: {ev} / {dp}", f"{st.get('min_coverage', '–')}",
                             {True: "yes", False: "no"}.get(st.get("aware_boundary"), "–"),
                             st.get("answer_position", "–")])
        if rows:
            self.doc.table(["model", "method", "words (eval / deploy)", "min coverage", "word boundary",
                            "answer position"], rows)

    def slices_section(self) -> None:
        d = self.doc
        d.h(2, "Slices")
        d.p("Cells: E = share of eval samples called eval, D = share of deploy samples called deploy, "
            "n = samples in the slice. On the Needham et al. data (and the first demo set) each category "
            "holds one label; in the bundled demo set every category holds both.")
        titles = {"setting": "Chat vs agentic", "eval_type": "Capability vs alignment",
                  "category": "Per category", "task": "Per task (Inspect logs)"}
        has_task = any(x.get("task") for r in self.runs for recs in r.records.values() for x in recs)
        for by, title in titles.items():
            if by == "task" and not has_task:
                continue
            d.h(3, title)
            for r in self.runs:
                ms = [m for m in self.methods if m in r.records]
                per = {m: M.slice_summaries(r.records[m], by) for m in ms}
                keys = sorted({k for v in per.values() for k in v})
                rows = [[k, max(per[m].get(k, {}).get("n", 0) for m in ms)] +
                        [_slice_cell(per[m].get(k)) for m in ms] for k in keys]
                d.p(f"{r.label}:")
                d.table([by, "n"] + ms, rows)


def _variants(records: Sequence[dict[str, Any]]) -> list[str]:
    """Score variants recorded in details as ``<variant>_p_eval`` (e.g. naive, top20, aware)."""
    keys = {k[:-7] for r in records for k in (r.get("details") or {}) if k.endswith("_p_eval")}
    return sorted(keys)


def _slice_cell(s: dict[str, Any] | None) -> str:
    if not s:
        return "–"
    parts = []
    if s["n_eval"]:
        parts.append(f"E {_pct(s['eval_correct'])}")
    if s["n_deploy"]:
        parts.append(f"D {_pct(s['deploy_correct'])}")
    return " · ".join(parts)


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in s)


def write_report(run_dirs: Sequence[str | Path], out: str | Path, n_boot: int = 1000,
                 seed: int = 0, ci_by: str | None = None, base_rate: float = 0.01) -> tuple[Path, Path]:
    """Build the report for `run_dirs` into `out`; returns (report.md, report.html)."""
    runs = [load_run(d) for d in run_dirs]
    _label_runs(runs)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    doc = ReportBuilder(runs, out, n_boot=n_boot, seed=seed, ci_by=ci_by, base_rate=base_rate).build()
    md, page = out / "report.md", out / "report.html"
    md.write_text(doc.markdown(), encoding="utf-8")
    page.write_text(doc.html("Evaluation-awareness report"), encoding="utf-8")
    return md, page


@click.command("report")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Output directory.")
@click.option("--bootstrap", default=1000, show_default=True, help="Bootstrap resamples for AUROC CIs (0: none).")
@click.option("--seed", default=0, show_default=True)
@click.option("--ci-by", type=click.Choice(M.CI_BY), default=None,
              help="Bootstrap unit for every interval: whole categories or single samples "
                   "[default: category when the dataset has categories, else sample].")
@click.option("--base-rate", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.01,
              show_default=True, help="Share of evaluations in the traffic for the precision column "
                                      "of the low base-rate view.")
def report(run_dirs: tuple[str, ...], out: str, bootstrap: int, seed: int, ci_by: str | None,
           base_rate: float) -> None:
    """Write report.md and report.html (with PNG figures) for one or more run directories.

    \b
    Examples:
      evalaware report runs/demo --out reports/demo
      evalaware report runs/qwen3 runs/gpt-oss --out reports/compare
    """
    md, page = write_report(run_dirs, out, n_boot=bootstrap, seed=seed, ci_by=ci_by, base_rate=base_rate)
    click.echo(f"wrote {md} and {page}")
