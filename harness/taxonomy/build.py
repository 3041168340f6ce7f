"""Assemble the taxonomy: features -> embeddings -> sweep -> clusters -> categories -> names,
artifact flags, per-sample cue lists. Everything but ``manifest`` is a deterministic function of
the records, the settings (seed included) and the cached model answers.

Ids: clusters ``c001..`` and categories ``T01..`` are numbered by size (features, then samples,
then first member text), so they do not depend on k-means' label order.

Too little to cluster: with fewer than :data:`~.cluster.MIN_POINTS` distinct features (none
included) the result is not an error but a plain statement (``clustered: false``, ``statement``,
the features listed with their counts and samples, no clusters): "the model called nothing a test"
is a finding about the model. It stays an error when no verdict was usable at all (every vote
unjudged or unverified): then nothing is known about what the model called a test.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from harness.methods.prompts import PromptLibrary
from harness.core.sample import Sample
from harness.taxonomy import TaxonomyError
from harness.taxonomy.artifacts import DEFAULT_THRESHOLD, artifact_descriptions, centroid_similarity
from harness.taxonomy.cluster import MIN_POINTS, PAPER_K_RANGE, choose_k, group_centroids, k_grid, refit, sweep
from harness.taxonomy.embed import DEFAULT_EMBEDDER, Embedder, embed_cached, get_embedder
from harness.taxonomy.extract import ExtractStats, Feature, extract_features
from harness.taxonomy.naming import CATEGORY_PROMPT, CLUSTER_PROMPT, Name, Namer, keyword_name, keywords
from harness.taxonomy.threads import limit_threads

SCHEMA = "evalaware.taxonomy/1"


@dataclass(frozen=True)
class TaxonomyConfig:
    """Settings of one build (all recorded in taxonomy.json)."""

    k: int | None = None
    k_min: int = PAPER_K_RANGE[0]
    k_max: int = PAPER_K_RANGE[1]
    k_step: int = PAPER_K_RANGE[2]
    k_rule: str = "knee"
    n_categories: int = 15
    seed: int = 0
    algorithm: str = "kmeans"
    silhouette_sample: int = 2000
    restarts: int = 5
    threads: int = 1
    artifact_threshold: float = DEFAULT_THRESHOLD
    scope: str = "majority"
    max_members: int = 20
    embedder: str = DEFAULT_EMBEDDER

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _preview(sample: Sample, limit: int = 300) -> str:
    last = sample.first_turn()[-1] if sample.first_turn() else None
    text = " ".join((last.content or "").split()) if last else ""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _unique(features: Sequence[Feature]) -> tuple[list[str], list[str], np.ndarray]:
    """Sorted distinct keys, a display text per key (its most frequent spelling), weights."""
    spell: dict[str, Counter[str]] = defaultdict(Counter)
    for f in features:
        spell[f.key][f.text] += 1
    keys = sorted(spell)
    shown = [min(spell[k].items(), key=lambda kv: (-kv[1], kv[0]))[0] for k in keys]
    return keys, shown, np.array([sum(spell[k].values()) for k in keys], dtype=np.float64)


def _order(groups: dict[int, list[int]], weight: Any, samples: Any, first: Any) -> list[int]:
    return sorted(groups, key=lambda g: (-weight(g), -samples(g), first(g)))


def _members_text(items: Sequence[tuple[str, int]]) -> str:
    return "\n".join(f"- {t} ({n})" for t, n in items)


class _Builder:
    def __init__(self, cfg: TaxonomyConfig, embedder: Embedder, namer: Namer | None,
                 store: Any, prompts: PromptLibrary, progress: bool) -> None:
        self.cfg, self.embedder, self.namer, self.store = cfg, embedder, namer, store
        self.prompts, self.progress = prompts, progress
        self.timings: dict[str, Any] = {}
        self.encoded = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with limit_threads(self.cfg.threads):
            X, n = embed_cached(self.embedder, texts, self.store)
        self.encoded += n
        return X

    def run(self, records: Sequence[dict[str, Any]], samples: Sequence[Sample] | None) -> dict[str, Any]:
        cfg, t0 = self.cfg, time.perf_counter()
        features, stats = extract_features(records, cfg.scope)
        usable = stats.votes - stats.votes_unjudged - stats.votes_unverified
        if usable == 0:
            raise TaxonomyError(
                f"no usable judge verdict: {stats.records} records, {stats.votes} votes "
                f"({stats.votes_unjudged} unjudged, {stats.votes_unverified} unverified: quoting "
                f"nothing in the judged text, or copying the judge prompt); nothing is known about what the model calls a test "
                f"(try --constrain or a stronger --judge)")
        keys, shown, weights = _unique(features)
        if len(keys) < MIN_POINTS:
            return unclustered(features, stats, cfg, samples)
        t = time.perf_counter()
        X = self.embed(keys)
        self.timings["embed_s"] = time.perf_counter() - t
        ks = k_grid(len(keys), cfg.k_min, cfg.k_max, cfg.k_step)
        if cfg.k is not None:
            if not 1 <= cfg.k <= len(keys):
                raise TaxonomyError(f"--k {cfg.k}: must be between 1 and the number of distinct "
                                    f"features ({len(keys)})")
            ks = sorted(set(ks) | {cfg.k})
        t = time.perf_counter()
        with limit_threads(cfg.threads):
            sw = sweep(X, ks, weights, cfg.seed, cfg.algorithm, cfg.silhouette_sample, self.progress)
            self.timings.update(sweep_s=time.perf_counter() - t, seeding_s=sw.seed_seconds,
                                per_k_s={p.k: p.seconds for p in sw.points})
            k = cfg.k if cfg.k is not None else choose_k(sw.points, cfg.k_rule)
            t = time.perf_counter()
            sweep_inertia = next(p.inertia for p in sw.points if p.k == k)
            labels, centers, final_inertia = refit(X, k, weights, cfg.seed, cfg.restarts,
                                                   (sw.labels[k], sw.centers[k], sweep_inertia))
            self.timings["refit_s"] = time.perf_counter() - t
        out = self.assemble(features, stats.to_dict(), keys, shown, weights, X, labels, centers,
                            k, samples)
        out["final_inertia"] = final_inertia
        out["sweep"] = [{"k": p.k, "inertia": p.inertia, "silhouette": p.silhouette,
                         "n_iter": p.n_iter} for p in sw.points]
        self.timings["total_s"] = time.perf_counter() - t0
        return out

    def assemble(self, features: list[Feature], stats: dict[str, int], keys: list[str],
                 shown: list[str], weights: np.ndarray, X: np.ndarray, labels: np.ndarray,
                 centers: np.ndarray, k: int, samples: Sequence[Sample] | None) -> dict[str, Any]:
        cfg = self.cfg
        key_idx = {key: i for i, key in enumerate(keys)}
        feats_of_key: dict[int, list[Feature]] = defaultdict(list)
        for f in features:
            feats_of_key[key_idx[f.key]].append(f)
        clusters, members, cents = self.clusters(labels, centers, X, keys, shown, weights,
                                                 feats_of_key)
        categories = self.categories(clusters, members, cents, shown, weights)
        return {
            "schema": SCHEMA, "settings": cfg.to_dict(), "clustered": True, "statement": None, "k": k,
            "k_source": "user" if cfg.k is not None else f"rule:{cfg.k_rule}",
            "embedder": self.embedder.identity,
            "namer": self.namer.settings() if self.namer else None,
            "artifact_descriptions": self.descriptions,
            "stats": {**stats, "distinct_features": len(keys)},
            "headline": [c["id"] for c in sorted(
                (c for c in categories if not c["artifact"]), key=lambda c: (-c["n_samples"], c["id"]))],
            "categories": categories, "clusters": clusters,
            "samples": self.per_sample(
                features, {keys[i]: clusters[j] for j, m in enumerate(members) for i in m},
                {s.id: s for s in samples or ()}),
        }

    def clusters(self, labels: np.ndarray, centers: np.ndarray, X: np.ndarray, keys: list[str],
                 shown: list[str], weights: np.ndarray, feats_of_key: dict[int, list[Feature]]
                 ) -> tuple[list[dict[str, Any]], list[list[int]], np.ndarray]:
        """Base clusters, ordered and numbered, named and artifact-flagged (category unset)."""
        cfg = self.cfg
        by_cluster: dict[int, list[int]] = defaultdict(list)
        for i, lab in enumerate(labels):
            by_cluster[int(lab)].append(i)
        csamples = {c: {f.sample_id for i in m for f in feats_of_key[i]} for c, m in by_cluster.items()}
        order = _order(by_cluster, lambda c: weights[by_cluster[c]].sum(),
                       lambda c: len(csamples[c]), lambda c: keys[by_cluster[c][0]])
        cents = np.stack([centers[c] for c in order])
        members: list[list[int]] = []  # closest to the centroid first
        for j, c in enumerate(order):
            m = by_cluster[c]
            sims = X[m] @ cents[j] / max(float(np.linalg.norm(cents[j])), 1e-12)
            members.append([m[i] for i in sorted(range(len(m)), key=lambda i: (-sims[i], keys[m[i]]))])
        self.descriptions = artifact_descriptions(self.prompts)
        sim = centroid_similarity(cents, self.embed([d.lower() for d in self.descriptions]))
        words = keywords([[(shown[i], int(weights[i])) for i in m] for m in members])
        names = self.names(CLUSTER_PROMPT, "features", [
            _members_text([(shown[i], int(weights[i])) for i in m[:cfg.max_members]])
            for m in members], words)
        out = []
        for j, c in enumerate(order):
            reasons = (["similarity"] if sim[j] >= cfg.artifact_threshold else []) + \
                (["namer"] if names[j].artifact else [])
            feats = []
            for i in members[j]:
                occ = [{"sample_id": f.sample_id, "vote": f.vote, "variant": f.variant,
                        "text": f.text, "from_quote": f.from_quote,
                        "quotes": [{"text": q.text, "verified": q.verified} for q in f.quotes]}
                       for f in sorted(feats_of_key[i], key=lambda f: (f.sample_id, f.vote))]
                feats.append({"text": shown[i], "count": int(weights[i]), "occurrences": occ})
            out.append({
                "id": f"c{j + 1:03d}", "category": None, "name": names[j].to_dict(),
                "keywords": words[j], "artifact": bool(reasons), "artifact_reasons": reasons,
                "artifact_similarity": round(float(sim[j]), 6),
                "n_features": int(weights[by_cluster[c]].sum()), "n_distinct": len(by_cluster[c]),
                "n_samples": len(csamples[c]), "sample_ids": sorted(csamples[c]), "features": feats})
        return out, members, cents

    def categories(self, clusters: list[dict[str, Any]], members: list[list[int]],
                   cents: np.ndarray, shown: list[str], weights: np.ndarray) -> list[dict[str, Any]]:
        """Second level: non-artifact clusters grouped into categories T01.. (named); flagged
        clusters form one category T00 (named by rule). Sets each cluster's `category`."""
        keep = [j for j, c in enumerate(clusters) if not c["artifact"]]
        groups: dict[int, list[int]] = defaultdict(list)
        if keep:
            for j, g in zip(keep, group_centroids(cents[keep], self.cfg.n_categories)):
                groups[int(g)].append(j)

        def samples_of(js: list[int]) -> set[str]:
            return set().union(*(clusters[j]["sample_ids"] for j in js))

        gorder = _order(groups, lambda g: sum(clusters[j]["n_features"] for j in groups[g]),
                        lambda g: len(samples_of(groups[g])), lambda g: min(groups[g]))
        lists = [groups[g] for g in gorder]
        words = keywords([[(shown[i], int(weights[i])) for j in js for i in members[j]] for js in lists])
        texts = ["\n".join(f"- {clusters[j]['name']['name']} (e.g. "
                           f"{'; '.join(shown[i] for i in members[j][:3])})"
                           for j in js[:self.cfg.max_members]) for js in lists]
        names = self.names(CATEGORY_PROMPT, "clusters", texts, words)
        ids = [f"T{n + 1:02d}" for n in range(len(lists))]
        flagged = [j for j, c in enumerate(clusters) if c["artifact"]]
        if flagged:
            lists.append(flagged)
            ids.append("T00")
            words.append(keywords([[(shown[i], int(weights[i])) for j in flagged
                                    for i in members[j]]])[0])
            names.append(Name("Method artifacts: asked to infer the user's intent",
                              "Clusters flagged as side effects of the motivation question "
                              "(see artifact_reasons of each cluster).", True, "rule"))
        out = []
        for tid, js, name, w in zip(ids, lists, names, words):
            for j in js:
                clusters[j]["category"] = tid
            reasons = (["clusters"] if tid == "T00" else []) + (["namer"] if name.artifact and
                                                                tid != "T00" else [])
            ss = samples_of(js)
            out.append({"id": tid, "name": name.to_dict(), "keywords": w, "artifact": bool(reasons),
                        "artifact_reasons": reasons, "clusters": [clusters[j]["id"] for j in js],
                        "n_features": sum(clusters[j]["n_features"] for j in js),
                        "n_samples": len(ss), "sample_ids": sorted(ss)})
        return out

    def names(self, prompt: str, field: str, texts: list[str], words: list[list[str]]) -> list[Name]:
        if self.namer is None:
            return [keyword_name(w) for w in words]
        return self.namer.name([self.namer.fill(prompt, **{field: t}) for t in texts], words)

    @staticmethod
    def per_sample(features: list[Feature], cluster_of_key: dict[str, dict[str, Any]],
                   samples: dict[str, Sample]) -> dict[str, Any]:
        """sample id -> its features, each with cluster and category (what cues each prompt has)."""
        out: dict[str, Any] = {}
        for f in sorted(features, key=lambda f: (f.sample_id, f.vote, f.key)):
            c = cluster_of_key[f.key]
            s = out.setdefault(f.sample_id, {
                "label": f.label, "dataset_category": f.category,
                "prompt_preview": _preview(samples[f.sample_id]) if f.sample_id in samples else None,
                "features": []})
            s["features"].append({"text": f.text, "vote": f.vote, "cluster": c["id"],
                                  "category": c["category"], "artifact": c["artifact"],
                                  "quotes": [{"text": q.text, "verified": q.verified} for q in f.quotes]})
        for s in out.values():
            s["clusters"] = sorted({x["cluster"] for x in s["features"]})
            s["categories"] = sorted({x["category"] for x in s["features"]})
        return dict(sorted(out.items()))


