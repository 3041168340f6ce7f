"""Report figures (matplotlib, Agg backend, PNG). Each function writes one file and returns it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from harness.core.atomic import save_figure  # noqa: E402

EVAL_COLOR, DEPLOY_COLOR = "#c0392b", "#2471a3"
DPI = 110


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    save_figure(fig, path, dpi=DPI)  # never through a link planted in the output directory
    plt.close(fig)
    return path


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.0f}%"


def _num(v: float | None, fmt: str) -> str:
    """`v` in format `fmt`, or "n/a" where the statistic is undefined (None or NaN)."""
    return "n/a" if v is None or v != v else format(v, fmt)


def class_bars(path: Path, method: str, models: Sequence[str],
               eval_correct: Sequence[float | None], deploy_correct: Sequence[float | None]) -> Path:
    """Share of eval samples called eval and of deploy samples called deploy, per model (the
    paper's Figures 7, 9, 10)."""
    x = np.arange(len(models))
    w = 0.38
    fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(models) + 2), 3.6))
    for off, vals, color, name in ((-w / 2, eval_correct, EVAL_COLOR, "evaluations identified"),
                                   (w / 2, deploy_correct, DEPLOY_COLOR, "deployments identified")):
        h = [0 if v is None else v for v in vals]
        bars = ax.bar(x + off, h, w, color=color, label=name)
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height() + 0.02, _pct(v), ha="center",
                    va="bottom", fontsize=8)
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xticks(x, models, rotation=15 if len(models) > 3 else 0)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("share correctly identified")
    ax.set_title(f"{method}: correctly identified samples")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1 if len(models) <= 3 else -0.18),
              ncol=2, frameon=False)
    return _save(fig, path)


def auroc_bars(path: Path, methods: Sequence[str], models: Sequence[str],
               values: Mapping[tuple[str, str], tuple[float | None, tuple[float, float] | None]],
               surface: Mapping[str, tuple[float, tuple[float, float] | None]] | None = None,
               same_prompts: Mapping[tuple[str, str], float] | None = None) -> Path:
    """AUROC per method, one bar per model, with 95% intervals (their rules: the caption).
    `surface`: per model, the best surface predictor's AUROC and interval on the run's samples
    (a dashed line and a band in the model's colour); `same_prompts`: per (method, model), the
    best surface predictor's AUROC on the samples the method scored, the value its Findings
    sentence compares with (a black tick across the bar)."""
    x = np.arange(len(methods))
    w = 0.8 / max(1, len(models))
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(methods) * max(1, len(models)) ** 0.5 + 2), 3.6))
    for j, model in enumerate(models):
        vals = [values.get((m, model), (None, None)) for m in methods]
        h = [np.nan if v[0] is None else v[0] for v in vals]
        err = np.array([[v[0] - v[1][0], v[1][1] - v[0]] if v[0] is not None and v[1] else [0, 0]
                        for v in vals]).T
        pos = x - 0.4 + w * (j + 0.5)
        ax.bar(pos, h, w, yerr=err, capsize=3, label=model, color=f"C{j}")
        if (base := (surface or {}).get(model)) is not None:
            ax.axhline(base[0], color=f"C{j}", lw=1, ls="--", label=f"{model}: best surface predictor")
            if base[1]:
                ax.axhspan(base[1][0], base[1][1], color=f"C{j}", alpha=0.12, lw=0)
        ticks = [(p, (same_prompts or {}).get((m, model))) for p, m in zip(pos, methods)]
        ticks = [(p, v) for p, v in ticks if v is not None]
        if ticks:
            ax.hlines([v for _, v in ticks], [p - w / 2 for p, _ in ticks], [p + w / 2 for p, _ in ticks],
                      color="black", lw=2, label="surface on the method's samples" if j == 0 else None)
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xticks(x, methods, rotation=20 if len(methods) > 4 else 0)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("AUROC (eval vs deploy)")
    ax.set_title("AUROC from each method's score (95% CI)")
    ax.legend(fontsize=7)
    return _save(fig, path)


