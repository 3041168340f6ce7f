"""Start the vLLM backend on a CUDA machine and run the demo's methods through it (issue 49).

The CUDA build of vLLM picks its V2 model runner by default, whose loader refused the V1-only
scoring processor while `LLM()` was constructed; this script is the check of the fix where a GPU
and vLLM are: it starts `VLLMBackend` as `evalaware run --backend vllm` does (the engine's own
choice of runner unless VLLM_USE_V2_MODEL_RUNNER is set) and prints one line per check:

    PASS|FAIL|INFO <check>: <detail>

- env / start / runner: versions, the start-up time, the runner the engine picked and the
  processor interfaces it found (`--expect-runner v2` fails the run on another runner);
- scoring against vLLM's own paths, on the demo's logprob prompts: the first-token view against
  the full distribution (`logprobs=-1`), forced tokens against vLLM's own logprobs of them, the
  log-likelihoods against one next-token request per prefix, continuation scores starting after
  the first token against every request from the prompt, the boundary masses against the full
  distribution, calls from several threads against one thread's; steering reaching the model;
- the demo's methods (binary, logprob, logprob_question, `--constrain`) on a few samples, through
  the streaming loop and the batch loop: both finish (and how many of their calls differ).

The model is `--model DIR` (a local model directory), or with `--tokenizer DIR` a randomly
initialised Llama of SmolLM2's shape saved with that tokenizer (no weights travel; the numbers
are checked the same way, the methods' answers are noise). Engine start and checks take a few
minutes on one GPU; exit status 1 if any check failed.

    python scripts/gpu_vllm_start.py --tokenizer DIR --json out.json     # a lent GPU
    python scripts/gpu_vllm_start.py --model /models/SmolLM2-135M-Instruct
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SMOLLM2_SHAPE = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                     num_key_value_heads=3, tie_word_embeddings=True, rope_theta=100000.0)
METHODS = ["binary", "logprob", "logprob_question"]  # the demo's (Makefile: `make demo`)


class Report:
    """The printed lines and what --json writes."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def line(self, status: str, name: str, detail: str, **data: Any) -> None:
        self.rows.append({"status": status, "check": name, "detail": detail, **data})
        print(f"{status} {name}: {detail}", flush=True)

    def check(self, name: str, ok: bool, detail: str, **data: Any) -> None:
        self.line("PASS" if ok else "FAIL", name, detail, **data)

    def guarded(self, name: str, fn: Callable[[], None]) -> None:
        """Run one check; an exception is that check's failure, not the script's."""
        try:
            fn()
        except Exception as e:  # reported as the check's result
            self.line("FAIL", name, f"{type(e).__name__}: {e}"[:2000])

    @property
    def failed(self) -> bool:
        return any(r["status"] == "FAIL" for r in self.rows)


def random_model(tokenizer: Path, out: Path) -> Path:
    """A random-init Llama of SmolLM2's shape with `tokenizer`'s vocabulary and files."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer)
    cfg = LlamaConfig(vocab_size=len(tok), max_position_embeddings=8192, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, **SMOLLM2_SHAPE)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def env(report: Report) -> None:
    import torch
    import vllm

    try:
        from vllm.triton_utils import HAS_TRITON
    except ImportError:
        HAS_TRITON = None
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    report.line("INFO", "env", f"vllm {vllm.__version__}, torch {torch.__version__}, {device}, Triton "
                f"{HAS_TRITON}, VLLM_USE_V2_MODEL_RUNNER={os.environ.get('VLLM_USE_V2_MODEL_RUNNER', 'unset')}",
                vllm=vllm.__version__, torch=torch.__version__, device=device, python=platform.python_version())


def prompts_for(backend: Any, n: int) -> list[list[int]]:
    """The demo's logprob-question prompts (as tests/test_engine_scoring_vllm.py renders them)."""
    from harness.core.render import Renderer
    from harness.core.sample import Message
    from harness.data.readers import load_dataset
    from harness.methods.prompts import PromptLibrary

    q = PromptLibrary().get("logprob/question").text
    r = Renderer(backend.tokenizer)
    return [list(r.render(s.first_turn() + (Message("user", q),))) for s in load_dataset("demo")[::16][:n]]