def _vote_counts(st: ExtractStats) -> str:
    return (f"{st.records} samples ({st.records_eval} predicted eval), {st.votes} judge verdicts: "
            f"{st.votes_aware} aware, {st.votes - st.votes_aware - st.votes_unjudged - st.votes_unverified}"
            f" not aware, {st.votes_unjudged} unjudged, {st.votes_unverified} unverified (quoting "
            f"nothing in the judged text, or copying the judge prompt)")


def statement(listed: Sequence[dict[str, Any]], st: ExtractStats, scope: str) -> str:
    """The plain statement of a result with too few distinct features to cluster."""
    counts = _vote_counts(st)
    if not listed:
        if st.votes_aware == 0:
            return (f"The model called nothing a test: no judge verdict says its answer calls the "
                    f"user's request a test or evaluation; {counts}. Nothing to cluster.")
        why = (f"no sample's majority of votes is aware (scope {scope!r}; --scope votes takes "
               f"every aware vote)" if scope == "majority" and st.records_eval == 0 else
               "the aware verdicts in scope name no feature and quote nothing")
        return (f"The model called too little a test to cluster: {why}; {counts}. "
                f"Nothing to cluster.")
    feats = "; ".join(f"\"{f['text']}\" ({f['count']}x in {f['n_samples']} "
                      f"sample{'s' if f['n_samples'] != 1 else ''})" for f in listed)
    return (f"The model called too little a test to cluster: {st.features} feature(s), "
            f"{len(listed)} distinct, from {st.samples_with_features} sample(s): {feats}; at least "
            f"{MIN_POINTS} distinct features are needed to cluster, so no clusters were built; "
            f"{counts}.")


