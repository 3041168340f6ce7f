"""Write a taxonomy: taxonomy.json, taxonomy.md, taxonomy.html (self-contained, PNGs inlined),
sweep.png (inertia and silhouette over k) and sizes.png (category and cluster sizes).

A result too small to cluster (``clustered: false``, :mod:`.build`) gets taxonomy.json and a
taxonomy.md / taxonomy.html with its plain statement and the features found; no plots (there is
no sweep and no cluster to draw)."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from harness.core.atomic import save_figure, write_text

MAX_FEATURES_SHOWN = 8


def plot_sweep(tax: dict[str, Any], path: Path) -> None:
    import matplotlib  # ~0.7 s, only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [p["k"] for p in tax["sweep"]]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(ks, [p["inertia"] for p in tax["sweep"]], "o-", color="tab:blue", ms=3, label="inertia")
    ax.set_xlabel("k (number of clusters)")
    ax.set_ylabel("inertia (weighted sum of squared distances)", color="tab:blue")
    ax.axvline(tax["k"], color="tab:red", ls="--", lw=1)
    sil = [(p["k"], p["silhouette"]) for p in tax["sweep"] if p["silhouette"] is not None]
    lines = ax.get_legend_handles_labels()
    if sil:
        ax2 = ax.twinx()
        ax2.plot(*zip(*sil), "s-", color="tab:orange", ms=3, label="silhouette")
        ax2.set_ylabel("silhouette (subsample)", color="tab:orange")
        l2 = ax2.get_legend_handles_labels()
        lines = (lines[0] + l2[0], lines[1] + l2[1])
    ax.legend(*lines, loc="upper right", fontsize=8)
    ax.set_title(f"k-means sweep: k = {tax['k']} ({tax['k_source']})", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)  # never through a link planted in the output directory
    plt.close(fig)


def plot_sizes(tax: dict[str, Any], path: Path) -> None:
    import matplotlib  # ~0.7 s, only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = sorted(tax["categories"], key=lambda c: (c["artifact"], -c["n_samples"], c["id"]))
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, max(3.5, 0.3 * len(cats) + 1.5)), dpi=110,
                               gridspec_kw={"width_ratios": [3, 2]})
    names = [f"{c['id']} {_short(c['name']['name'], 38)}" + (" (artifact)" if c["artifact"] else "")
             for c in cats]
    a.barh(range(len(cats)), [c["n_samples"] for c in cats],
           color=["lightgray" if c["artifact"] else "tab:blue" for c in cats])
    a.set_yticks(range(len(cats)), names, fontsize=7)
    a.invert_yaxis()
    a.set_xlabel("samples citing the category")
    a.set_title("Top-level categories (grey: method artifacts)", fontsize=9)
    sizes = [c["n_features"] for c in tax["clusters"]]
    b.bar(range(1, len(sizes) + 1), sizes,
          color=["lightgray" if c["artifact"] else "tab:green" for c in tax["clusters"]])
    b.set_xlabel("cluster (by size)")
    b.set_ylabel("features")
    b.set_title(f"{len(sizes)} clusters", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)  # never through a link planted in the output directory
    plt.close(fig)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _quote(f: dict[str, Any]) -> str:
    for o in f["occurrences"]:
        for q in o["quotes"]:
            return q["text"] if q["verified"] else q["text"] + " [unverified]"
    return ""


def _distinct(features: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A sample's features merged by text: votes citing it, quotes (deduplicated), cluster."""
    out: dict[str, dict[str, Any]] = {}
    for f in features:
        d = out.setdefault(f["text"].lower(), {**f, "votes": 0, "quotes": []})
        d["votes"] += 1
        d["quotes"] += [q for q in f["quotes"] if q not in d["quotes"]]
    return list(out.values())


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _unclustered_markdown(tax: dict[str, Any]) -> str:
    out = ["# Evaluation-awareness cues: no taxonomy", "", tax["statement"], ""]
    if tax["features"]:
        out += ["| feature | count | samples | quote |", "|---|---|---|---|"]
        for f in tax["features"]:
            q = next((q["text"] + ("" if q["verified"] else " [unverified]") for q in f["quotes"]), "")
            out.append(f"| {_md_cell(f['text'])} | {f['count']} | {_md_cell(', '.join(f['sample_ids']))} "
                       f"| {_md_cell(_short(q, 120))} |")
    return "\n".join(out) + "\n"


def _unclustered_html(tax: dict[str, Any]) -> str:
    e = html.escape
    h = [f"<!doctype html><html><head><meta charset='utf-8'><title>evalaware taxonomy</title>"
         f"<style>{_CSS}</style></head><body><h1>Evaluation-awareness cues: no taxonomy</h1>",
         f"<p>{e(tax['statement'])}</p>"]
    if tax["features"]:
        h.append("<table><tr><th>feature</th><th>count</th><th>samples</th><th>quotes</th></tr>")
        for f in tax["features"]:
            qs = "<br>".join(_hq(q) + f" <small>{e(q['sample_id'])}</small>" for q in f["quotes"][:5])
            h.append(f"<tr><td>{e(f['text'])}</td><td>{f['count']}</td>"
                     f"<td>{e(', '.join(f['sample_ids']))}</td><td>{qs}</td></tr>")
        h.append("</table>")
    h.append("</body></html>")
    return "\n".join(h)