def scoring_checks(report: Report, b: Any, tol: float) -> None:
    """The engine's scoring against vLLM's own paths (tolerances per token in log space)."""
    from harness.backends.base import Backend, loglikelihood_by_prefix
    from tokenization import ScoringPlan, TargetWords, from_backend

    ps = prompts_for(b, 4)
    plan = ScoringPlan.build(from_backend(b), TargetWords())
    seqs = [list(s) for s in plan.sequences()[:8]]
    pairs = [(p, c) for p in ps for c in seqs]
    per_token = tol * np.asarray([len(c) + 1 for _, c in pairs], dtype=np.float64)

    def view() -> None:
        full = b.next_token_logprobs(ps)
        ids = [int(i) for i in np.argsort(-full[0])[:300]]
        v = b.next_token_view(ps, ids, 20)
        err = float(np.max(np.abs(v.selected - full[:, ids])))
        report.check("view = full distribution", err <= tol, f"max |diff| {err:.2e} over {len(ps)}x{len(ids)} ids",
                     max_abs=err)

    def forced() -> None:
        recs = b._reduce([p for p, _ in pairs], [{"force": list(c)} for _, c in pairs], with_vllm_logprobs=True)
        err = max(abs(r["force"][j] - r["sampled"][j][t]) for (_, c), r in zip(pairs, recs) for j, t in enumerate(c))
        report.check("forced = vLLM's logprobs", err <= 1e-5, f"max |diff| {err:.2e}", max_abs=err)

    def loglik() -> None:
        got = np.asarray(b.loglikelihood(pairs))
        ref = np.asarray(loglikelihood_by_prefix(b, pairs))
        worst = float(np.max(np.abs(got - ref) / per_token))
        report.check("loglikelihood = per-prefix requests", worst <= 1.0,
                     f"max |diff| {float(np.max(np.abs(got - ref))):.2e} ({worst:.2f} of the per-token tolerance)",
                     worst_share=worst)

    def continuations() -> None:
        got = np.asarray(b.continuation_scores(pairs, plan.boundary_ids))
        b.start_after_first = False
        try:
            ref = np.asarray(b.continuation_scores(pairs, plan.boundary_ids))
        finally:
            del b.start_after_first
        mass = Backend.next_token_logmasses(b, [list(p) + list(c) for p, c in pairs], [plan.boundary_ids])[:, 0]
        worst = float(np.max(np.abs(got[:, 0] - ref[:, 0]) / per_token))
        merr = float(np.max(np.abs(got[:, 1] - mass)))
        report.check("continuations after the first token = from the prompt", worst <= 1.0,
                     f"{worst:.2f} of the per-token tolerance", worst_share=worst)
        report.check("boundary mass = full distribution", merr <= tol, f"max |diff| {merr:.2e}", max_abs=merr)

    def threads() -> None:
        ids = plan.first_ids()
        ref = b.continuation_scores(pairs, plan.boundary_ids)
        got: dict[int, Any] = {}

        def task(i: int) -> None:
            try:
                b.next_token_view([ps[i]], ids, 20)
                got[i] = b.continuation_scores([(ps[i], c) for c in seqs], plan.boundary_ids)
            except Exception as e:  # reported below
                got[i] = e

        ts = [threading.Thread(target=task, args=(i,)) for i in range(len(ps))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(600)
        bad = [v for v in got.values() if isinstance(v, Exception)]
        if bad or len(got) != len(ps):
            report.check("threads = one thread", False, f"{len(bad)} errors: {bad[:1]}")
            return
        flat = np.asarray([x for i in range(len(ps)) for x in got[i]])
        worst = float(np.max(np.abs(flat[:, 0] - np.asarray(ref)[:, 0]) / per_token))
        report.check("threads = one thread", worst <= 1.0, f"{worst:.2f} of the per-token tolerance",
                     worst_share=worst)

    def steering() -> None:
        from harness.backends.steered import Steering

        hidden = int(b.llm.llm_engine.model_config.hf_config.hidden_size)
        layer = int(b.llm.llm_engine.model_config.hf_config.num_hidden_layers) // 2
        ids = plan.first_ids()
        plain = b.next_token_view(ps[:2], ids, 0).selected
        vec = np.random.default_rng(0).standard_normal(hidden).astype(np.float32) * 8.0
        with b.steering(Steering({layer: vec})):
            steered = b.next_token_view(ps[:2], ids, 0).selected
        again = b.next_token_view(ps[:2], ids, 0).selected
        moved, back = float(np.max(np.abs(steered - plain))), float(np.max(np.abs(again - plain)))
        report.check("steering reaches the model", moved > 1e-3 and back <= tol,
                     f"steered view moved by {moved:.2e}, unsteered again {back:.2e} (0 moved: hooks not run, "
                     "e.g. under CUDA graphs)", moved=moved, back=back)

    for name, fn in (("view", view), ("forced", forced), ("loglikelihood", loglik),
                     ("continuations", continuations), ("threads", threads), ("steering", steering)):
        report.guarded(name, fn)


def demo_methods(report: Report, b: Any, n_samples: int, work: Path) -> None:
    """The demo's methods through the streaming loop and the batch loop."""
    from harness.data.readers import load_dataset
    from harness.methods import MethodConfig
    from harness.run.loop import run_methods
    from harness.runlog import RunLog

    s = load_dataset("demo")
    samples = s[: n_samples // 2] + s[-(n_samples - n_samples // 2):]
    config = MethodConfig(answer_tokens=128, probe_tokens=96, constrain=True)
    keys = {}
    for schedule in ("stream", "batch"):
        t0 = time.perf_counter()
        out = work / schedule
        summary = run_methods(samples, METHODS, b, out, config=config, progress=False, schedule=schedule)
        with RunLog(out, create=False) as st:
            keys[schedule] = {k for k, _ in st.iter_calls()}
            n = sum(len(st.result_dicts(m)) for m in METHODS)
        calls = sum(summary["_calls"]["model_calls"].values())
        report.check(f"demo methods ({schedule})", n == len(samples) * len(METHODS),
                     f"{n} records, {calls} engine calls in {time.perf_counter() - t0:.1f} s", records=n)
    # the same requests unless a greedy answer differs (a near tie, decided by the batch on a GPU)
    differ = len(keys["stream"] ^ keys["batch"])
    report.line("INFO", "stream and batch calls", f"{len(keys['stream'])} vs {len(keys['batch'])} call keys, "
                f"{differ} differ", differ=differ)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a local model directory (or an asset name: smollm2)")
    src.add_argument("--tokenizer", type=Path, help="tokenizer files for a random-init model of SmolLM2's shape")
    ap.add_argument("--dtype", default="float32", help="the engine's dtype (float32: the checks' tolerances)")
    ap.add_argument("--tol", type=float, default=1e-4, help="log-space tolerance (per token where forced)")
    ap.add_argument("--samples", type=int, default=8, help="demo samples for the methods (half eval, half deploy)")
    ap.add_argument("--expect-runner", choices=("v1", "v2"), help="fail unless the engine picked this runner")
    ap.add_argument("--work", type=Path, help="where the model and run directories go (default: a temp dir)")
    ap.add_argument("--json", type=Path, help="write every line's data here")
    a = ap.parse_args(argv)

    report = Report()
    work = a.work or Path(tempfile.mkdtemp(prefix="gpu-vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        env(report)
    except ImportError as e:
        report.line("FAIL", "env", f"vLLM or torch missing: {e}")
        return 1
    model = a.model or str(random_model(a.tokenizer, work / "model"))

    from harness.backends.vllm.backend import VLLMBackend
    from harness.backends.vllm.processor import INTERFACES

    t0 = time.perf_counter()
    try:
        b = VLLMBackend(model, dtype=a.dtype, max_model_len=4096)
    except Exception as e:  # the failure this script exists to catch
        report.line("FAIL", "start", f"{type(e).__name__}: {e}"[:3000])
        return _finish(report, a.json)
    runner = "v2" if b.llm.llm_engine.vllm_config.use_v2_model_runner else "v1"
    report.check("start", True, f"{time.perf_counter() - t0:.1f} s; model runner {runner}; processor "
                 f"interfaces {sorted(INTERFACES)}", seconds=time.perf_counter() - t0, runner=runner)
    if a.expect_runner:
        report.check("runner", runner == a.expect_runner, f"{runner} (expected {a.expect_runner})")
    try:
        scoring_checks(report, b, a.tol)
        report.guarded("demo methods", lambda: demo_methods(report, b, a.samples, work / "runs"))
    finally:
        b.close()
    return _finish(report, a.json)


def _finish(report: Report, path: Path | None) -> int:
    if path is not None:
        path.write_text(json.dumps(report.rows, indent=1) + "\n")
    print("FAILED" if report.failed else "ALL PASSED", flush=True)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