def unclustered(features: Sequence[Feature], st: ExtractStats, cfg: TaxonomyConfig,
                samples: Sequence[Sample] | None) -> dict[str, Any]:
    """The result when fewer than MIN_POINTS distinct features were found (module docstring)."""
    keys, shown, weights = _unique(features)
    by_key: dict[str, list[Feature]] = defaultdict(list)
    for f in features:
        by_key[f.key].append(f)
    listed = sorted(({"text": text, "count": int(w), "n_samples": len({f.sample_id for f in by_key[k]}),
                      "sample_ids": sorted({f.sample_id for f in by_key[k]}),
                      "quotes": [{"text": q.text, "verified": q.verified, "sample_id": f.sample_id}
                                 for f in by_key[k] for q in f.quotes]}
                     for k, text, w in zip(keys, shown, weights)), key=lambda d: (-d["count"], d["text"]))
    previews = {s.id: _preview(s) for s in samples or ()}
    per_sample: dict[str, Any] = {}
    for f in sorted(features, key=lambda f: (f.sample_id, f.vote, f.key)):
        per_sample.setdefault(f.sample_id, {"label": f.label, "dataset_category": f.category,
                                            "prompt_preview": previews.get(f.sample_id),
                                            "features": []})["features"].append(
            {"text": f.text, "vote": f.vote,
             "quotes": [{"text": q.text, "verified": q.verified} for q in f.quotes]})
    return {"schema": SCHEMA, "settings": cfg.to_dict(), "clustered": False,
            "statement": statement(listed, st, cfg.scope), "k": None, "k_source": None,
            "embedder": None, "namer": None, "stats": {**st.to_dict(), "distinct_features": len(keys)},
            "features": listed, "headline": [], "categories": [], "clusters": [], "sweep": [],
            "samples": dict(sorted(per_sample.items()))}


def build_taxonomy(records: Sequence[dict[str, Any]], config: TaxonomyConfig | None = None,
                   embedder: Embedder | None = None, namer: Namer | None = None,
                   store: Any = None, samples: Sequence[Sample] | None = None,
                   prompts: PromptLibrary | None = None, progress: bool = False) -> dict[str, Any]:
    """The taxonomy of `records` (motivation records) as a JSON-ready dict."""
    cfg = config or TaxonomyConfig()
    emb = embedder or get_embedder(cfg.embedder)
    b = _Builder(cfg, emb, namer, store, prompts or PromptLibrary(), progress)
    out = b.run(records, samples)
    out["manifest"] = {"timings": b.timings, "texts_embedded": b.encoded}
    return out