def markdown(tax: dict[str, Any]) -> str:
    if not tax.get("clustered", True):
        return _unclustered_markdown(tax)
    st, cl = tax["stats"], {c["id"]: c for c in tax["clusters"]}
    cats = {c["id"]: c for c in tax["categories"]}
    out = ["# Evaluation-awareness cues: taxonomy", "",
           f"{st['records']} records ({st['records_eval']} predicted eval), {st['votes_aware']} aware "
           f"votes, {st['features']} features ({st['distinct_features']} distinct) from "
           f"{st['samples_with_features']} samples; {st['quotes_unverified']} of {st['quotes']} "
           f"quotes unverified. k = {tax['k']} ({tax['k_source']}), {len(tax['categories'])} "
           f"categories, seed {tax['settings']['seed']}.", ""]
    if tax["namer"] is None:
        out += ["Names are **keyword labels** (no naming model was given): `[keywords] a / b / c`.", ""]
    out += ["![k sweep](sweep.png)", "", "![sizes](sizes.png)", "",
            "## Headline categories (method artifacts excluded)", "",
            "| # | category | description | samples | features | clusters |", "|---|---|---|---|---|---|"]
    for n, tid in enumerate(tax["headline"], 1):
        c = cats[tid]
        out.append(f"| {n} | {tid} {_md_cell(c['name']['name'])} | {_md_cell(c['name']['description'])} "
                   f"| {c['n_samples']} | {c['n_features']} | {len(c['clusters'])} |")
    arts = [c for c in tax["categories"] if c["artifact"]]
    out += ["", "## Method artifacts (excluded from the headline)", ""]
    out += [f"- {c['id']} {c['name']['name']} ({', '.join(c['artifact_reasons'])}; "
            f"{c['n_samples']} samples)" for c in arts] or ["- none"]
    art_cl = [c for c in tax["clusters"] if c["artifact"]]
    if art_cl:
        out.append("- clusters flagged: " + ", ".join(
            f"{c['id']} ({', '.join(c['artifact_reasons'])}, sim {c['artifact_similarity']:.2f})"
            for c in art_cl))
    out += ["", "## Categories and clusters", ""]
    for c in tax["categories"]:
        flag = " — *artifact*" if c["artifact"] else ""
        out += [f"### {c['id']} {c['name']['name']}{flag}", "", c["name"]["description"], ""]
        for cid in c["clusters"]:
            k = cl[cid]
            out.append(f"- **{cid} {k['name']['name']}** — {k['n_features']} features, "
                       f"{k['n_samples']} samples" + (" — *artifact*" if k["artifact"] else ""))
            for f in k["features"][:MAX_FEATURES_SHOWN]:
                q = _quote(f)
                out.append(f"  - {f['text']} ({f['count']})" + (f": “{_short(q, 120)}”" if q else ""))
        out.append("")
    out += ["## Cues per sample", "", "Features with the number of votes citing them.", "",
            "| sample | label | categories | features |", "|---|---|---|---|"]
    for sid, s in tax["samples"].items():
        names = "; ".join(f"{t} {cats[t]['name']['name']}" for t in s["categories"])
        feats = "; ".join(f"{_short(f['text'], 60)} ({f['votes']})" for f in _distinct(s["features"])[:6])
        out.append(f"| {_md_cell(sid)} | {s['label']} | {_md_cell(names)} | {_md_cell(feats)} |")
    return "\n".join(out) + "\n"


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;
font-size:13px}th{background:#f3f3f3}.art{color:#888}.uv{color:#b00;font-size:11px}img{max-width:100%}
details{margin:4px 0}summary{cursor:pointer}q{color:#333;background:#f7f7e8}"""


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{alt}" src="data:image/png;base64,{data}">'


def _hq(q: dict[str, Any]) -> str:
    flag = "" if q["verified"] else ' <span class="uv">unverified</span>'
    return f"<q>{html.escape(q['text'])}</q>{flag}"


def html_page(tax: dict[str, Any], out_dir: Path) -> str:
    if not tax.get("clustered", True):
        return _unclustered_html(tax)
    e, st = html.escape, tax["stats"]
    cats, cl = {c["id"]: c for c in tax["categories"]}, {c["id"]: c for c in tax["clusters"]}
    h = [f"<!doctype html><html><head><meta charset='utf-8'><title>evalaware taxonomy</title>"
         f"<style>{_CSS}</style></head><body><h1>Evaluation-awareness cues: taxonomy</h1>",
         f"<p>{st['records']} records ({st['records_eval']} predicted eval), {st['features']} features "
         f"({st['distinct_features']} distinct) from {st['samples_with_features']} samples; "
         f"{st['quotes_unverified']} of {st['quotes']} quotes unverified. k = {tax['k']} "
         f"({e(tax['k_source'])}), seed {tax['settings']['seed']}.</p>"]
    if tax["namer"] is None:
        h.append("<p><b>Names are keyword labels</b> (no naming model was given).</p>")
    h += [_img(out_dir / "sweep.png", "k sweep"), _img(out_dir / "sizes.png", "sizes"),
          "<h2>Headline categories (method artifacts excluded)</h2><table><tr><th>#</th><th>category</th>"
          "<th>description</th><th>samples</th><th>features</th></tr>"]
    for n, tid in enumerate(tax["headline"], 1):
        c = cats[tid]
        h.append(f"<tr><td>{n}</td><td>{tid} {e(c['name']['name'])}</td><td>{e(c['name']['description'])}"
                 f"</td><td>{c['n_samples']}</td><td>{c['n_features']}</td></tr>")
    h.append("</table><h2>Categories and clusters</h2>")
    for c in tax["categories"]:
        art = " <span class='art'>(method artifact: " + ", ".join(c["artifact_reasons"]) + ")</span>" \
            if c["artifact"] else ""
        h.append(f"<h3>{c['id']} {e(c['name']['name'])}{art}</h3><p>{e(c['name']['description'])}</p>")
        for cid in c["clusters"]:
            k = cl[cid]
            flag = " <span class='art'>(artifact)</span>" if k["artifact"] else ""
            h.append(f"<details><summary><b>{cid} {e(k['name']['name'])}</b>{flag} — "
                     f"{k['n_features']} features, {k['n_samples']} samples</summary><ul>")
            for f in k["features"]:
                qs = [_hq(q) + f" <small>{e(o['sample_id'])}</small>"
                      for o in f["occurrences"] for q in o["quotes"]][:5]
                h.append(f"<li>{e(f['text'])} ({f['count']})" + ("<br>" + "<br>".join(qs) if qs else "")
                         + "</li>")
            h.append("</ul></details>")
    h.append("<h2>Cues per sample</h2><table><tr><th>sample</th><th>label</th><th>prompt</th>"
             "<th>cues</th></tr>")
    for sid, s in tax["samples"].items():
        cues = "".join(
            f"<li>{e(f['text'])} <small>({f['votes']} vote{'s' if f['votes'] > 1 else ''}; "
            f"{f['category']} {e(cats[f['category']]['name']['name'])})</small>"
            f"{' <span class=art>(artifact)</span>' if f['artifact'] else ''}"
            + "".join("<br>" + _hq(q) for q in f["quotes"]) + "</li>" for f in _distinct(s["features"]))
        h.append(f"<tr><td>{e(sid)}</td><td>{e(str(s['label']))}</td>"
                 f"<td>{e(s['prompt_preview'] or '')}</td><td><ul>{cues}</ul></td></tr>")
    h.append("</table></body></html>")
    return "\n".join(h)


def _effect(r: dict[str, Any]) -> str:
    if r.get("mean") is None:
        return f"{r['factor']} – (n={r['n']})"
    iv = f" [{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}]" if r.get("ci") else ""
    return f"{r['factor']} {r['mean']:+.3f}{iv} (n={r['n']})"


def cues_markdown(tax: dict[str, Any]) -> str:
    """The link to a cue-attribution result (``tax["cues"]``, set by ``evalaware taxonomy
    --cues``): its files and the top factors per method; empty without one."""
    c = tax.get("cues")
    if not c:
        return ""
    out = ["", "## Causal check: factors switched on and off (`evalaware cues`)", "",
           f"What a judge says the model noticed is correlational; switching prompt features on the same "
           f"prompts measures their effect on P(eval): [report]({c['report']}), [numbers]({c['json']}). "
           f"Top factors (effect = P(eval) with the factor − without, 95% CI):", ""]
    out += [f"- {m}: " + "; ".join(_effect(r) for r in rows) for m, rows in c["top"].items()]
    return "\n".join(out) + "\n"


def cues_html(tax: dict[str, Any]) -> str:
    c = tax.get("cues")
    if not c:
        return ""
    e = html.escape
    items = "".join(f"<li>{e(m)}: {e('; '.join(_effect(r) for r in rows))}</li>" for m, rows in c["top"].items())
    return (f"<h2>Causal check: factors switched on and off (evalaware cues)</h2><p>Switching prompt "
            f"features on the same prompts measures their effect on P(eval): <a href='{e(c['report'])}'>report</a>, "
            f"<a href='{e(c['json'])}'>numbers</a>. Top factors (effect = P(eval) with the factor − without, "
            f"95% CI):</p><ul>{items}</ul>")


def write_outputs(tax: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write every output file into `out_dir`; returns their paths."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    clustered = tax.get("clustered", True)
    paths = {n: d / n for n in ("taxonomy.json", "taxonomy.md", "taxonomy.html")
             + (("sweep.png", "sizes.png") if clustered else ())}
    if clustered:
        plot_sweep(tax, paths["sweep.png"])
        plot_sizes(tax, paths["sizes.png"])
    write_text(paths["taxonomy.json"], json.dumps(tax, indent=1, ensure_ascii=False, sort_keys=False))
    write_text(paths["taxonomy.md"], markdown(tax) + cues_markdown(tax))
    write_text(paths["taxonomy.html"], html_page(tax, d).replace("</body></html>", cues_html(tax) + "</body></html>"))
    return paths
