"""What a run shows while it goes: tasks (one method on one sample) done of all, per method, and
the tokens the engine generated per second (the mean since this invocation started, over the calls
it made; shown once any generation has returned).

Tasks, not samples: under the streaming schedule every method of a sample runs beside the others
and a sample is done only when its slowest method is, so a count of finished samples sits near 0%
for most of a run (issue 46); tasks end all the way through it. A resumed run starts from the tasks
already done.

With a terminal bar (the default) the line is the bar's postfix. Without (``--no-progress``) the
same line is logged through `say`: each time another tenth of the tasks is done (:data:`LOG_STEP`),
at least every :data:`LOG_EVERY_S` seconds while none is (a slow first step still shows the engine
generating), and once at the end. A run of a few seconds logs at most about a dozen lines.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable, Mapping

from tqdm.auto import tqdm

#: Without a bar: a line each time this share of all tasks more is done ...
LOG_STEP = 0.1
#: ... and at least this often (seconds) while the run goes.
LOG_EVERY_S = 30.0
#: How often the bar's tokens/s and the timed log line are refreshed (seconds).
TICK_S = 1.0


def _duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Progress:
    """Counts finished tasks per method (:meth:`add`, from any thread) and shows them: a tqdm bar
    when `bar`, else lines through `say` (see the module docstring). `totals`: tasks per method in
    all; `done`: those finished before this invocation; `tokens`: the tokens generated so far (the
    run's :class:`~harness.backends.cache.CachedBackend` counts). Use as a context manager."""

    def __init__(self, totals: Mapping[str, int], done: Mapping[str, int], bar: bool,
                 say: Callable[[str], None], tokens: Callable[[], int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.totals = dict(totals)
        self.done = {m: int(done.get(m, 0)) for m in totals}
        self.say, self.tokens, self.clock = say, tokens, clock
        self.t0 = self.logged_at = clock()
        self.logged: int | None = None  # tasks done at the last line logged
        self.step = self._step()
        self._lock = threading.Lock()
        self._bar = tqdm(total=self.total, initial=sum(self.done.values()), desc="tasks", unit="task",
                         dynamic_ncols=True) if bar else None
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="evalaware-progress", daemon=True)
        self._ticker.start()

    @property
    def total(self) -> int:
        return sum(self.totals.values())

    def _step(self) -> int:
        return math.floor(sum(self.done.values()) / self.total / LOG_STEP + 1e-9) if self.total else 0

    def rate(self) -> float | None:
        """Generated tokens per second since this invocation started; None before any returned."""
        n = self.tokens() if self.tokens is not None else 0
        dt = self.clock() - self.t0
        return n / dt if n and dt > 0 else None

    def methods_text(self) -> str:
        """`binary 3/96, logprob 40/96; 812 generated tok/s`: the bar's postfix."""
        out = ", ".join(f"{m} {self.done[m]}/{n}" for m, n in self.totals.items())
        r = self.rate()
        return out + (f"; {r:.0f} generated tok/s" if r is not None else "")

    def line(self) -> str:
        """The whole state in one line (what ``--no-progress`` logs)."""
        n = sum(self.done.values())
        share = f" ({100 * n / self.total:.0f}%)" if self.total else ""
        return (f"progress: {n}/{self.total} tasks{share} after {_duration(self.clock() - self.t0)}: "
                f"{self.methods_text()}")

    def add(self, method: str, n: int = 1) -> None:
        """`n` more tasks of `method` finished (committed)."""
        with self._lock:
            self.done[method] += n
            if self._bar is not None:
                self._bar.set_postfix_str(self.methods_text(), refresh=False)
                self._bar.update(n)
            elif (step := self._step()) > self.step:
                self.step = step
                self._log()

    def _log(self) -> None:
        self.logged_at, self.logged = self.clock(), sum(self.done.values())
        self.say(self.line())

    def beat(self) -> None:
        """What the ticker does every TICK_S: refresh the bar's tokens/s, or log the line when
        LOG_EVERY_S have passed since the last one."""
        with self._lock:
            if self._bar is not None:
                self._bar.set_postfix_str(self.methods_text())
            elif self.clock() - self.logged_at >= LOG_EVERY_S:
                self._log()

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            self.beat()

    def close(self) -> None:
        """Stop the ticker; without a bar, log the final line (also after an error or Ctrl-C)
        unless the last line logged already had these counts."""
        self._stop.set()
        self._ticker.join()
        with self._lock:
            if self._bar is not None:
                self._bar.set_postfix_str(self.methods_text(), refresh=False)
                self._bar.close()
            elif self.total and self.logged != sum(self.done.values()):
                self._log()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
