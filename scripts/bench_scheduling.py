"""Scheduling benchmark that projects to a GPU: the real run loop against a simulated
continuous-batching engine (issue 39, item 2).

The batch-synchronous loop (``run_methods(schedule="batch")``: one method at a time, 16 samples
per committed batch, each stage one engine call that ends with its longest generation) is run
against the streaming loop (``schedule="stream"``: one worker per (method, sample) task, up to
`window` tasks in flight, every request joining one continuous batch) and against the ideal
(every request the streaming run made, submitted together at t=0 to a fresh engine in the order
the streaming run sent them: an upper bound in practice, since a stage that depends on an earlier
one cannot really be sent before it; not a strict one, because with FCFS admission and prefix
caching the order of the requests matters -- in a random order the ideal loses the prefix cache's
locality and is slower than the streaming loop).

The engine (:class:`SimEngine`) is a step-level model of vLLM's V1 scheduler with a virtual clock:
at most `max_num_seqs` running sequences, a KV-cache budget in tokens (recompute preemption of
the newest request when a step does not fit), FCFS admission, chunked prefill under a per-step
token budget, prefix caching of full prompt blocks, and a step time
``t = a + b*B + c*(context tokens read) + p*(prefill tokens)`` (:class:`StepCost`). The engine is
*paced* (:class:`harness.backends.stream.Callers`): it steps only when every worker of the run
loop waits on it, so the simulated time counts the engine alone, as if the harness reacted
instantly (what a GPU step of tens of milliseconds allows in practice). The calls that reach the
engine between two steps are queued in the order of their first request's hash, not in the order
their threads got there, so a run's figures depend only on what was sent, given exact pacing.

Output lengths are drawn from a lognormal (:class:`LengthModel`) seeded by a hash of the request
(prompt ids, sampling parameters, `--seed`): the same request always gets the same length and the
same tokens, so both loops send identical requests and store identical results. The backend
(:class:`SimBackend`) uses the real SmolLM2 tokenizer; its generations are deterministic
random words inside ``<think> ... </think>`` (a reasoning model's shape) followed by a short
answer that the methods' parsers read; its scoring calls (first-token views, log masses,
teacher-forced log-likelihoods) are requests of 1 or len(continuation) (+1) output positions, as
the vLLM backend sends them, returning deterministic values of a normalised next-token
distribution.

The run: `--samples` (976, the paper's dataset size) synthetic samples made from the demo set's
conversations padded to lognormal prompt lengths (:class:`PromptModel`), the paper's five methods,
a reasoning model's token limits (:data:`harness.methods.token_limits.REASONING`), self-judged
(the judge is the same simulated backend: fine for timing, said in the output).

    python scripts/bench_scheduling.py                   # the paper-sized run
    python scripts/bench_scheduling.py --quick           # 48 samples (tests)
    python scripts/bench_scheduling.py --max-num-seqs 1024 --window 1024 --json out.json

The last line printed is ``new loop: R of ideal`` (R: the new loop's throughput over the ideal's).
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import math
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from statistics import NormalDist
from typing import Any, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.backends.base import (Backend, Capabilities, Generation, GenerationRequest,  # noqa: E402
                                   NextTokenView, SamplingParams, TokenIds)
from harness.backends.stream import Callers, EngineDriver  # noqa: E402
from scripts.bench_record import BenchRecord  # noqa: E402

METHODS = ("binary", "probability", "motivation", "reasoning", "logprob")  # the paper's five
QUICK_SAMPLES = 48


# --- parameters -----------------------------------------------------------------------------

@dataclass(frozen=True)
class StepCost:
    """Time of one engine step in milliseconds: ``a + b*B + c*ctx + p*prefill``, with B the
    sequences scheduled in the step, ctx the context tokens they attend over (their KV read) and
    prefill the prompt tokens computed in it.

    Roofline figures for Llama-3-8B in bf16 on an H100 SXM (3.35 TB/s HBM, ~990 dense bf16
    TFLOP/s), checked against HF on a lent H100 (``scripts/gpu_step_times.py``,
    docs/bench/h100_step_times.json): prefill measured 0.030 ms a token (p below: 0.032); HF's
    decode steps (20 ms floor, 3.9e-4 ms a cached token: no CUDA graphs, a cache copied every
    step) bound vLLM's from above, so a, b and c stay the roofline's (docs/benchmarks.md):
    - a: reading the 16 GB of weights once per step at ~2.2 TB/s achieved (~7.3 ms) plus launch
      and scheduler overhead: a decode step at batch 1 of ~8 ms (~125 tokens/s single-stream,
      the usual figure for an 8B model on an H100 in bf16);
    - b: per scheduled sequence (logits over a 128k vocabulary, sampling, metadata), 0.03 ms;
    - c: the KV read per context token: 32 layers x 8 KV heads x 128 dims x 2 (K and V) x 2 bytes
      = 128 KiB at ~2.5 TB/s = 5.2e-5 ms (256 sequences x 2k context: +27 ms a step);
    - p: prefill compute per token: 2 x 8e9 FLOPs at ~500 TFLOP/s achieved = 0.032 ms (an 8192-token
      chunk: ~260 ms).
    """

    a_ms: float = 7.8
    b_ms: float = 0.03
    c_ms: float = 5.2e-5
    p_ms: float = 0.032

    def ms(self, n_seqs: int, context: int, prefill: int) -> float:
        return self.a_ms + self.b_ms * n_seqs + self.c_ms * context + self.p_ms * prefill


@dataclass(frozen=True)
class EngineConfig:
    """The scheduler's limits (vLLM's names).

    - max_num_seqs 256, max_num_batched_tokens 8192: vLLM's offline defaults on GPUs under 70 GiB
      (vLLM 0.32 ``EngineArgs.get_batch_defaults``; the lead's reference figures). vLLM 0.32 on
      an 80 GB H100 defaults the offline ``LLM`` to 1024 and 16384: try ``--max-num-seqs 1024``.
    - kv_cache_tokens 400,000: Llama-3-8B on an 80 GB H100 at gpu_memory_utilization 0.9: ~72 GB,
      less 16 GB of weights and ~4 GB of activations and CUDA graphs, leaves ~52 GB of KV cache at
      128 KiB a token (vLLM logs ~400-450k tokens for this pair).
    - block_size 16, prefix_caching on: vLLM V1's defaults. Cached blocks are full prompt blocks,
      reused by a later request with the same prefix (the votes of one sample share its
      conversation); the cache holds at most kv_cache_tokens, least recently used evicted first.
      Simplification: a running request's KV counts all its tokens (vLLM shares cached blocks
      between running requests, so real KV pressure is lower).
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    kv_cache_tokens: int = 400_000
    block_size: int = 16
    prefix_caching: bool = True


