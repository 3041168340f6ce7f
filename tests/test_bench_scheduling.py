"""scripts/bench_scheduling.py: the simulated engine's clock and scheduler, the simulated
backend's values, and a small run of the real run loop through both schedules."""

from __future__ import annotations

import io
import json
import math
import random
import re
import threading
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]


def _load():
    return load_script("bench_scheduling")


bs = _load()


def _expected_ms(cost, cfg, prompt: int, n_out: int) -> float:
    """A lone request, computed from the step-time model by hand: chunked prefill of the prompt
    (the last chunk samples the first token), then one decode step per further token attending
    over everything before it."""
    t, done = 0.0, 0
    while done < prompt:
        c = min(prompt - done, cfg.max_num_batched_tokens)
        t += cost.a_ms + cost.b_ms + cost.c_ms * (done + c) + cost.p_ms * c
        done += c
    for k in range(1, n_out):
        t += cost.a_ms + cost.b_ms + cost.c_ms * (prompt + k)
    return t


@pytest.mark.parametrize("prompt,n_out", [(7, 1), (100, 1), (100, 57), (8192, 3), (20000, 40)])
def test_single_request_makespan_is_its_step_time_sum(prompt, n_out):
    cfg, cost = bs.EngineConfig(), bs.StepCost()
    e = bs.SimEngine(cfg, cost)
    (rid,) = e.add([list(range(prompt))], [bs.Fixed(n_out)])
    got = []
    while e.has_unfinished():
        got += e.step()
    assert [r for r, _ in got] == [rid] and got[0][1].n_tokens == n_out
    assert e.clock * 1000 == pytest.approx(_expected_ms(cost, cfg, prompt, n_out), rel=1e-12)
    assert e.steps == math.ceil(prompt / cfg.max_num_batched_tokens) + n_out - 1
    assert e.stats()["occupancy"] == pytest.approx(1 / cfg.max_num_seqs)


def _queued(e) -> list:
    """The requests added since the engine's last step."""
    return [x[2] for x in e._incoming]


def _kv_by_hand(e) -> int:
    return sum(r.computed if r.rid in e.prefilling else r.bc + e.steps - r.bs for r in e.running.values())


def test_engine_limits_preemption_and_prefix_cache():
    """Under a small KV cache and few slots: the limits hold at every step, preempted requests
    finish with their full length, and the aggregates match a by-hand count."""
    cfg = bs.EngineConfig(max_num_seqs=8, max_num_batched_tokens=512, kv_cache_tokens=6000)
    e = bs.SimEngine(cfg, bs.StepCost())
    rng = random.Random(1)
    shared = [rng.randrange(49152) for _ in range(300)]  # a common prefix: prefix-cache hits
    want = {}
    for i in range(60):
        p = shared + [rng.randrange(49152) for _ in range(rng.randrange(1, 900))]
        (rid,) = e.add([p], [bs.Fixed(rng.randrange(1, 700))])
        want[rid] = _queued(e)[-1].n_out
    got = {}
    while e.has_unfinished():
        for rid, out in e.step():
            got[rid] = out.n_tokens
        assert len(e.running) <= cfg.max_num_seqs
        assert e._kv_used() == _kv_by_hand(e) <= cfg.kv_cache_tokens
    assert got == want
    st = e.stats()
    assert st["preemptions"] > 0 and st["prefix_hit_tokens"] > 0
    assert 0 < st["occupancy"] <= 1 and 0 < st["kv_use"] <= 1


def test_abort_frees_what_each_request_held_and_a_refused_call_queues_nothing():
    """The driver's abort (issue 49) on requests waiting, prefilling in chunks and decoding: the
    KV aggregates still match a by-hand count, the others finish, the aborted never come out; a
    call with a request of no output position queues none of its requests."""
    cfg = bs.EngineConfig(max_num_seqs=4, max_num_batched_tokens=256, kv_cache_tokens=20000)
    e = bs.SimEngine(cfg, bs.StepCost())
    ids = e.add([[k] * 40 for k in range(3)] + [[9] * 2000] + [[k] * 30 for k in range(5, 8)],
                [bs.Fixed(50)] * 3 + [bs.Fixed(5)] + [bs.Fixed(3)] * 3)
    with pytest.raises(ValueError, match="output position"):
        e.add([[1, 2], [3, 4]], [bs.Fixed(2), bs.Fixed(0)])
    for _ in range(3):
        e.step()
    assert ids[0] in e.running and ids[0] not in e.prefilling  # decoding
    assert ids[3] in e.prefilling and ids[-1] in {r.rid for r in e.waiting}
    gone = {ids[0], ids[3], ids[-1]}
    e.abort(sorted(gone) + ["no-such-id"])
    assert e._kv_used() == _kv_by_hand(e)
    got = set()
    while e.has_unfinished():
        got |= {rid for rid, _ in e.step()}
        assert e._kv_used() == _kv_by_hand(e)
    assert got == set(ids) - gone


def test_output_length_is_a_function_of_the_request():
    e1, e2 = bs.SimEngine(), bs.SimEngine()
    prompts = [[1, 2, 3, k] for k in range(200)]
    params = [bs.SamplingParams(max_tokens=2048)] * 200
    e1.add(prompts, params)
    e2.add(list(reversed(prompts)), params)
    n1 = {tuple(r.prompt.blocks.tolist()) + (r.prompt.key,): r.n_out for r in _queued(e1)}
    n2 = {tuple(r.prompt.blocks.tolist()) + (r.prompt.key,): r.n_out for r in _queued(e2)}
    assert n1 == n2
    lens = sorted(n1.values())
    assert max(lens) == 2048 and lens[0] < 400  # long-tailed, cut at max_tokens
    assert [r.reason for r in _queued(e1) if r.n_out == 2048][0] == "length"
    other = bs.SimEngine(seed=1)
    other.add(prompts, params)
    assert [r.n_out for r in _queued(other)] != [r.n_out for r in _queued(e1)]


