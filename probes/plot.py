"""AUROC-by-layer plot (matplotlib, Agg backend): one panel per pooling, one line per
(probe, CV scheme) with its bootstrap 95% CI band, baselines as horizontal lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.core.atomic import save_figure

_STYLE = {"grouped": "-", "lofo": "--", "random": ":"}
_COLOR = {"logreg": "tab:blue", "diffmean": "tab:orange"}
_BASE_COLOR = {"tfidf": "tab:green", "length": "tab:brown", "human": "tab:purple",
               "shuffled:logreg": "tab:gray"}


def auroc_by_layer(rows: Sequence[dict[str, Any]], out_png: str | Path, title: str = "") -> Path:
    import matplotlib  # ~0.7 s, only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    poolings = list(dict.fromkeys(r["pooling"] for r in rows))
    fig, axes = plt.subplots(1, len(poolings), figsize=(6 * len(poolings), 4.2), squeeze=False,
                             sharey=True)
    for ax, pooling in zip(axes[0], poolings):
        pr = [r for r in rows if r["pooling"] == pooling]
        for model in _COLOR:
            for scheme, ls in _STYLE.items():
                pts = sorted((r["layer"], r["auroc"], r["ci_lo"], r["ci_hi"]) for r in pr
                             if r["model"] == model and r["scheme"] == scheme
                             and r["layer"] is not None)
                if not pts:
                    continue
                x, y, lo, hi = (np.asarray(v, dtype=float) for v in zip(*pts))  # None -> NaN
                label = f"{model} / {scheme}" + (" (leaky)" if scheme == "random" else "")
                ax.plot(x, y, ls, color=_COLOR[model], label=label, lw=1.6)
                if scheme == "grouped":
                    ax.fill_between(x, lo, hi, color=_COLOR[model], alpha=0.15, lw=0)
        for r in pr:
            if r["model"] in _BASE_COLOR and r["scheme"] in ("grouped", "none") and r["auroc"] is not None:
                ax.axhline(r["auroc"], color=_BASE_COLOR[r["model"]], lw=1, ls="-.",
                           label=f"{r['model']} ({r['scheme']}) {r['auroc']:.2f}")
        ax.axhline(0.5, color="black", lw=0.6, alpha=0.5)
        ax.set_title(f"{pooling} (n={pr[0]['n'] if pr else 0})")
        ax.set_xlabel("layer (0 = embeddings)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0.0, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("out-of-fold AUROC")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out, dpi=110)  # never through a link planted in the output directory
    plt.close(fig)
    return out