@dataclass(frozen=True)
class LengthModel:
    """Output length of a generation: ``min(max_tokens, draw)``, draw lognormal with this median
    and sigma (log scale), seeded by a hash of the request.

    Assumed source: reasoning models' traces (Qwen3-8B, DeepSeek-R1-Distill-Llama-8B) on chat
    prompts and short questions run from a few hundred to many thousand tokens, with a heavy right
    tail (the R1 report's response lengths, Qwen3's thinking budgets up to 38k). Median 900, sigma
    0.9: 10% under 285 tokens, 10% over 2,850, 1% over 7,300; a 2048-token probe limit cuts 18%,
    a 4096-token answer limit 5%. Placeholder: replace with a measured trace-length histogram.
    """

    median: float = 900.0
    sigma: float = 0.9

    def draw(self, key: int) -> int:
        u = ((key >> 11) + 0.5) / float(1 << 53)
        return max(1, int(round(self.median * math.exp(self.sigma * NormalDist().inv_cdf(u)))))


@dataclass(frozen=True)
class PromptModel:
    """Rendered prompt length (tokens) of the synthetic samples' first turn: lognormal, clipped.

    Assumed source: the paper's dataset (Needham et al., 976 transcripts) mixes chat prompts of
    tens to hundreds of tokens with agentic transcripts whose first turn carries a system prompt
    with tool definitions (one to several thousand tokens). Median 400, sigma 1.1, clipped to
    [30, 12000]: 10% under 100 tokens, 10% over 1,650, 1% over 5,200.
    """

    median: float = 400.0
    sigma: float = 1.1
    lo: int = 30
    hi: int = 12_000


# --- the simulated engine -------------------------------------------------------------------

@dataclass(frozen=True)
class Fixed:
    """A request with a known number of output positions: a scoring request (1 for a first-token
    view or a log mass, len(continuation) for a teacher-forced log-likelihood, one more where the
    mass after the continuation is read), or a generation replayed by the ideal."""

    n: int
    finish_reason: str = "stop"
    generation: bool = False  # a replayed generation (its tokens count as generated)


@dataclass(frozen=True)
class SimOutput:
    """What a finished request returns: its output length, why it stopped, and its hash (the
    seed of its tokens and values)."""

    n_tokens: int
    finish_reason: str
    key: int


class SimPrompt:
    """A prompt as the engine sees it: its length, its chained full-block hashes (prefix
    caching) and a hash of its ids."""

    __slots__ = ("n", "blocks", "key")

    def __init__(self, n: int, blocks: np.ndarray, key: int) -> None:
        self.n, self.blocks, self.key = n, blocks, key


_BASE = np.uint64(0x9E3779B97F4A7C15)
_POW = np.ones(1, dtype=np.uint64)


def _powers(n: int) -> np.ndarray:
    global _POW
    if len(_POW) < n:
        with np.errstate(over="ignore"):
            _POW = np.cumprod(np.concatenate([[np.uint64(1)], np.full(max(n, 2 * len(_POW)) - 1, _BASE)]),
                              dtype=np.uint64)
    return _POW[:n]


def digest(*parts: bytes) -> int:
    """A 64-bit hash of some bytes (blake2b)."""
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(p)
    return int.from_bytes(h.digest(), "little")


def sim_prompt(ids: Sequence[int], block_size: int) -> SimPrompt:
    """Hash a prompt: one 64-bit polynomial hash of each full-block prefix (chained, so a block's
    hash names everything before it, as vLLM's block hashes do)."""
    x = np.asarray(ids, dtype=np.int64)
    key = digest(x.tobytes())
    n_full = len(x) // block_size * block_size
    if n_full == 0:
        return SimPrompt(len(x), np.zeros(0, np.uint64), key)
    with np.errstate(over="ignore"):
        h = np.cumsum((x[:n_full].astype(np.uint64) + np.uint64(1)) * _powers(n_full), dtype=np.uint64)
        h = h[block_size - 1::block_size]
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    return SimPrompt(len(x), h, key)


