"""The streaming run loop (harness.run.stream) and its engine driver (harness.backends.stream):
same calls and records as the batch loop, requests of many tasks share engine steps, an error
or a kill loses nothing that finished, and a paced engine steps only when every caller waits."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from harness.backends.base import SamplingParams
from harness.backends.stream import Callers, EngineDriver
from harness.core.errors import BackendError, EvalAwareError
from harness.data.readers import load_dataset
from harness.methods import MethodConfig
from harness.run.loop import pick_schedule, run_methods
from tests.helpers.streaming_hf import StreamingHF
from tests.test_resume import _count_results

METHODS = ["binary", "probability", "motivation", "logprob"]
CONFIG = MethodConfig(answer_tokens=12, probe_tokens=8, judge_tokens=8)


def _samples(n: int = 6):
    s = load_dataset("demo")
    return s[: n // 2] + s[-(n - n // 2):]


def _state(run_dir: Path) -> tuple[set[str], dict[tuple[str, str], str], set[tuple[str, ...]]]:
    db = sqlite3.connect(run_dir / "store.sqlite")
    keys = {r[0] for r in db.execute("SELECT key FROM calls")}
    recs = {(r[0], r[1]): r[2] for r in db.execute("SELECT method, sample_id, record FROM results")}
    calls = {tuple(map(str, r)) for r in db.execute("SELECT method, sample_id, role, k, call FROM model_calls")}
    db.close()
    return keys, recs, calls


def test_stream_makes_the_batch_loops_calls_and_records(tmp_path, hf_tiny):
    samples = _samples()
    run_methods(samples, METHODS, hf_tiny, tmp_path / "batch", config=CONFIG, progress=False,
                schedule="batch", batch_size=2)
    streaming = StreamingHF(hf_tiny, capacity=16)
    summary = run_methods(samples, METHODS, streaming, tmp_path / "stream", config=CONFIG,
                          progress=False, schedule="stream")
    assert _state(tmp_path / "stream") == _state(tmp_path / "batch")
    # no call made twice: the methods of a sample share its answer (waited for, not re-sent)
    keys, _, _ = _state(tmp_path / "stream")
    assert sum(summary["_calls"]["model_calls"].values()) == len(keys)
    # requests of several tasks shared engine steps: one task sends at most one variant set (5)
    assert max(streaming.engine.steps) > 5
    manifest = json.loads((tmp_path / "stream" / "manifest.json").read_text())
    assert set(manifest["methods"]) == set(METHODS)


class _FailingOnce(StreamingHF):
    """Raises on the `fail_at`-th generate call (counting calls into the engine)."""

    def __init__(self, inner, fail_at: int) -> None:
        super().__init__(inner, capacity=4)
        self.fail_at, self.n, self.lock = fail_at, 0, threading.Lock()

    def generate(self, requests):  # type: ignore[no-untyped-def]
        with self.lock:
            self.n += 1
            fail = self.n == self.fail_at
        if fail:
            raise BackendError("engine fell over")
        return super().generate(requests)


def test_a_task_error_stops_the_run_keeps_what_finished_and_the_rerun_repeats_nothing(tmp_path, hf_tiny):
    samples = _samples(8)
    out = tmp_path / "run"
    with pytest.raises(BackendError, match="fell over"):
        run_methods(samples, ["binary"], _FailingOnce(hf_tiny, fail_at=6), out, config=CONFIG,
                    progress=False, schedule="stream")
    keys1, recs1, _ = _state(out)
    assert 0 < len(recs1) < len(samples)  # finished tasks were committed, the rest were not run
    summary = run_methods(samples, ["binary"], StreamingHF(hf_tiny), out, config=CONFIG,
                          progress=False, schedule="stream")
    keys2, recs2, _ = _state(out)
    assert sum(summary["_calls"]["model_calls"].values()) == len(keys2 - keys1)
    assert {k: recs2[k] for k in recs1} == recs1 and len(recs2) == len(samples)
    run_methods(samples, ["binary"], hf_tiny, tmp_path / "clean", config=CONFIG, progress=False,
                schedule="batch")
    assert _state(tmp_path / "clean")[:2] == (keys2, recs2)


class _Gated(StreamingHF):
    """Holds every generation until `gate` opens: no binary task (and so no sample of a binary +
    logprob run) can finish before; logprob scores without generating."""

    def __init__(self, inner, gate: threading.Event) -> None:
        super().__init__(inner, capacity=16)
        self.gate = gate

    def generate(self, requests):  # type: ignore[no-untyped-def]
        if not self.gate.wait(30):
            raise BackendError("no progress was shown while the generations were held")
        return super().generate(requests)


def test_progress_moves_before_the_first_sample_completes(tmp_path, hf_tiny):
    """Issue 46: the streaming run's progress counted only samples whose every method was done
    (0% for a whole run); it counts tasks, per method. The first progress line is seen while
    no sample is complete, then the held generations go on."""
    samples, out = _samples(6), tmp_path / "run"
    gate, lines, complete_then = threading.Event(), [], []

    def say(msg: str) -> None:
        lines.append(msg)
        if msg.startswith("progress:") and not gate.is_set():
            db = sqlite3.connect(out / "store.sqlite")
            complete_then.append(db.execute("SELECT COUNT(*) FROM (SELECT sample_id FROM results GROUP BY "
                                            "sample_id HAVING COUNT(DISTINCT method) = 2)").fetchone()[0])
            db.close()
            gate.set()

    run_methods(samples, ["binary", "logprob"], _Gated(hf_tiny, gate), out, config=CONFIG,
                progress=False, say=say, schedule="stream")
    first = next(x for x in lines if x.startswith("progress:"))
    assert complete_then == [0] and "binary 0/6" in first
    assert re.search(r"progress: [1-6]/12 tasks \(\d+%\) after \dm\d\ds: binary 0/6, logprob [1-6]/6", first)
    assert re.match(r"progress: 12/12 tasks \(100%\) .*binary 6/6, logprob 6/6; \d+ generated tok/s$", lines[-1])


def test_progress_lines_every_tenth_and_every_30_seconds():
    from harness.run import progress as P

    now, lines, tokens = [0.0], [], [0]
    with P.Progress({"binary": 10, "logprob": 10}, {"logprob": 10}, False, lines.append,
                    lambda: tokens[0], clock=lambda: now[0]) as p:
        p.add("binary")  # 11/20: still the 50% step it resumed in
        assert lines == []
        p.add("binary")  # 12/20: 60%
        assert lines == ["progress: 12/20 tasks (60%) after 0m00s: binary 2/10, logprob 10/10"]
        now[0], tokens[0] = P.LOG_EVERY_S - 1, 290
        p.beat()
        assert len(lines) == 1
        now[0] = P.LOG_EVERY_S
        p.beat()  # nothing finished for 30 s: the line again, with the engine's rate
        assert lines[-1] == "progress: 12/20 tasks (60%) after 0m30s: binary 2/10, logprob 10/10; 10 generated tok/s"
        p.add("binary", 8)
        assert lines[-1] == "progress: 20/20 tasks (100%) after 0m30s: binary 10/10, logprob 10/10; 10 generated tok/s"
        now[0] = 31.0
    assert len(lines) == 3  # the closing line only where the counts changed since the last one


def test_schedule_choice(hf_tiny):
    assert pick_schedule("auto", hf_tiny, None) == "batch"
    assert pick_schedule("auto", StreamingHF(hf_tiny), None) == "stream"
    assert pick_schedule("auto", StreamingHF(hf_tiny), hf_tiny) == "batch"  # a one-call-at-a-time judge
    assert pick_schedule("batch", StreamingHF(hf_tiny), None) == "batch"
    with pytest.raises(EvalAwareError, match="not streaming"):
        pick_schedule("stream", hf_tiny, None)
    with pytest.raises(EvalAwareError, match="schedule must be"):
        pick_schedule("fast", hf_tiny, None)


class _Paced:
    """A step engine whose requests finish after `len(prompt)` steps; records each step's batch."""

    paced = True

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self.n = 0
        self.steps: list[int] = []

    def add(self, prompts, params):  # type: ignore[no-untyped-def]
        ids = []
        for p in prompts:
            self.n += 1
            self.running[str(self.n)] = len(p)
            ids.append(str(self.n))
        return ids

    def step(self):  # type: ignore[no-untyped-def]
        self.steps.append(len(self.running))
        done = []
        for rid in list(self.running):
            self.running[rid] -= 1
            if self.running[rid] == 0:
                del self.running[rid]
                done.append((rid, f"out{rid}"))
        return done

    def has_unfinished(self) -> bool:
        return bool(self.running)

    def abort(self, ids):  # type: ignore[no-untyped-def]
        for rid in ids:
            self.running.pop(rid, None)