def kappa_heatmap(path: Path, methods: Sequence[str], matrix: np.ndarray, title: str) -> Path:
    """Pairwise Cohen's kappa between methods (NaN = undefined or no shared decisions)."""
    n = len(methods)
    fig, ax = plt.subplots(figsize=(1.0 * n + 2.2, 0.8 * n + 1.6))
    im = ax.imshow(matrix, vmin=-1, vmax=1, cmap="RdBu_r")
    for i in range(n):
        for j in range(n):
            v = matrix[i, j]
            ax.text(j, i, "–" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=9,
                    color="white" if not np.isnan(v) and abs(v) > 0.6 else "black")
    ax.set_xticks(range(n), methods, rotation=30, ha="right")
    ax.set_yticks(range(n), methods)
    ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="Cohen's kappa")
    return _save(fig, path)


def vote_count_curve(path: Path, curves: Mapping[str, Sequence[Mapping[str, Any]]]) -> Path:
    """Kappa(binary, probability) vs number of votes, mean and 95% interval over resamples."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for model, rows in curves.items():
        n = [r["n_votes"] for r in rows]
        m = [r["kappa_mean"] for r in rows]
        ax.plot(n, m, marker="o", ms=3, label=model)
        ax.fill_between(n, [r["ci_low"] for r in rows], [r["ci_high"] for r in rows], alpha=0.2)
    ax.set_xticks(sorted({r["n_votes"] for rows in curves.values() for r in rows}))
    ax.set_xlabel("votes per sample (drawn from all answers)")
    ax.set_ylabel("Cohen's kappa, binary vs probability")
    ax.set_title("Agreement vs number of votes (mean, 95% interval)")
    ax.legend(fontsize=8)
    return _save(fig, path)


def error_vs_turns(path: Path, panels: Sequence[tuple[str, Mapping[str, Any]]]) -> Path:
    """Scatter of per-sample |truth - P(eval)| vs number of turns, trend line, r and p ("n/a",
    with ``p_missing`` as the reason where it has one, when undefined)."""
    k = len(panels)
    cols = min(k, 3)
    rows = (k + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, (title, d) in zip(axes.flat, panels):
        x, y = np.asarray(d["x"]), np.asarray(d["y"])
        ax.scatter(x + rng.uniform(-0.12, 0.12, len(x)), y, s=12, alpha=0.6, color="#555")
        if d["slope"] is not None:
            xs = np.linspace(x.min(), x.max(), 10)
            ax.plot(xs, d["intercept"] + d["slope"] * xs, color=EVAL_COLOR,
                    label=f"r = {_num(d['r'], '.2f')}, p = {_num(d['p'], '.2g')}"
                          + (f" ({d['p_missing']})" if d.get("p_missing") else ""))
            ax.legend(fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("number of turns (user messages)")
        ax.set_ylabel("|truth − P(eval)|" if not d.get("squared") else "(truth − P(eval))²")
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(title, fontsize=9)
    for ax in list(axes.flat)[k:]:
        ax.axis("off")
    return _save(fig, path)


def calibration(path: Path, panels: Sequence[tuple[str, Mapping[str, Sequence[Mapping[str, Any]]],
                                                    Mapping[str, float | None]]]) -> Path:
    """Reliability diagrams: one panel per model, one curve per scored method, each point
    labelled with its bin's sample count."""
    k = len(panels)
    cols = min(k, 3)
    rows = (k + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.8 * rows), squeeze=False)
    for ax, (title, curves, eces) in zip(axes.flat, panels):
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":")
        for method, bins in curves.items():
            if not bins:
                continue
            e = eces.get(method)
            line, = ax.plot([b["mean_p"] for b in bins], [b["frac_eval"] for b in bins], marker="o", ms=3,
                            label=f"{method} (ECE {_num(e, '.2f')})")
            for b in bins:  # each bin's sample count beside its point
                ax.annotate(str(b["n"]), (b["mean_p"], b["frac_eval"]), textcoords="offset points",
                            xytext=(3, 3), fontsize=6, color=line.get_color())
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("mean predicted P(eval) in bin")
        ax.set_ylabel("share of eval samples in bin")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[k:]:
        ax.axis("off")
    return _save(fig, path)