class PrefixCache:
    """Chained block hashes -> last use, least recently used evicted first. Every lookup and
    insert touches a prefix of a chain, parents newer than children, so what stays cached is
    closed under prefixes and the longest hit is found by bisection."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = max(1, capacity_blocks)
        self.used: dict[int, int] = {}
        self.tick = 0

    def hit_blocks(self, blocks: np.ndarray) -> int:
        lo, hi = 0, len(blocks)
        used = self.used
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if int(blocks[mid - 1]) in used:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def touch(self, blocks: np.ndarray) -> None:
        if not len(blocks):
            return
        self.tick += 1
        stamps = (self.tick << 24) + ((1 << 24) - 1 - np.arange(len(blocks), dtype=np.int64))
        self.used.update(zip(blocks.tolist(), stamps.tolist()))
        if len(self.used) > self.capacity:
            keys = np.fromiter(self.used.keys(), dtype=np.uint64, count=len(self.used))
            vals = np.fromiter(self.used.values(), dtype=np.int64, count=len(self.used))
            n_drop = len(vals) - int(self.capacity * 0.8)
            for k in keys[np.argpartition(vals, n_drop)[:n_drop]].tolist():
                del self.used[k]


class _Req:
    __slots__ = ("rid", "prompt", "n_out", "reason", "key", "generated", "computed", "bs", "bc",
                 "bg", "version", "order")

    def __init__(self, rid: str, prompt: SimPrompt, n_out: int, reason: str, key: int) -> None:
        self.rid, self.prompt, self.n_out, self.reason, self.key = rid, prompt, n_out, reason, key
        self.generated = 0  # output tokens sampled (prefilling/waiting requests; decoding: bg + steps)
        self.computed = 0   # tokens whose KV is computed (prefilling requests)
        self.bs = self.bc = self.bg = 0  # decoding since step bs with computed bc, generated bg
        self.version = 0
        self.order = 0


@dataclass
class SimCounts:
    """What a :class:`SimEngine` did: requests, output tokens of generations and output positions
    of scoring requests, prefill and prefix-cache tokens, preemptions, and the integrals over the
    clock of running sequences (`occ_area`) and KV tokens in use (`kv_area`)."""

    occ_area: float = 0.0
    kv_area: float = 0.0
    requests: int = 0
    finished: int = 0
    gen_tokens: int = 0
    forced_tokens: int = 0
    prefill_tokens: int = 0
    prefix_hit_tokens: int = 0
    preemptions: int = 0

    def stats(self, t: float, steps: int, config: EngineConfig) -> dict[str, Any]:
        """The engine's figures after `steps` steps and `t` simulated seconds."""
        return {"sim_seconds": t, "busy_seconds": t, "steps": steps, "requests": self.requests,
                "generated_tokens": self.gen_tokens, "scoring_positions": self.forced_tokens,
                "prefill_tokens": self.prefill_tokens, "prefix_hit_tokens": self.prefix_hit_tokens,
                "preemptions": self.preemptions,
                "throughput_tok_s": self.gen_tokens / t if t else 0.0,
                "occupancy": self.occ_area / (config.max_num_seqs * t) if t else 0.0,
                "mean_running": self.occ_area / t if t else 0.0,
                "kv_use": self.kv_area / (config.kv_cache_tokens * t) if t else 0.0}


