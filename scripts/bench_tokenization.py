"""Benchmark: naive (first-token) vs tokenizer-aware logprob scoring.

Sections (``--section``, repeatable; default: table prep models):
  table   cross-family table: per target word, the first token of the answer-position variant,
          its class and the number of tokens of the full word
  prep    tokenizer load time per family (assets prepared)
  models  SmolLM2-135M-Instruct (and Gemma-3-270M with --models smollm2,gemma3) over the demo
          dataset, at both scored positions (``question``: the logprob_question method; ``response``:
          the logprob method, the paper's): coverage distribution, share of samples with signal
          (coverage >= --min-coverage) and the AUROC of P(eval) over those samples only (none from
          fewer than 10 per class), naive vs top-20 naive vs aware; rank correlation between
          models; time per sample (question form) of naive (selected ids + top-k), naive from the
          full vocabulary (before issue 17), aware without the word-boundary term (before issue
          11), aware with it (exact and pruned) (--backend hf|vllm, --via loglikelihood|prefix,
          --both to time the other strategy too); on vllm also where the aware time goes: backend
          calls per sample, and the word-boundary requests timed again with full-vocabulary
          output and with one logprob (their forward alone), interleaved with the naive step
  oracle  our HF teacher-forced log-likelihoods vs lm-evaluation-harness's HFLM on the same token
          pairs (needs a venv with lm_eval: --lmeval-python /tmp/lmeval-venv/bin/python)

Prompt (first person, answer not generated): as the ``logprob_question`` method renders it (the
sample's first turn, then the method's one-word question), scored at the first answer position.
Scored cases default to the method's (lower, Title; ``--cases`` to change).
Results are printed and written to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.methods.logprob import SCORING_CASES  # noqa: E402
from harness.stats.metrics import MIN_AUROC_PER_CLASS, gated_roc_auc  # noqa: E402
from tokenization.scoring import DEFAULT_TOL, DEFAULT_TOP_K  # noqa: E402
from scripts.bench_record import BenchRecord  # noqa: E402

FAMILIES = ["qwen3", "deepseek-r1", "llama3", "gpt-oss", "gpt2", "mistral-v3", "mistral-tekken", "gemma3", "smollm2"]
SIGNAL = 0.01  # --min-coverage
MIN_PER_CLASS = MIN_AUROC_PER_CLASS  # no AUROC from fewer scored samples per class (as the report)
RECORD: BenchRecord | None = None  # main's bench record: every printed table goes into it


def table(rows: list[list[str]], head: list[str]) -> str:
    """A fixed-width table to print; recorded in the bench record (``RECORD``) as printed."""
    if RECORD is not None:
        RECORD.add(f"{len(RECORD.figures) + 1}: {head[0]} | {head[1]}", head, rows)
    w = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    f = lambda r: " | ".join(str(x).ljust(w[i]) for i, x in enumerate(r))  # noqa: E731
    return "\n".join([f(head), "-|-".join("-" * x for x in w)] + [f(r) for r in rows])


def available_families() -> list[str]:
    from harness.models import assets
    from tokenization.families import FAMILIES as F
    return [f for f in FAMILIES if assets.is_prepared(F[f].asset)]


# --- 1. cross-family table -------------------------------------------------------------------

def section_table(res: dict) -> None:
    from tokenization.load import load
    from tokenization.variants import variants
    from tokenization.words import TargetWords

    fams = available_families()
    words = TargetWords.parse("extended").all
    toks = {f: load(f) for f in fams}
    rows, summary = [], []
    for w in words:
        row = [w]
        for f in fams:
            t = toks[f]
            ctx = "assistant" if t.has_chat_template else "bare"
            v = variants(t, w, ["lower"], [ctx])[0]
            cls = {"whole_word": "W", "ambiguous_prefix": "A", "missing": "M"}[v.first_class]
            row.append(f"{v.first_token!r}{cls}{len(v.ids)}")
        rows.append(row)
    for f in fams:
        vs = [v for w in words for v in variants(toks[f], w)]
        n = len(vs)
        whole = sum(v.first_class == "whole_word" for v in vs)
        amb = [v for v in vs if v.first_class == "ambiguous_prefix"]
        summary.append([f, n, f"{whole / n:.0%}", f"{len(amb) / n:.0%}",
                        sum(v.first_class == "missing" for v in vs),
                        f"{sum(v.n_words_sharing for v in amb) / max(len(amb), 1):.0f}"])
    print("\n## Cross-family: lower-case word at the answer position (assistant turn, else bare):"
          " first token, class (W whole / A ambiguous prefix / M missing), number of tokens\n")
    print(table(rows, ["word"] + fams))
    print("\n## All variants (3 cases x bare/space/assistant)\n")
    print(table(summary, ["family", "variants", "whole", "ambiguous", "missing", "mean words sharing an ambiguous first token"]))
    res["table"] = {"head": ["word"] + fams, "rows": rows, "summary": summary}


# --- 3b. tokenizer preparation/load time ------------------------------------------------------

def section_prep(res: dict) -> None:
    import mistral_common.tokens.tokenizers.mistral  # noqa: F401  (imports are not the tokenizer's cost)
    import tiktoken  # noqa: F401
    import tokenizers  # noqa: F401

    from tokenization.load import load
    from tokenization.scoring import ScoringPlan

    rows = []
    for f in available_families():
        t0 = time.perf_counter()
        t = load(f)
        t1 = time.perf_counter()
        ScoringPlan.build(t)
        t2 = time.perf_counter()
        rows.append([f, t.vocab_size, f"{t1 - t0:.2f}", f"{t2 - t1:.2f}"])
    print("\n## Tokenizer load time (assets prepared) and scoring-plan build time (s)\n")
    print(table(rows, ["family", "vocab", "load s", "plan s (variants+classes, default words)"]))
    res["prep"] = rows


# --- 2. models over the demo dataset ---------------------------------------------------------

def model_path(name: str) -> str:
    """A registered model asset (smollm2; gemma3 needs the optional GGUF package), prepared once."""
    from harness.models import assets
    return str(assets.prepare(name))


def demo_prompts(backend, limit: int | None, form: str = "question"):
    """Prompts exactly as the ``logprob_question`` (form "question": the sample's first turn, then
    the method's one-word question) or ``logprob`` (form "response": the first turn) method renders
    them, through the harness renderer and the final-answer position (a model without a chat
    template, such as Gemma-3-270M base, gets the plain transcript after BOS)."""
    from harness.methods.answer_position import answer_start
    from harness.data.readers import demo_path, load_dataset
    from harness.core.sample import sample_view
    from harness.methods.prompts import PromptLibrary
    from harness.core.render import Renderer
    from harness.core.sample import Message

    samples = load_dataset(demo_path())
    if limit and limit < len(samples):  # evenly spaced: keeps both labels and all categories
        samples = [samples[round(i * len(samples) / limit)] for i in range(limit)]
    question = (Message("user", PromptLibrary().get("logprob/question").text),) if form == "question" else ()
    start = answer_start(Renderer(backend.tokenizer))
    prompts = [list(start.render(sample_view(s, "first_turn") + question)) for s in samples]
    return prompts, [1 if s.label == "eval" else 0 for s in samples], [s.id for s in samples]


def _auroc(labels: list[int], ps: list[float | None]) -> tuple[float | None, int]:
    """AUROC over the samples with signal (harness.stats.metrics: the report's gate) and their count."""
    auc, n_eval, n_deploy = gated_roc_auc(labels, ps, MIN_PER_CLASS)
    return auc, n_eval + n_deploy


REPEAT = 1  # timed passes per measurement (best of)
TOL = DEFAULT_TOL  # aware pruning tolerance (0 = exact)
BLOCK_SIZE: int | None = None  # vLLM KV block size; prefix-cache hits are whole blocks


def make_backend(kind: str, path: str):
    if kind == "vllm":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        from harness.backends.vllm.backend import VLLMBackend
        kw = {"block_size": BLOCK_SIZE} if BLOCK_SIZE else {}
        return VLLMBackend(path, dtype="float32", max_model_len=2048,
                           engine_args={"enable_prefix_caching": True, **kw})
    from harness.backends.hf.backend import HFBackend
    return HFBackend(path, dtype="float32", device="cpu", batch_size=8)


def reset_prefix_cache(backend) -> None:
    """Empty vLLM's prefix cache so each timed pass starts cold (no-op for other backends)."""
    llm = getattr(backend, "llm", None)
    if llm is not None and not llm.reset_prefix_cache():
        raise RuntimeError("vLLM refused to reset its prefix cache")


def boundary_breakdown(b, prompts: list[list[int]], plan, via: str) -> dict:
    """vLLM: what the pruned aware scoring asks the engine (requests per sample by call, ms per
    sample), and its boundary requests (prompt + word, full next-token distribution) re-timed with
    full-vocabulary output vs one logprob (the forward alone), interleaved with the naive step
    (best of REPEAT), each after the naive step refilled the prefix cache as in the real flow."""
    from vllm import SamplingParams

    from harness.backends.base import WrappedBackend
    from tokenization.scoring import score_prompts

    class Recording(WrappedBackend):
        def __init__(self, inner):
            super().__init__(inner)
            self.calls, self.logmass = {}, []

        def _t(self, name, n, fn):
            t = time.perf_counter()
            r = fn()
            c = self.calls.setdefault(name, [0, 0.0])
            c[0] += n
            c[1] += time.perf_counter() - t
            return r

        def next_token_view(self, p, ids, k):
            return self._t("next_token_view (naive)", len(p), lambda: self.inner.next_token_view(p, ids, k))

        def next_token_logprobs(self, p, ids=None):
            return self._t("next_token_logprobs (word prefixes)", len(p),
                           lambda: self.inner.next_token_logprobs(p, ids))

        def next_token_logmass(self, p, ids):
            self.logmass += [list(x) for x in p]
            return self._t("next_token_logmass (boundary)", len(p), lambda: self.inner.next_token_logmass(p, ids))

        def continuation_scores(self, pairs, ids):
            return self._t("continuation_scores", len(pairs), lambda: self.inner.continuation_scores(pairs, ids))

        def loglikelihood(self, pairs):
            return self._t("loglikelihood", len(pairs), lambda: self.inner.loglikelihood(pairs))

    n = len(prompts)
    rec = Recording(b)
    reset_prefix_cache(b)
    t = time.perf_counter()
    score_prompts(rec, prompts, plan=plan, aware_via=via, tol=TOL)
    total = time.perf_counter() - t
    reqs = rec.logmass
    block = b.llm.llm_engine.vllm_config.cache_config.block_size
    plen = {tuple(p): len(p) for p in prompts}
    uncached = [len(r) - max(0, (plen[next(tuple(p) for p in prompts if r[:len(p)] == p)] // block) * block)
                for r in reqs]
    params = {"full vocabulary": SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1, flat_logprobs=True,
                                                detokenize=False),
              "one logprob (forward only)": SamplingParams(max_tokens=1, temperature=0.0, logprobs=1,
                                                           flat_logprobs=True, detokenize=False)}
    best = {k: math.inf for k in ["naive step (cold)", *params]}
    for _ in range(max(REPEAT, 2)):
        for k, sp in params.items():
            reset_prefix_cache(b)
            t = time.perf_counter()
            b.next_token_view(prompts, plan.first_ids(), DEFAULT_TOP_K)
            best["naive step (cold)"] = min(best["naive step (cold)"], time.perf_counter() - t)
            t = time.perf_counter()
            b._run(reqs, sp)
            best[k] = min(best[k], time.perf_counter() - t)
    return {"block_size": block, "aware_ms": total / n * 1e3,
            "calls": {k: {"requests_per_sample": c / n, "ms_per_sample": s / n * 1e3} for k, (c, s) in rec.calls.items()},
            "boundary_requests_per_sample": len(reqs) / n,
            "boundary_uncached_tokens_mean": float(np.mean(uncached)) if uncached else 0.0,
            "prompt_tokens_mean": float(np.mean([len(p) for p in prompts])),
            "retimed_ms_per_sample": {k: v / n * 1e3 for k, v in best.items()}}


def _gated(scores, kind: str) -> list[float | None]:
    """P(eval) of `kind` where its coverage reaches SIGNAL (the methods' --min-coverage gate)."""
    return [getattr(x, f"{kind}_p_eval") if getattr(x, f"{kind}_coverage") >= SIGNAL else None for x in scores]


MIN_CORR_PAIRS = 2 * MIN_PER_CLASS  # no rank correlation from fewer samples with signal in both


def rank_correlation(a: list[dict], b: list[dict], kind: str) -> tuple[int, float | None]:
    """(n, Spearman rho) of `kind`'s P(eval) between two models' per-sample scores, over the
    samples where both pass the signal gate (coverage >= SIGNAL); rho None below MIN_CORR_PAIRS
    samples (a ranking of noise is not a figure) or when either side is constant."""
    from scipy.stats import spearmanr

    xs = [(x[f"{kind}_p_eval"], y[f"{kind}_p_eval"]) for x, y in zip(a, b)
          if x[f"{kind}_p_eval"] is not None and y[f"{kind}_p_eval"] is not None
          and x[f"{kind}_coverage"] >= SIGNAL and y[f"{kind}_coverage"] >= SIGNAL]
    if len(xs) < MIN_CORR_PAIRS:
        return len(xs), None
    rho = float(spearmanr([x for x, _ in xs], [y for _, y in xs]).statistic)
    return len(xs), None if math.isnan(rho) else rho


def section_models(res: dict, models: list[str], limit: int | None, backend: str = "hf",
                   via: str = "loglikelihood", contexts: tuple[str, ...] = ("bare", "space", "assistant"),
                   also: bool = False, cases: tuple[str, ...] = SCORING_CASES, words: str = "paper",
                   forms: tuple[str, ...] = ("question", "response")) -> None:
    from tokenization.load import from_backend
    from tokenization.scoring import ScoringPlan, score_prompts
    from tokenization.words import TargetWords

    out, per_model = {}, {}
    other = "prefix" if via == "loglikelihood" else "loglikelihood"
    for name in models:
        b = make_backend(backend, model_path(name))
        tok = from_backend(b)
        plan = ScoringPlan.build(tok, TargetWords.parse(words), cases=cases, contexts=contexts)
        row = {"backend": backend, "block_size": BLOCK_SIZE, "contexts": list(contexts), "cases": list(cases),
               "words": words, "sequences": len(plan.sequences()),
               "multi_token_sequences": len(plan.multi_token_sequences()), "tol": TOL, "min_coverage": SIGNAL}
        for form in forms:
            prompts, labels, ids = demo_prompts(b, limit, form)
            n = len(prompts)
            row["n"] = n
            if form == "question":  # timing (the form whose coverage is real)
                score_prompts(b, prompts[:2], plan=plan, aware_via=via)  # warm-up

                def cold(fn):  # each pass starts with an empty prefix cache (reset not timed); best of REPEAT
                    best, r = math.inf, None
                    for _ in range(REPEAT):
                        reset_prefix_cache(b)
                        t = time.perf_counter()
                        r = fn()
                        best = min(best, time.perf_counter() - t)
                    return r, best

                run = lambda **kw: cold(lambda: score_prompts(b, prompts, plan=plan, aware_via=via, **kw))  # noqa: E731
                naive, sec_naive = run(aware=False)
                naive_full, sec_full = run(aware=False, full_vocab=True)
                assert all(abs(x.naive_coverage - y.naive_coverage) <= 1e-6 for x, y in zip(naive, naive_full))
                starts, sec_prefix_only = run(tol=TOL, boundary=False)
                exact, sec_exact = run(tol=0)
                scores, sec_aware = run(tol=TOL)
                sec_other = math.nan
                if also:  # the other strategy on the same prompts: same numbers, different cost
                    scores_o, sec_other = cold(lambda: score_prompts(b, prompts, plan=plan, aware_via=other, tol=TOL))
                    assert all(abs(a.aware_coverage - c.aware_coverage) <= 1e-4 * max(a.aware_coverage, 1e-30)
                               + 1e-9 for a, c in zip(scores, scores_o)), "aware strategies disagree"
                dp = [abs(a.aware_p_eval - e.aware_p_eval) for a, e in zip(scores, exact)
                      if a.aware_p_eval is not None and e.aware_p_eval is not None]
                row["max_abs_dp_eval_vs_exact"] = max(dp, default=0.0)
                row["mean_skipped_bound"] = sum(x.aware_skipped_bound for x in scores) / n
                if backend == "vllm":
                    try:
                        row["breakdown"] = boundary_breakdown(b, prompts, plan, via)
                    except Exception as e:  # the timing table above still gets printed
                        import traceback
                        traceback.print_exc()
                        print(f"breakdown failed: {type(e).__name__}: {e}")
                row["sec_per_sample"] = {"naive": sec_naive / n, "naive_full_vocab": sec_full / n,
                                         "aware_no_boundary": sec_prefix_only / n,
                                         f"aware_exact_{via}": sec_exact / n, f"aware_{via}": sec_aware / n,
                                         f"aware_{other}": sec_other / n}
            else:
                scores = score_prompts(b, prompts, plan=plan, aware_via=via, tol=TOL)
                starts = score_prompts(b, prompts, plan=plan, aware_via=via, tol=TOL, boundary=False)
            fr = row.setdefault("forms", {}).setdefault(form, {})
            for kind in ("naive", "top20", "aware"):
                ps = _gated(scores, kind)
                cov = np.array([getattr(x, f"{kind}_coverage") for x in scores])
                au, n_au = _auroc(labels, ps)
                au_all, _ = _auroc(labels, [getattr(x, f"{kind}_p_eval") for x in scores])
                fr[kind] = {"signal_share": float(np.mean(cov >= SIGNAL)),
                            "coverage_quantiles": {q: float(np.quantile(cov, q / 100)) for q in (10, 25, 50, 75, 90)},
                            "auroc_gated": au, "n_scored": n_au, "auroc_ungated": au_all,
                            "mean_p_eval": float(np.mean([p for p in ps if p is not None])) if n_au else None}
            cov0 = np.array([x.aware_coverage for x in starts])
            fr["aware_no_boundary"] = {"signal_share": float(np.mean(cov0 >= SIGNAL)),
                                       "median_coverage": float(np.median(cov0)),
                                       "auroc_gated": _auroc(labels, _gated(starts, "aware"))[0]}
            per_model.setdefault(name, {})[form] = {"ids": ids, "labels": labels,
                                                    "scores": [x.to_dict() for x in scores]}
        out[name] = row
        b.close()
        del b
    rows = []
    for name, r in out.items():
        for form, fr in r["forms"].items():
            for kind in ("naive", "top20", "aware"):
                k = fr[kind]
                q = k["coverage_quantiles"]
                rows.append([name, form, kind, f"{k['signal_share']:.0%}",
                             " / ".join(f"{q[x]:.2g}" for x in (10, 50, 90)),
                             "-" if k["auroc_gated"] is None else f"{k['auroc_gated']:.3f}", k["n_scored"],
                             "-" if k["auroc_ungated"] is None else f"{k['auroc_ungated']:.3f}"])
    print(f"\n## Demo dataset ({out[models[0]]['n']} samples, words {words}), signal = coverage >= {SIGNAL}; "
          f"AUROC over samples with signal only, none from < {MIN_PER_CLASS} per class\n")
    print(table(rows, ["model", "position", "score", "with signal", "coverage p10 / p50 / p90",
                       "AUROC (signal)", "n scored", "AUROC (ungated)"]))
    cost = []
    for m, r in out.items():
        t = r.get("sec_per_sample")
        if not t:
            continue
        ms = lambda k: "-" if math.isnan(t[k]) else f"{t[k] * 1e3:.0f} ({t[k] / t['naive']:.2f}x)"  # noqa: E731
        cost.append([m, r["sequences"], r["multi_token_sequences"], f"{t['naive'] * 1e3:.0f}", ms("naive_full_vocab"),
                     ms("aware_no_boundary"), ms(f"aware_exact_{via}"), ms(f"aware_{via}"), ms(f"aware_{other}"),
                     f"{r['max_abs_dp_eval_vs_exact']:.1e}"])
    print(f"\n## {backend} backend (CPU, float32), question position: ms per sample (ratio to naive = "
          f"selected ids + top-20); aware via {via}, tol {TOL:g} unless exact\n")
    print(table(cost, ["model", "seqs", "multi-token", "naive", "naive full vocab", "aware, no boundary",
                       "aware exact", "aware", f"aware via {other}", "max |dP(eval)| pruned vs exact"]))
    for m, r in out.items():
        bd = r.get("breakdown")
        if not bd:
            continue
        rows = [[k, f"{c['requests_per_sample']:.1f}", f"{c['ms_per_sample']:.0f}"] for k, c in bd["calls"].items()]
        print(f"\n## {m}: where the aware time goes ({backend}, question position, tol {TOL:g}; one pass, "
              f"{bd['aware_ms']:.0f} ms per sample)\n")
        print(table(rows, ["backend call", "requests per sample", "ms per sample"]))
        rt = bd["retimed_ms_per_sample"]
        print(f"\nBoundary requests: {bd['boundary_requests_per_sample']:.1f} per sample, each recomputing "
              f"{bd['boundary_uncached_tokens_mean']:.1f} uncached tokens on average (prompts "
              f"{bd['prompt_tokens_mean']:.0f} tokens; the prefix cache holds whole KV blocks of "
              f"{bd['block_size']} tokens only). Re-timed, interleaved, best of {max(REPEAT, 2)} (ms per sample):\n")
        print(table([[k, f"{v:.0f}"] for k, v in rt.items()], ["what", "ms per sample"]))
    if len(models) >= 2:
        a, b2 = per_model[models[0]]["question"]["scores"], per_model[models[1]]["question"]["scores"]
        corr = []
        for kind in ("naive", "top20", "aware"):
            n, rho = rank_correlation(a, b2, kind)
            corr.append([kind, n, "–" if rho is None else f"{rho:.3f}"])
            out.setdefault("rank_correlation", {})[kind] = {"n": n, "spearman": rho}
        print(f"\n## Rank correlation of P(eval) between {models[0]} and {models[1]} (question position; "
              f"samples with signal in both, none from fewer than {MIN_CORR_PAIRS})\n")
        print(table(corr, ["score", "n both with signal", "Spearman rho"]))
    res["models"] = out
    res["models_per_sample"] = per_model


# --- 4. lm-evaluation-harness oracle ---------------------------------------------------------

_LMEVAL_CHILD = r"""
import json, sys, time
from lm_eval.models.huggingface import HFLM
d = json.load(open(sys.argv[1]))
lm = HFLM(pretrained=d["model"], device="cpu", batch_size=d["batch_size"], dtype="float32")
reqs = [(("", ""), c, x) for c, x in d["pairs"]]
lm._loglikelihood_tokens(reqs[:2], disable_tqdm=True)
t = time.perf_counter()
out = lm._loglikelihood_tokens(reqs, disable_tqdm=True)
dt = time.perf_counter() - t
json.dump({"ll": [o[0] for o in out], "sec": dt}, open(sys.argv[2], "w"))
"""


def section_oracle(res: dict, limit: int | None, lmeval_python: str) -> None:
    from harness.backends.hf.backend import HFBackend
    from tokenization.load import from_backend
    from tokenization.scoring import ScoringPlan

    path = model_path("smollm2")
    b = HFBackend(path, dtype="float32", device="cpu", batch_size=8)
    tok = from_backend(b)
    prompts, _, _ = demo_prompts(b, limit)
    seqs = [v.ids for wp in ScoringPlan.build(tok).per_word for v in wp.sequences]
    pairs = [(p, list(s)) for p in prompts for s in seqs[:: max(1, len(seqs) // 8)]]
    b.loglikelihood(pairs[:2])
    t0 = time.perf_counter()
    ours = b.loglikelihood(pairs)
    ours_sec = time.perf_counter() - t0
    b.close()
    with tempfile.TemporaryDirectory() as tmp:
        inp, outp = Path(tmp) / "in.json", Path(tmp) / "out.json"
        inp.write_text(json.dumps({"model": path, "batch_size": 8, "pairs": pairs}))
        r = subprocess.run([lmeval_python, "-c", _LMEVAL_CHILD, str(inp), str(outp)],
                           capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if r.returncode != 0:
            print("lm_eval oracle failed:\n" + r.stderr[-3000:])
            res["oracle"] = {"error": r.stderr[-2000:]}
            return
        theirs = json.loads(outp.read_text())
    diff = max(abs(a - c) for a, c in zip(ours, theirs["ll"]))
    n_tok = sum(len(p) + len(c) for p, c in pairs)
    rows = [["ours (HFBackend.loglikelihood)", len(pairs), f"{ours_sec:.2f}", f"{n_tok / ours_sec:.0f}"],
            ["lm_eval HFLM._loglikelihood_tokens", len(pairs), f"{theirs['sec']:.2f}", f"{n_tok / theirs['sec']:.0f}"]]
    print(f"\n## Oracle on SmolLM2 ({len(pairs)} (context, continuation) token pairs): "
          f"max |ours - lm_eval| = {diff:.2e}\n")
    print(table(rows, ["implementation", "pairs", "seconds", "tokens/s"]))
    res["oracle"] = {"pairs": len(pairs), "max_abs_diff": diff, "ours_sec": ours_sec,
                     "lmeval_sec": theirs["sec"], "speedup": theirs["sec"] / ours_sec}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--section", action="append", choices=["table", "prep", "models", "oracle"])
    ap.add_argument("--models", default="smollm2")
    ap.add_argument("--limit", type=int, default=None, help="N evenly spaced demo samples")
    ap.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    ap.add_argument("--via", choices=["loglikelihood", "prefix"], default="loglikelihood")
    ap.add_argument("--block-size", type=int, default=None, help="vLLM KV block size")
    ap.add_argument("--tol", type=float, default=DEFAULT_TOL, help="aware pruning tolerance (0 = exact)")
    ap.add_argument("--repeat", type=int, default=1, help="timed passes per measurement (best of)")
    ap.add_argument("--both", action="store_true", help="also time the other aware strategy")
    ap.add_argument("--contexts", default="bare,space,assistant", help="variant contexts to score")
    ap.add_argument("--cases", default=",".join(SCORING_CASES), help="variant cases to score")
    ap.add_argument("--words", default="paper", help="target word list (paper, extended, file, inline)")
    ap.add_argument("--forms", default="question,response", help="scored positions (question, response)")
    ap.add_argument("--min-coverage", type=float, default=0.01, help="signal gate")
    ap.add_argument("--lmeval-python", default="/tmp/lmeval-venv/bin/python")
    ap.add_argument("--out", default=None, help="write results JSON here (merged with an existing file)")
    ap.add_argument("--json", help="the bench record (default: runs/bench/tokenization.json)")
    a = ap.parse_args()
    global BLOCK_SIZE, REPEAT, TOL, SIGNAL, RECORD
    RECORD = BenchRecord("tokenization", __file__)
    BLOCK_SIZE, REPEAT, TOL, SIGNAL = a.block_size, a.repeat, a.tol, a.min_coverage
    res: dict = {}
    for s in a.section or ["table", "prep", "models"]:
        if s == "table":
            section_table(res)
        elif s == "prep":
            section_prep(res)
        elif s == "models":
            section_models(res, a.models.split(","), a.limit, a.backend, a.via,
                           tuple(a.contexts.split(",")), a.both, tuple(a.cases.split(",")), a.words,
                           tuple(a.forms.split(",")))
        elif s == "oracle":
            section_oracle(res, a.limit, a.lmeval_python)
    if a.out:
        p = Path(a.out)
        old = json.loads(p.read_text()) if p.exists() else {}
        p.write_text(json.dumps({**old, **res}, indent=1))
    RECORD.write(a.json, results=res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