def test_calls_between_two_steps_queue_in_a_canonical_order():
    """Which worker thread reaches the driver first does not change the queue (a run's figures
    depend only on what was sent); a call's own requests keep their order (the ideal's replay)."""
    a, b = [[1, 2, k] for k in range(5)], [[9, 9, k] for k in range(3)]
    e1, e2 = bs.SimEngine(record=True), bs.SimEngine(record=True)
    e1.add(a, [bs.Fixed(1)] * 5)
    e1.add(b, [bs.Fixed(2)] * 3)
    e2.add(b, [bs.Fixed(2)] * 3)
    e2.add(a, [bs.Fixed(1)] * 5)
    e1.step()
    e2.step()
    order = [(p.key, f.n) for p, f in e1.recorded]
    assert order == [(p.key, f.n) for p, f in e2.recorded] and len(order) == 8
    assert [k for k, n in order if n == 1] == [bs.sim_prompt(p, 16).key for p in a]


@pytest.fixture(scope="module")
def backend():
    b = bs.SimBackend()
    yield b
    b.close()


def test_backend_values_are_consistent(backend):
    b = backend
    p, c = [5, 6, 7, 8], [101, 102, 103]
    ll = b.loglikelihood([(p, c)])[0]
    by_prefix = sum(float(b.next_token_logprobs([p + c[:k]], [c[k]])[0, 0]) for k in range(len(c)))
    assert ll == pytest.approx(by_prefix, abs=1e-4) and ll < 0
    full = b.next_token_logprobs([p]).astype(np.float64)
    assert full.shape == (1, b.vocab_size) and np.isfinite(full).all() and (full < 0).all()
    assert np.exp(full).sum() == pytest.approx(1.0, abs=1e-5)
    ids = [101, 7, 9000]
    (cll, mass), = b.continuation_scores([(p, c)], ids)
    assert cll == pytest.approx(ll) and mass == pytest.approx(float(b.next_token_logmass([p + c], ids)[0]))
    assert mass == pytest.approx(float(np.log(np.exp(b.next_token_logprobs([p + c]).astype(np.float64)[0, ids]).sum())),
                                 abs=1e-5)
    v = b.next_token_view([p, c], ids, 20)
    assert v.selected.shape == (2, 3) and v.top_ids.shape == v.top_logprobs.shape == (2, 20)
    assert (np.diff(v.top_logprobs, axis=1) <= 0).all() and (v.top_logprobs < 0).all()
    assert np.allclose(v.top_logprobs[0], full[0, v.top_ids[0]], atol=1e-5)
    g1, g2 = b.generate([bs.GenerationRequest((1, 2, 3), bs.SamplingParams(max_tokens=4096))] * 2)
    assert g1 == g2 and g1.reasoning and g1.finish_reason == "stop"
    (cut,) = b.generate([bs.GenerationRequest((1, 2, 3), bs.SamplingParams(max_tokens=20))])
    assert len(cut.token_ids) == 20 and cut.finish_reason == "length" and cut.text == ""


def test_quick_run_old_vs_new_loop(tmp_path):
    """Both loops on a few samples: the new loop keeps the engine fuller than the old one on
    long-tailed lengths, sends exactly the same requests (same cache keys) and stores the same
    records; the script's last line is `new loop: R of ideal`."""
    from harness.runlog import RunLog

    out, runs = io.StringIO(), tmp_path / "runs"
    result: dict = {}

    def go():
        with redirect_stdout(out):
            result["rc"] = bs.main(["--samples", "10", "--runs-dir", str(runs), "--keep-runs",
                                    "--json", str(tmp_path / "s.json")])

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout=600)
    assert not t.is_alive(), "the run did not end in 10 minutes (a paced engine waiting forever?)"
    assert result["rc"] == 0
    lines = out.getvalue().strip().splitlines()
    assert re.fullmatch(r"new loop: \d+\.\d\d of ideal", lines[-1])
    rep = json.loads((tmp_path / "s.json").read_text())
    old, new, ideal = (rep["rows"][k] for k in ("old loop (batch)", "new loop (stream)", "ideal"))
    assert old["occupancy"] < new["occupancy"]
    assert old["sim_seconds"] > new["sim_seconds"] >= ideal["sim_seconds"] * 0.98
    assert lines[-1] == f"new loop: {new['of_ideal']:.2f} of ideal"
    assert old["requests"] == new["requests"] == ideal["requests"]
    assert old["generated_tokens"] == new["generated_tokens"] == ideal["generated_tokens"]
    printed = out.getvalue()  # the bench record holds the table as printed (issue 38, item 5)
    assert all("| " + " | ".join(r) + " |" in printed for r in rep["figures"]["schedules"]["rows"])
    assert rep["commit"]["sha"] and rep["command"][1:3] == ["scripts/bench_scheduling.py", "--samples"]

    def content(d):
        with RunLog(d, readonly=True) as store:
            keys = sorted(store.iter_calls())
            recs = sorted((json.dumps(r, sort_keys=True) for r in store.result_dicts()))
        return keys, recs

    k_old, r_old = content(runs / "batch")
    k_new, r_new = content(runs / "stream")
    assert len(k_old) == old["requests"] and k_old == k_new
    assert len(r_old) == 10 * len(bs.METHODS) and r_old == r_new