def test_a_paced_engine_steps_only_when_every_caller_waits():
    callers = Callers()
    engine = _Paced()
    driver = EngineDriver(engine, callers)
    results: dict[int, list[str]] = {}
    gate = threading.Event()

    def caller(i: int) -> None:
        try:
            if i == 2:
                gate.wait(5)  # busy (not waiting on the engine) until the gate opens
            results[i] = driver.run([[0] * (i + 1)], [SamplingParams(max_tokens=1)])
        finally:
            callers.leave()

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(3)]
    for _ in threads:
        callers.enter()  # all registered before any starts, as harness.run.stream does
    for t in threads:
        t.start()
    time.sleep(0.3)
    assert engine.steps == []  # callers 0 and 1 wait, caller 2 is busy: no step yet
    gate.set()
    for t in threads:
        t.join(10)
    # all three requests entered the first step together
    assert engine.steps[0] == 3 and sorted(results) == [0, 1, 2]
    driver.close()


def test_an_engine_error_fails_its_callers_and_the_driver_goes_on():
    class Broken(_Paced):
        paced = False

        def step(self):  # type: ignore[no-untyped-def]
            if any(v == 7 for v in self.running.values()):
                self.running.clear()
                raise RuntimeError("step failed")
            return super().step()

    driver = EngineDriver(Broken())
    with pytest.raises(RuntimeError, match="step failed"):
        driver.run([[0] * 7], [None])
    assert driver.run([[0, 0]], [None]) == ["out2"]
    assert driver.call(lambda a, b: a + b, 2, 3) == 5
    driver.close()