def dose_response(path: Path, panels: Sequence[tuple[str, str, Mapping[str, Sequence[Mapping[str, Any]]]]],
                  sanity: Mapping[str, Sequence[Mapping[str, Any]]]) -> Path:
    """Steering dose-response: one panel per (title, y label, {series: [{alpha, value, ci}]}),
    then a sanity panel of neutral-text perplexity per alpha (log scale)."""
    colors = {"vector": EVAL_COLOR, "random": "#7f8c8d", "contrast": "#e67e22"}
    n = len(panels) + 1
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False)
    for ax, (title, ylabel, series) in zip(axes[0], panels):
        for name, pts in series.items():
            pts = [p for p in pts if p.get("value") is not None]
            if not pts:
                continue
            x = np.array([p["alpha"] for p in pts], dtype=float)
            y = np.array([p["value"] for p in pts], dtype=float)
            lo = np.array([p["value"] - p["ci"][0] if p.get("ci") else 0.0 for p in pts])
            hi = np.array([p["ci"][1] - p["value"] if p.get("ci") else 0.0 for p in pts])
            ax.errorbar(x, y, yerr=[lo, hi], marker="o", capsize=3, label=name,
                        color=colors.get(name))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("alpha (x mean residual norm)")
        ax.set_ylabel(ylabel)
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=8)
    ax = axes[0][-1]
    for name, pts in sanity.items():
        pts = [p for p in pts if p.get("value") is not None]
        if pts:
            ax.plot([p["alpha"] for p in pts], [p["value"] for p in pts], marker="o", label=name,
                    color=colors.get(name))
    ax.set_yscale("log")
    ax.set_title("sanity: perplexity of a neutral text", fontsize=9)
    ax.set_xlabel("alpha (x mean residual norm)")
    ax.set_ylabel("perplexity")
    ax.legend(fontsize=8)
    return _save(fig, path)


def mean_curves(path: Path, title: str, xlabel: str, ylabel: str,
                panels: Sequence[tuple[str, Mapping[str, Mapping[str, Sequence[float]]]]]) -> Path:
    """Mean curves along the output: one panel per run, {class: {x, mean, se, n}} with a band of
    one standard error; a dotted line at 0."""
    k = len(panels)
    cols = min(k, 3)
    rows = (k + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.5 * rows), squeeze=False)
    colors = {"eval": EVAL_COLOR, "deploy": DEPLOY_COLOR}
    for ax, (name, series) in zip(axes.flat, panels):
        for cls, s in series.items():
            x, m, se = (np.asarray(s[k_], dtype=float) for k_ in ("x", "mean", "se"))
            ax.plot(x, m, marker="o", ms=3, color=colors.get(cls), label=f"{cls} (n={int(max(s['n']))})")
            ax.fill_between(x, m - se, m + se, color=colors.get(cls), alpha=0.2)
        ax.axhline(0, color="grey", lw=0.8, ls=":")
        ax.set_xlim(0, 1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{name}: {title}", fontsize=9)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[k:]:
        ax.axis("off")
    return _save(fig, path)


def forest(path: Path, title: str, rows: Sequence[Mapping[str, Any]], xlabel: str) -> Path:
    """A forest plot: one line per row (the first at the top), its estimate and 95% interval;
    `rows`: {label, mean, ci, n, parts: {name: {mean, ci}}} where `parts` (e.g. the add and
    remove directions) are drawn as smaller offset markers. A dotted line marks 0."""
    colors = ["#7f8c8d", "#d68910", "#2471a3", EVAL_COLOR]
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.6))
    y = np.arange(len(rows))[::-1].astype(float)
    names: list[str] = []
    for yi, r in zip(y, rows):
        for j, (name, p) in enumerate((r.get("parts") or {}).items()):
            if p.get("mean") is None:
                continue
            off = -0.18 * (j + 1)
            lo, hi = p["ci"] if p.get("ci") else (p["mean"], p["mean"])
            ax.errorbar([p["mean"]], [yi + off], xerr=[[max(0.0, p["mean"] - lo)], [max(0.0, hi - p["mean"])]],
                        fmt="s", ms=3,
                        capsize=2, lw=0.8, color=colors[j % len(colors)],
                        label=name if name not in names else None)
            names.append(name)
        if r.get("mean") is None:
            continue
        lo, hi = r["ci"] if r.get("ci") else (r["mean"], r["mean"])
        ax.errorbar([r["mean"]], [yi], xerr=[[max(0.0, r["mean"] - lo)], [max(0.0, hi - r["mean"])]], fmt="o",
                    ms=5, capsize=3,
                    color="black", label="all pairs" if "all pairs" not in names else None)
        names.append("all pairs")
    ax.axvline(0.0, color="grey", lw=0.8, ls=":")
    ax.set_yticks(y, [f"{r['label']} (n={r.get('n', 0)})" for r in rows])
    ax.set_ylim(-0.8, len(rows) - 0.4)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    if names:
        ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path)