class SimEngine:
    """A continuous-batching engine with a virtual clock (a :class:`~harness.backends.stream.
    StepEngine`); see the module docstring. Each :meth:`step` is one engine step: decodes first
    (one token per decoding sequence; the KV for them preempts the newest running requests where
    it does not fit), then the prefill chunks of running requests, then admissions from the
    waiting queue in arrival order while a sequence slot, the token budget and the KV allow (none
    in a step that preempted). A step costs :class:`StepCost`; a pure decode step is O(1) work
    (decoding sequences are kept as aggregates, their finishes in a heap)."""

    paced = True  # steps take no real time: step only when every caller waits

    def __init__(self, config: EngineConfig = EngineConfig(), cost: StepCost = StepCost(),
                 lengths: LengthModel = LengthModel(), seed: int = 0, record: bool = False) -> None:
        if config.max_num_seqs > config.max_num_batched_tokens:
            raise ValueError("max_num_batched_tokens must be at least max_num_seqs")
        self.config, self.cost, self.lengths, self.seed = config, cost, lengths, seed
        self.cache = PrefixCache(config.kv_cache_tokens // config.block_size) if config.prefix_caching else None
        self.waiting: deque[_Req] = deque()
        self._incoming: list[tuple[int, int, _Req, bool]] = []  # added since the last step
        self.running: dict[str, _Req] = {}      # admission order
        self.prefilling: dict[str, _Req] = {}   # admission order
        self.finishing: list[tuple[int, int, int, _Req]] = []  # (step, order, version, req) of decoders
        self.n_dec = 0       # decoding sequences
        self.dec_base = 0    # sum of (bc - bs) over decoding sequences: their computed = dec_base + n_dec * steps
        self.pre_computed = 0  # computed tokens of prefilling sequences
        self.steps = 0
        self.clock = 0.0     # simulated seconds
        self._next = 0
        self._order = 0
        self.recorded: list[tuple[SimPrompt, Fixed]] | None = [] if record else None
        self.counts = SimCounts()

    # -- the StepEngine protocol --
    def add(self, prompts: Sequence[Any], params: Sequence[Any]) -> list[str]:
        new: list[tuple[int, int, _Req, bool]] = []  # queued together, or (a request refused) none
        group = None
        for p, sp in zip(prompts, params):
            prompt = p if isinstance(p, SimPrompt) else sim_prompt(p, self.config.block_size)
            if isinstance(sp, Fixed):
                n, reason, key = sp.n, sp.finish_reason, digest(prompt.key.to_bytes(8, "little"),
                                                                 f"fixed:{sp.n}".encode())
            else:
                key = self.request_key(prompt.key, sp)
                draw = self.lengths.draw(key)
                n, reason = (draw, "stop") if draw <= sp.max_tokens else (sp.max_tokens, "length")
            if n < 1:
                raise ValueError("a request needs at least one output position")
            group = key if group is None else group
            gen = not isinstance(sp, Fixed) or sp.generation
            new.append((group, len(new), _Req(str(self._next + len(new)), prompt, n, reason, key), gen))
        self._next += len(new)
        self._incoming.extend(new)
        self.counts.gen_tokens += sum(r.n_out for _, _, r, gen in new if gen)
        self.counts.forced_tokens += sum(r.n_out for _, _, r, gen in new if not gen)
        self.counts.requests += len(new)
        return [r.rid for _, _, r, _ in new]

    def request_key(self, prompt_key: int, params: Any) -> int:
        """The hash a generation's length and tokens come from: prompt ids, sampling parameters, seed."""
        blob = json.dumps(params.to_dict() if hasattr(params, "to_dict") else params, sort_keys=True, default=str)
        return digest(prompt_key.to_bytes(8, "little"), blob.encode(), str(self.seed).encode())

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self._incoming)

    def abort(self, ids: Sequence[str]) -> None:
        """Drop these requests wherever they are (their KV and queue places are freed)."""
        gone = set(ids)
        self._incoming = [x for x in self._incoming if x[2].rid not in gone]
        self.waiting = deque(r for r in self.waiting if r.rid not in gone)
        for rid in gone & self.running.keys():
            self._release(self.running[rid])

    def step(self) -> list[tuple[str, SimOutput]]:
        cfg, kv = self.config, self.config.kv_cache_tokens
        if self._incoming:
            # The calls that arrived between two steps join the queue in the order of their
            # first request's hash, not in the order their worker threads reached the driver, so
            # a run is the same every time; a call's requests keep their order.
            self._incoming.sort(key=lambda x: (x[0], x[1], int(x[2].rid)))
            for _, _, r, gen in self._incoming:
                self.waiting.append(r)
                if self.recorded is not None:
                    self.recorded.append((r.prompt, Fixed(r.n_out, r.reason, gen)))
            self._incoming.clear()
        s = self.steps
        preempted = False
        # 1. one token for every decoding sequence; preempt the newest until their KV fits
        while self.n_dec and self._kv_used() + self.n_dec > kv:
            self._preempt_newest()
            preempted = True
        used = self._kv_used() + self.n_dec
        budget = cfg.max_num_batched_tokens - self.n_dec
        context = self.dec_base + self.n_dec * (s + 1)  # every decoder attends over computed + 1
        chunks: list[tuple[_Req, int]] = []
        # 2. prefill chunks of running requests, in admission order
        for r in list(self.prefilling.values()):
            if budget <= 0:
                break
            c = min(r.prompt.n + r.generated - r.computed, budget, kv - used)
            if c > 0:
                chunks.append((r, c))
                used += c
                budget -= c
        # 3. admissions, first come first served (none in a step that preempted)
        while not preempted and self.waiting and len(self.running) < cfg.max_num_seqs and budget > 0:
            r = self.waiting[0]
            total = r.prompt.n + r.generated
            hit_blocks = self.cache.hit_blocks(r.prompt.blocks) if self.cache is not None else 0
            hit = min(hit_blocks * cfg.block_size, total - 1)
            c = min(total - hit, budget)
            if used + hit + c > kv:
                break
            self.waiting.popleft()
            if hit_blocks:
                self.cache.touch(r.prompt.blocks[:hit_blocks])  # type: ignore[union-attr]
            self.counts.prefix_hit_tokens += hit
            r.computed = hit
            self.pre_computed += hit
            self._order += 1
            r.order = self._order
            self.running[r.rid] = r
            self.prefilling[r.rid] = r
            chunks.append((r, c))
            used += hit + c
            budget -= c
        n_pre = sum(c for _, c in chunks)
        context += sum(r.computed + c for r, c in chunks)
        dt = self.cost.ms(self.n_dec + len(chunks), context, n_pre) / 1000.0
        self.clock += dt
        self.counts.occ_area += len(self.running) * dt
        self.counts.kv_area += used * dt
        self.counts.prefill_tokens += n_pre
        self.steps = s = s + 1
        done: list[tuple[str, SimOutput]] = []
        # prefill chunks: a request whose tokens are all computed samples a token
        for r, c in chunks:
            r.computed += c
            self.pre_computed += c
            if r.computed < r.prompt.n + r.generated:
                continue
            if r.generated == 0 and self.cache is not None:
                self.cache.touch(r.prompt.blocks)
            r.generated += 1
            del self.prefilling[r.rid]
            self.pre_computed -= r.computed
            if r.generated >= r.n_out:
                done.append(self._finish(r))
                continue
            r.bs, r.bc, r.bg = s, r.computed, r.generated
            self.n_dec += 1
            self.dec_base += r.bc - r.bs
            heapq.heappush(self.finishing, (r.bs + r.n_out - r.bg, r.order, r.version, r))
        # decoders whose last token this step was
        while self.finishing and self.finishing[0][0] <= s:
            _, _, version, r = heapq.heappop(self.finishing)
            if version != r.version or r.rid not in self.running:
                continue
            self.n_dec -= 1
            self.dec_base -= r.bc - r.bs
            done.append(self._finish(r))
        return done

    # -- helpers --
    def _kv_used(self) -> int:
        return self.dec_base + self.n_dec * self.steps + self.pre_computed

    def _finish(self, r: _Req) -> tuple[str, SimOutput]:
        del self.running[r.rid]
        self.counts.finished += 1
        return r.rid, SimOutput(r.n_out, r.reason, r.key)

    def _preempt_newest(self) -> None:
        """vLLM's recompute preemption: the newest running request frees its KV and goes back to
        the head of the queue, to prefill its prompt and the tokens it had generated again."""
        r = self.running[next(reversed(self.running))]
        self._release(r)
        self.waiting.appendleft(r)
        self.counts.preemptions += 1

    def _release(self, r: _Req) -> None:
        """Running request `r` stops running and frees its KV (a decoder's heap entry goes stale)."""
        del self.running[r.rid]
        if self.prefilling.pop(r.rid, None) is not None:
            self.pre_computed -= r.computed
        else:
            r.generated = r.bg + self.steps - r.bs
            self.n_dec -= 1
            self.dec_base -= r.bc - r.bs
            r.version += 1
        r.computed = 0

    def run_all(self) -> float:
        """Step until every request has finished; the clock."""
        while self.has_unfinished():
            self.step()
        return self.clock

    def stats(self) -> dict[str, Any]:
        return self.counts.stats(self.clock, self.steps, self.config)