class _FailsOnce(_Paced):
    """Raises in its `fail_at`-th step and, like vLLM, keeps the requests it was running."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at

    def step(self):  # type: ignore[no-untyped-def]
        if len(self.steps) + 1 == self.fail_at:
            self.steps.append(-1)
            raise RuntimeError("step failed")
        return super().step()


def _as_callers(driver: EngineDriver, *targets) -> None:  # type: ignore[no-untyped-def]
    """Each target on its own thread, all registered as callers of `driver` before any starts."""
    def leaving(target):  # type: ignore[no-untyped-def]
        def run() -> None:
            try:
                target()
            finally:
                driver.callers.leave()
        return run

    threads = [threading.Thread(target=leaving(t)) for t in targets]
    for _ in threads:
        driver.callers.enter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)


def _run_into(got: dict[str, object], name: str, driver: EngineDriver, prompts: list[list[int]]) -> None:
    """`driver.run(prompts)`'s outputs, or its error, into ``got[name]``."""
    try:
        got[name] = driver.run(prompts, [None] * len(prompts))
    except BaseException as e:  # recorded for the test
        got[name] = e


def test_an_engine_error_fails_the_callers_in_it_and_a_later_caller_is_unaffected():
    """Issue 49: the failed step's requests used to stay in the engine; when they finished, the
    route table no longer knew them (KeyError) and the caller that came next failed instead.
    Callers a and c are in the failing step; b is registered all along (so the paced engine
    cannot run the leftovers off before it) and submits once a and c have their answers."""
    engine = _FailsOnce(fail_at=2)
    driver = EngineDriver(engine)
    got: dict[str, object] = {}
    answered: Future[None] = Future()
    lock = threading.Lock()

    def early(name: str, prompts: list[list[int]]):  # type: ignore[no-untyped-def]
        def run() -> None:
            _run_into(got, name, driver, prompts)
            with lock:
                if "a" in got and "c" in got and not answered.done():
                    answered.set_result(None)
        return run

    def late() -> None:
        with driver.callers.wait(answered):
            answered.result(10)
        _run_into(got, "b", driver, [[0] * 2])

    _as_callers(driver, early("a", [[0] * 3]), early("c", [[0] * 4, [0] * 2]), late)
    assert all(isinstance(got[n], RuntimeError) and "step failed" in str(got[n]) for n in "ac"), got
    assert got["b"] == ["out4"]
    assert engine.running == {}
    assert driver.call(lambda a, b: a + b, 2, 3) == 5
    driver.close()


def test_a_refused_submission_fails_its_caller_alone():
    """`add` raising for one caller's requests (vLLM refuses bad parameters there) fails that
    caller; another caller's request, queued before, finishes."""
    queued: Future[None] = Future()

    class Refusing(_Paced):
        def add(self, prompts, params):  # type: ignore[no-untyped-def]
            if any(len(p) == 0 for p in prompts):
                raise ValueError("empty prompt")
            ids = super().add(prompts, params)
            queued.set_result(None)
            return ids

    engine = Refusing()
    driver = EngineDriver(engine)
    got: dict[str, object] = {}

    def second() -> None:
        with driver.callers.wait(queued):
            queued.result(10)
        _run_into(got, "b", driver, [[0], []])

    _as_callers(driver, lambda: _run_into(got, "a", driver, [[0] * 3]), second)
    assert got["a"] == ["out1"]
    assert isinstance(got["b"], ValueError)
    assert engine.n == 1  # none of b's requests was queued
    driver.close()


_KILL_SCRIPT = textwrap.dedent("""
    import sys
    from harness.backends.hf.backend import HFBackend
    from harness.data.readers import load_dataset
    from harness.methods import MethodConfig
    from harness.run.loop import run_methods
    from tests.helpers.streaming_hf import StreamingHF
    model, out, schedule = sys.argv[1:4]
    s = load_dataset("demo")
    hf = HFBackend(model, batch_size=1)
    backend = StreamingHF(hf, capacity=3) if schedule == "stream" else hf
    run_methods(s[:5] + s[-5:], ["binary", "logprob"], backend, out, progress=False, schedule=schedule,
                config=MethodConfig(answer_tokens=24, probe_tokens=12))
""")


@pytest.mark.slow
def test_kill9_mid_stream_then_resume(tmp_path, tiny_model_dir):
    script = tmp_path / "run.py"
    script.write_text(_KILL_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, str(script), str(tiny_model_dir), str(out), "stream"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and _count_results(out) < 6:
        time.sleep(0.01)
    died = proc.poll()
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert died is None, f"the run ended by itself ({died}) before it was killed:\n{err.decode()[-2000:]}"
    keys1, recs1, _ = _state(out)
    assert 6 <= len(recs1) < 20, "the run was not interrupted mid-way"
    subprocess.run([sys.executable, str(script), str(tiny_model_dir), str(out), "stream"], env=env,
                   check=True, capture_output=True)
    keys2, recs2, _ = _state(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert sum(manifest["calls"]["model_calls"].values()) == len(keys2 - keys1)  # zero repeated
    assert {k: recs2[k] for k in recs1} == recs1
    subprocess.run([sys.executable, str(script), str(tiny_model_dir), str(tmp_path / "batch"), "batch"],
                   env=env, check=True, capture_output=True)
    assert _state(tmp_path / "batch")[:2] == (keys2, recs2)  # the batch loop's calls and records


def test_a_changed_prompt_text_into_the_same_run_dir_is_refused(tmp_path, hf_tiny):
    """Issue 35 #32: a second invocation with other --prompts used to mix two prompt sets."""
    from harness.core.errors import StoreError
    from harness.methods.prompts import BUILTIN, PromptLibrary

    samples = _samples(4)
    out = tmp_path / "run"
    run_methods(samples[:2], ["binary"], hf_tiny, out, config=CONFIG, progress=False)
    override = tmp_path / "prompts"
    (override / "binary").mkdir(parents=True)
    first = sorted((BUILTIN / "binary").glob("*.txt"))[0]
    (override / "binary" / first.name).write_text(first.read_text() + "\nAnswer carefully.")
    with pytest.raises(StoreError, match=f"prompt 'binary/{first.stem}'.*not the text"):
        run_methods(samples, ["binary"], hf_tiny, out, config=CONFIG, progress=False,
                    prompts=PromptLibrary(override))
    assert len(_state(out)[1]) == 2  # nothing recorded with the other text
    with pytest.raises(StoreError, match=f"prompt 'binary/{first.stem}'.*not the text"):
        run_methods(samples[:2], ["binary"], hf_tiny, out, config=CONFIG, progress=False,
                    prompts=PromptLibrary(override))  # nothing left to compute: refused all the same
    # the same texts again resume; the other set goes to its own directory
    run_methods(samples, ["binary"], hf_tiny, out, config=CONFIG, progress=False)
    run_methods(samples, ["binary"], hf_tiny, tmp_path / "other", config=CONFIG, progress=False,
                prompts=PromptLibrary(override))
    assert len(_state(out)[1]) == 4 and len(_state(tmp_path / "other")[1]) == 4