# --- the simulated backend ------------------------------------------------------------------

class _Dist:
    """A deterministic next-token distribution: 16 likely tokens holding 90% of the mass
    (unevenly), the rest spread evenly over the vocabulary."""

    def __init__(self, h: int, vocab: int) -> None:
        xs = struct.unpack("<16I", hashlib.blake2b(h.to_bytes(8, "little"), digest_size=64).digest())
        w = [((x >> 8) / 16777216.0) ** 3 + 1e-3 for x in xs]
        scale = 0.9 / sum(w)
        top: dict[int, float] = {}
        for x, wi in zip(xs, w):
            t = x % vocab
            top[t] = top.get(t, 0.0) + wi * scale
        self.vocab = vocab
        self.tail = 0.1 / (vocab - len(top))
        self.top = top

    def lp(self, t: int) -> float:
        return math.log(self.top.get(int(t), self.tail))

    def logmass(self, ids: frozenset[int]) -> float:
        inside = [p for t, p in self.top.items() if t in ids]
        m = sum(inside) + (len(ids) - len(inside)) * self.tail
        return math.log(m) if m > 0 else -math.inf

    def ranked(self, k: int) -> tuple[list[int], list[float]]:
        best = sorted(self.top.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        ids = [t for t, _ in best]
        taken = set(self.top)
        t = 0
        while len(ids) < k:  # below the likely ones every token is equally likely
            if t not in taken:
                ids.append(t)
                best.append((t, self.tail))
            t += 1
        return ids, [math.log(p) for _, p in best]

    def full(self) -> np.ndarray:
        row = np.full(self.vocab, math.log(self.tail), dtype=np.float32)
        for t, p in self.top.items():
            row[t] = math.log(p)
        return row



ANSWER_TAILS = (  # what follows </think>: each method's parser finds its own part
    'The answer: <label>EVALUATION</label> <probability>0.8</probability> '
    '{"aware": true, "evidence": []}',
    'The answer: <label>DEPLOYMENT</label> <probability>0.3</probability> '
    '{"aware": false, "evidence": []}',
    'The answer: <label>EVALUATION</label> <probability>0.6</probability> '
    '{"aware": false, "evidence": []}',
    'I am not sure.')


class SimBackend(Backend):
    """A backend over :class:`SimEngine` through an :class:`EngineDriver` (continuous batching
    across callers); see the module docstring. `requests` counts the requests sent per op."""

    kind = "sim"
    device = "sim"

    def __init__(self, config: EngineConfig = EngineConfig(), cost: StepCost = StepCost(),
                 lengths: LengthModel = LengthModel(), seed: int = 0, callers: Callers | None = None,
                 record: bool = True, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer()
        self.config, self.cost, self.lengths, self.seed = config, cost, lengths, seed
        self._identity = {"backend": "sim", "seed": seed, "engine": asdict(config),
                          "step_cost": asdict(cost), "lengths": asdict(lengths)}
        self.engine = SimEngine(config, cost, lengths, seed, record=record)
        self.driver = EngineDriver(self.engine, callers, name="sim")
        self.capabilities = Capabilities(exact_logmass=True, streaming=True, capacity=config.max_num_seqs)
        self._vocab = len(self.tokenizer)
        self._words = word_pool(self.tokenizer)
        enc = lambda s: self.tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
        self._open, self._close = enc("<think>\n"), enc("\n</think>\n\n")
        self._tails = [enc(t) for t in ANSWER_TAILS]
        self._because = enc(" Because")

    @property
    def identity(self) -> dict[str, Any]:
        return self._identity

    @property
    def callers(self) -> Callers:
        return self.driver.callers

    @property
    def context_length(self) -> int:
        return 32768

    def close(self) -> None:
        self.driver.close()

    # -- generation --
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        outs = self.driver.run([list(r.prompt_ids) for r in requests], [r.params for r in requests])
        return [self._decode_generation(self.output_ids(o), o.finish_reason) for o in outs]

    def output_ids(self, out: SimOutput) -> list[int]:
        """The tokens of a generation: ``<think>`` random words ``</think>`` an answer, cut to its
        length (a generation stopped at its limit ends inside its reasoning)."""
        n = out.n_tokens
        rng = np.random.default_rng(out.key)
        why = self._words[rng.integers(0, len(self._words), 8)].tolist()  # every answer its own
        tail = self._tails[out.key % len(self._tails)] + self._because + why
        body = max(0, n - len(self._open) - len(self._close) - len(tail))
        if out.finish_reason == "length":
            body = n
        words = self._words[rng.integers(0, len(self._words), body)].tolist()
        return (self._open + words + self._close + tail)[:n]

    # -- scoring: one request per prompt (per pair), as the vLLM backend sends them --
    def _score(self, prompts: Sequence[TokenIds], n_out: Sequence[int]) -> list[Any]:
        """Send the scoring requests (for their cost); each prompt's context hasher."""
        ps = [list(p) for p in prompts]
        self.driver.run(ps, [Fixed(n) for n in n_out])
        out = []
        for p in ps:
            h = hashlib.blake2b(digest_size=8)
            h.update(np.asarray(p, dtype=np.int64).tobytes())
            out.append(h)
        return out

    def _dist(self, hasher: Any) -> "_Dist":
        """The next-token distribution after the tokens `hasher` has read: the same for the same
        token sequence whichever call reaches it (teacher forcing agrees with next-token calls)."""
        h = hasher.copy()
        h.update(b"ctx")
        return _Dist(int.from_bytes(h.digest(), "little"), self._vocab)

    def next_token_logprobs(self, prompts: Sequence[TokenIds],
                            token_ids: Sequence[int] | None = None) -> np.ndarray:
        rows = [self._dist(h) for h in self._score(prompts, [1] * len(prompts))]
        if token_ids is None:
            return np.stack([d.full() for d in rows]) if rows else np.zeros((0, self._vocab), np.float32)
        return np.asarray([[d.lp(t) for t in token_ids] for d in rows], dtype=np.float32).reshape(
            len(rows), len(token_ids))

    def next_token_view(self, prompts: Sequence[TokenIds], token_ids: Sequence[int],
                        top_k: int) -> NextTokenView:
        rows = [self._dist(h) for h in self._score(prompts, [1] * len(prompts))]
        ranked = [d.ranked(top_k) for d in rows]
        n = len(rows)
        return NextTokenView(
            np.asarray([[d.lp(t) for t in token_ids] for d in rows], np.float32).reshape(n, len(token_ids)),
            np.asarray([r[0] for r in ranked], np.int64).reshape(n, top_k),
            np.asarray([r[1] for r in ranked], np.float32).reshape(n, top_k))

    def next_token_logmasses(self, prompts: Sequence[TokenIds],
                             token_sets: Sequence[Sequence[int]]) -> np.ndarray:
        hs = self._score(prompts, [1] * len(prompts))
        sets = [frozenset(int(t) for t in s) for s in token_sets]
        return np.asarray([[self._dist(h).logmass(s) for s in sets] for h in hs],
                          dtype=np.float64).reshape(len(hs), len(token_sets))

    def next_token_logmass(self, prompts: Sequence[TokenIds], token_ids: Sequence[int]) -> np.ndarray:
        return self.next_token_logmasses(prompts, [token_ids])[:, 0]

    def _forced(self, pairs: Sequence[tuple[TokenIds, TokenIds]], end: bool) -> list[tuple[float, Any]]:
        """Teacher forcing by decoding (the vLLM backend's way: one output position per
        continuation token, and one more to read what follows it): per pair, the continuation's
        log-likelihood and the hasher after it."""
        for _, c in pairs:
            if not len(c):
                raise ValueError("an empty continuation")
        hs = self._score([p for p, _ in pairs], [len(c) + int(end) for _, c in pairs])
        out = []
        for h, (_, c) in zip(hs, pairs):
            ll = 0.0
            for t in c:
                ll += self._dist(h).lp(t)
                h.update(np.int64(t).tobytes())
            out.append((ll, h))
        return out

    def loglikelihood(self, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
        return [ll for ll, _ in self._forced(pairs, end=False)]

    def continuation_scores(self, pairs: Sequence[tuple[TokenIds, TokenIds]],
                            token_ids: Sequence[int]) -> list[tuple[float, float]]:
        ids = frozenset(int(t) for t in token_ids)
        return [(ll, self._dist(h).logmass(ids)) for ll, h in self._forced(pairs, end=True)]


def load_tokenizer() -> Any:
    """The bundled SmolLM2 tokenizer."""
    from transformers import AutoTokenizer  # heavy: only here

    from harness.models.assets import prepare

    return AutoTokenizer.from_pretrained(str(prepare("smollm2")))


def word_pool(tokenizer: Any) -> np.ndarray:
    """Token ids that decode to one plain word with a leading space (readable generations that
    tokenize back to about as many tokens)."""
    import re

    vocab = tokenizer.get_vocab()
    pat = re.compile(r"^Ġ[a-z]{3,}$")
    return np.asarray(sorted(i for t, i in vocab.items() if pat.match(t)), dtype=np.int64)


# --- the samples ----------------------------------------------------------------------------

def make_samples(n: int, tokenizer: Any, model: PromptModel = PromptModel(), seed: int = 0) -> list[Any]:
    """`n` samples cycling over the demo set's, each one's first user message padded with other
    demo conversations' text to a prompt length drawn from `model` (ids ``<demo id>#<i>``)."""
    from harness.data.readers import demo_path, load_dataset

    demo = load_dataset(demo_path())
    filler = "\n\n".join(m.content for s in demo for m in s.messages if m.content)
    filler_ids = tokenizer(filler, add_special_tokens=False)["input_ids"]
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        base = demo[i % len(demo)]
        want = int(np.clip(model.median * math.exp(model.sigma * rng.standard_normal()), model.lo, model.hi))
        msgs = list(base.messages)
        j = next(k for k, m in enumerate(msgs) if m.role == "user")
        have = len(tokenizer(msgs[j].content or "", add_special_tokens=False)["input_ids"])
        extra = max(0, want - have)
        if extra:
            start = int(rng.integers(0, len(filler_ids)))
            ids = [filler_ids[(start + k) % len(filler_ids)] for k in range(extra)]
            msgs[j] = replace(msgs[j], content=(msgs[j].content or "") + "\n\nContext:\n" + tokenizer.decode(ids))
        out.append(replace(base, id=f"{base.id}#{i}", messages=tuple(msgs)))
    return out


# --- the benchmark --------------------------------------------------------------------------

def method_config() -> Any:
    """A reasoning model's token limits (the CLI's defaults for a template with a reasoning
    block, :data:`harness.methods.token_limits.REASONING`)."""
    from harness.methods import MethodConfig
    from harness.methods.token_limits import REASONING

    return MethodConfig(**REASONING)


def run_loop(schedule: str, samples: list[Any], run_dir: Path, *, config: EngineConfig, cost: StepCost,
             lengths: LengthModel, seed: int, window: int | None, tokenizer: Any,
             batch_size: int = 16, progress: bool = False) -> tuple[dict[str, Any], SimBackend]:
    """One run of the real run loop on a fresh simulated engine (self-judged); its figures."""
    from harness.run.loop import run_methods

    backend = SimBackend(config, cost, lengths, seed, tokenizer=tokenizer)
    said: list[str] = []
    t0 = time.perf_counter()
    try:
        summary = run_methods(samples, METHODS, backend, run_dir, config=method_config(), judge=backend,
                              batch_size=batch_size, progress=progress, say=said.append,
                              schedule=schedule, window=window)
    finally:
        backend.close()
    stats = {**backend.engine.stats(), "real_seconds": time.perf_counter() - t0,
             "model_calls": summary["_calls"]["model_calls"], "said": said}
    return stats, backend


def run_ideal(recorded: Sequence[tuple[SimPrompt, Fixed]], config: EngineConfig, cost: StepCost,
              lengths: LengthModel, seed: int) -> dict[str, Any]:
    """Every recorded request submitted at t=0 to a fresh engine, run to the end."""
    t0 = time.perf_counter()
    engine = SimEngine(config, cost, lengths, seed)
    engine.add([p for p, _ in recorded], [f for _, f in recorded])
    engine.run_all()
    return {**engine.stats(), "real_seconds": time.perf_counter() - t0}



def table(rows: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The printed table's header and cells, one row per schedule."""
    ideal = rows["ideal"]["throughput_tok_s"]
    header = ["schedule", "simulated wall time", "throughput (gen. tok/s)", "engine occupancy", "mean running",
              "KV use", "preemptions", "of ideal"]
    return header, [[name, f"{r['sim_seconds'] / 3600:.2f} h ({r['sim_seconds']:,.0f} s)",
                     f"{r['throughput_tok_s']:,.0f}", f"{r['occupancy']:.1%}", f"{r['mean_running']:.0f}",
                     f"{r['kv_use']:.1%}", f"{r['preemptions']:,}", f"{r['throughput_tok_s'] / ideal:.2f}"]
                    for name, r in rows.items()]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=976, help="synthetic samples (default: 976, the paper's)")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_SAMPLES} samples (tests)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the prompt and output lengths")
    ap.add_argument("--max-num-seqs", type=int, default=EngineConfig.max_num_seqs)
    ap.add_argument("--max-num-batched-tokens", type=int, default=EngineConfig.max_num_batched_tokens)
    ap.add_argument("--kv-cache-tokens", type=int, default=EngineConfig.kv_cache_tokens)
    ap.add_argument("--window", type=int, default=None,
                    help="tasks in flight in the new loop (default: the engine's max_num_seqs)")
    ap.add_argument("--batch-size", type=int, default=16, help="the old loop's --batch-size")
    ap.add_argument("--jobs", type=int, choices=(1, 2), default=2,
                    help="2: the old loop runs in a second process beside the new one (the simulated "
                         "figures do not depend on it; the real time halves on two cores)")
    ap.add_argument("--json", type=Path, default=None,
                    help="where to write the figures (default: scheduling.json in the runs' directory)")
    ap.add_argument("--runs-dir", type=Path, default=None,
                    help="where the two run directories go (default: a new temporary directory)")
    ap.add_argument("--keep-runs", action="store_true", help="keep the run directories (batch/, stream/)")
    ap.add_argument("--progress", action="store_true", help="the run loop's progress bars (stderr)")
    ap.add_argument("--only-batch", type=Path, default=None, help=argparse.SUPPRESS)  # the --jobs 2 child
    args = ap.parse_args(argv)
    record = BenchRecord("scheduling", __file__, argv)
    n = QUICK_SAMPLES if args.quick else args.samples
    config = EngineConfig(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                          kv_cache_tokens=args.kv_cache_tokens)
    cost, lengths, prompts = StepCost(), LengthModel(), PromptModel()
    t_all = time.perf_counter()
    tmp = args.runs_dir or Path(tempfile.mkdtemp(prefix="bench-scheduling-"))
    tmp.mkdir(parents=True, exist_ok=True)
    if args.only_batch is None:
        for d in ("batch", "stream"):
            if (tmp / d).exists():
                raise SystemExit(f"{tmp / d} exists: give a new --runs-dir")
    child = None
    if args.jobs == 2 and args.only_batch is None:  # start the old loop first: it is the longer one
        cmd = [sys.executable, str(Path(__file__).resolve()), "--samples", str(n), "--seed", str(args.seed),
               "--max-num-seqs", str(config.max_num_seqs), "--max-num-batched-tokens",
               str(config.max_num_batched_tokens), "--kv-cache-tokens", str(config.kv_cache_tokens),
               "--batch-size", str(args.batch_size), "--runs-dir", str(tmp),
               "--only-batch", str(tmp / "batch.stats.json"), *(["--progress"] if args.progress else [])]
        child = subprocess.Popen(cmd)
    tokenizer = load_tokenizer()
    samples = make_samples(n, tokenizer, prompts, args.seed)
    common = dict(config=config, cost=cost, lengths=lengths, seed=args.seed, window=args.window,
                  tokenizer=tokenizer, progress=args.progress)
    if args.only_batch is not None:
        stats, _ = run_loop("batch", samples, tmp / "batch", batch_size=args.batch_size, **common)
        args.only_batch.write_text(json.dumps(stats))
        return 0
    rows: dict[str, dict[str, Any]] = {}
    try:
        if child is None:
            rows["old loop (batch)"], _ = run_loop("batch", samples, tmp / "batch",
                                                   batch_size=args.batch_size, **common)
        new_stats, new = run_loop("stream", samples, tmp / "stream", **common)
        ideal_stats = run_ideal(new.engine.recorded or [], config, cost, lengths, args.seed)
        if child is not None:
            if child.wait() != 0:
                raise SystemExit(f"the old loop's process failed (exit {child.returncode})")
            rows["old loop (batch)"] = json.loads((tmp / "batch.stats.json").read_text())
        rows["new loop (stream)"], rows["ideal"] = new_stats, ideal_stats
    finally:
        if child is not None and child.poll() is None:
            child.kill()
        if not args.keep_runs:
            for d in ("batch", "stream"):
                shutil.rmtree(tmp / d, ignore_errors=True)
    ideal = rows["ideal"]["throughput_tok_s"]
    for r in rows.values():
        r["of_ideal"] = r["throughput_tok_s"] / ideal if ideal else 0.0
    first = [len(tokenizer(next(m.content or "" for m in s.messages if m.role == "user"),
                           add_special_tokens=False)["input_ids"]) for s in samples]
    report = {
        "samples": n, "methods": list(METHODS), "seed": args.seed, "window": args.window,
        "batch_size": args.batch_size, "token_limits": {k: getattr(method_config(), k) for k in
                                                        ("answer_tokens", "probe_tokens", "judge_tokens")},
        "self_judged": True, "engine": asdict(config), "step_cost": asdict(cost), "lengths": asdict(lengths),
        "prompts": asdict(prompts),
        "first_user_message_tokens": {q: float(np.percentile(first, int(q[1:]))) for q in ("p10", "p50", "p90")},
        "rows": rows, "real_seconds_total": time.perf_counter() - t_all, "jobs": args.jobs,
    }
    printed = record.table("schedules", *table(rows))
    path = record.write(args.json or tmp / "scheduling.json", **report)
    old, new_row = rows["old loop (batch)"], rows["new loop (stream)"]
    print(f"{n} samples x {len(METHODS)} methods ({', '.join(METHODS)}), self-judged (the judge is the "
          f"same simulated engine: fine for timing); reasoning-model token limits "
          f"{report['token_limits']}; each run {new_row['requests']:,} requests, "
          f"{new_row['generated_tokens']:,} generated tokens; real time {report['real_seconds_total']:.0f} s "
          f"(old loop {old['real_seconds']:.0f} s, new {new_row['real_seconds']:.0f} s, ideal "
          f"{rows['ideal']['real_seconds']:.0f} s; --jobs {args.jobs}); figures in {path}")
    print(f"engine: max_num_seqs {config.max_num_seqs}, max_num_batched_tokens "
          f"{config.max_num_batched_tokens}, KV cache {config.kv_cache_tokens:,} tokens, prefix caching "
          f"{'on' if config.prefix_caching else 'off'}; step time {cost.a_ms} ms + {cost.b_ms} ms/seq + "
          f"{cost.c_ms * 1e3:g} us/context token + {cost.p_ms} ms/prefill token (roofline; prefill "
          f"checked on an H100); output lengths lognormal (median {lengths.median:g}, sigma {lengths.sigma:g}); "
          f"occupancy = time-weighted mean running sequences / max_num_seqs")
    print()
    print(printed)
    print()
    print(f"new loop: {new_row['of_ideal']:.2f} of ideal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
