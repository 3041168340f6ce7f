"""A fuzz pass over every command's options (issue 48), in-process through the CLI's one error
boundary (:func:`evalaware.boundary.run_cli`).

Each case is one command of the click tree run with a working baseline (its :data:`BASELINES`
entry: the run directory of the fixture, a model path that does not exist, outputs in a scratch
folder, so that no engine ever starts and no long job runs) in which one parameter is replaced by
a hostile value: NaN, +/-inf, negative, zero and huge numbers; empty, 10,000-character,
control-character, bidi, non-UTF-8 (a lone surrogate, as Python gives an undecodable argv byte)
strings; paths to a directory, a FIFO, symbolic links (to a file, a folder, nothing), /dev/full,
/dev/null, a 5,000-character name; URLs with a secret in every position. :func:`problems` lists
what a case did wrong: an exit code other than 0/1/2 (3 is the boundary's "a bug"), a traceback,
a raw control character on stdout or stderr, the secret on stderr or in any file.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import click

SECRET = "sk-FUZZSECRET7f3a9c"
SECRET_URLS = (f"http://user:{SECRET}@127.0.0.1:9/v1", f"http://127.0.0.1:9/v1;{SECRET}",
               f"http://127.0.0.1:9/v1?{SECRET}", f"http://127.0.0.1:9/v1?api_key={SECRET}&x=1",
               f"https://127.0.0.1:9/v1#{SECRET}", f"http://127.0.0.1:9/v1;{SECRET}/chat?k={SECRET}#{SECRET}")
NUMBERS = ("nan", "-nan", "inf", "-inf", "-1", "0", "-0", "0.0", "1e400", "-1e400", "1e-400",
           str(10 ** 30), "9223372036854775808", "-9223372036854775809", "2147483648", "0x10", "1_0", " 3",
           "3.5", "1e3")
STRINGS = ("", " ", "x" * 10_000, "\x1b[2J\x1b[1;1Hall ok", "a\nerror: forged\rline", "\x00", "\x07\x08\x7f",
           "\u202eevil\u202c", "\udcff\udcfe", "caf\u00e9,\u4e2d", ",,,", "-", "--", "a=b", "__class__=1",
           "num_hidden_layers=2", "attn_implementation=\x1b[31mred", "subfolder=nope", "{", "[]", "all",
           "../../../etc/passwd", *SECRET_URLS)
LIMIT_S = 30.0  # a case running longer is a hang (a FIFO read, a model loading): it fails the test


class CaseTimeout(BaseException):
    """Raised by the alarm in a case that runs past :data:`LIMIT_S` (a BaseException: the
    boundary under test does not turn it into a line)."""


def hostile_paths(root: Path) -> tuple[str, ...]:
    """Paths that are not what an option wants, made under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "a-dir").mkdir(exist_ok=True)
    (root / "a-file.txt").write_text("not what was asked for\n")
    fifo = root / "a-fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    for name, target in (("link-to-file", "a-file.txt"), ("link-to-dir", "a-dir"), ("dangling", "nothing")):
        if not (root / name).is_symlink():
            os.symlink(root / target, root / name)
    return (str(root / "a-dir"), str(fifo), str(root / "link-to-file"), str(root / "link-to-dir"),
            str(root / "dangling"), str(root / "a-file.txt"), "/dev/full", "/dev/null",
            str(root / ("n" * 5000)), str(root / "missing" / "deeper"), str(root / "\udcffname"))


def leaf_commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command of the tree under `group`, with the names that reach it."""
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from leaf_commands(cmd, path + (name,))
        else:
            yield path + (name,), cmd


def _numeric(p: click.Parameter) -> bool:
    return isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType))


def values_for(p: click.Parameter, paths: Sequence[str]) -> tuple[str, ...]:
    """The hostile values a parameter gets: numbers for a number, everything else for the rest
    (a number option gets strings too)."""
    if _numeric(p):
        return NUMBERS + STRINGS[:8]
    return STRINGS + tuple(paths) + NUMBERS[:6]


@dataclass(frozen=True)
class Case:
    command: tuple[str, ...]
    param: str
    value: str
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"{' '.join(self.command)} {self.param}={self.value[:60]!r}: {list(self.argv)[:40]}"


def build_argv(command: tuple[str, ...], cmd: click.Command, given: Mapping[str, Any]) -> tuple[str, ...]:
    """`command` with the parameters `given` (name -> value, or a list for a repeated option or
    a variadic argument), options by their first flag, arguments in declaration order."""
    argv = list(command)
    for p in cmd.params:
        if p.name not in given:
            continue
        vals = given[p.name] if isinstance(given[p.name], (list, tuple)) else [given[p.name]]
        for v in vals:
            if isinstance(p, click.Option):
                argv += [p.opts[0], str(v)] if not p.is_flag else [p.opts[0]]
            else:
                argv.append(str(v))
    return tuple(argv)


def cases(group: click.Group, baselines: Mapping[str, Mapping[str, Any]], paths: Sequence[str],
          seed: int, budget: int | None) -> list[Case]:
    """Every (command, parameter, hostile value) of the tree (flags and --help aside), in a seeded
    order that visits the commands in turn; the first `budget` (None: all)."""
    rng = random.Random(seed)
    per_command: list[list[Case]] = []
    for command, cmd in leaf_commands(group):
        base = baselines[" ".join(command)]
        mine = []
        for p in cmd.params:
            if getattr(p, "is_flag", False) or p.name in ("help", "verbose") or getattr(p, "hidden", False):
                continue
            for v in values_for(p, paths):
                mine.append(Case(command, p.name or "", v, build_argv(command, cmd, {**base, p.name: v})))
        rng.shuffle(mine)
        per_command.append(mine)
    rng.shuffle(per_command)
    out = [c for rnd in range(max(map(len, per_command))) for cs in per_command if rnd < len(cs) for c in [cs[rnd]]]
    return out if budget is None else out[:budget]


def _alarm(_sig: int, _frame: Any) -> None:
    raise CaseTimeout(f"ran past {LIMIT_S} s")


def run_case(group: click.Group, argv: Sequence[str], capsys: Any) -> tuple[int, str, str, float]:
    """`argv` through the boundary in-process: (exit code, stdout, stderr, seconds); a case past
    :data:`LIMIT_S` is stopped and reported as exit -1."""
    from evalaware.boundary import run_cli
    from harness.core import console

    capsys.readouterr()
    old_argv, sys.argv = sys.argv, ["evalaware", *argv]
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    t0 = time.perf_counter()
    try:
        run_cli(group, list(argv))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except CaseTimeout:
        code = -1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        sys.argv = old_argv
        console.reset()
    took = time.perf_counter() - t0
    out = capsys.readouterr()
    return code, out.out, out.err, took


def _raw_controls(text: str, allowed: str) -> list[str]:
    return sorted({repr(c) for c in text if c not in allowed and unicodedata.category(c) in ("Cc", "Cs")})


def secret_files(root: Path) -> list[str]:
    """Files under `root` whose bytes hold :data:`SECRET`."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            try:
                if p.is_file() and not p.is_symlink() and SECRET.encode() in p.read_bytes():
                    found.append(str(p))
            except OSError:
                continue
    return found


def problems(code: int, out: str, err: str) -> list[str]:
    """What a case's exit code and output did wrong (empty: nothing)."""
    bad = []
    if code == -1:
        bad.append(f"hang: ran past {LIMIT_S} s")
    elif code not in (0, 1, 2):
        bad.append(f"exit {code}")
    if "Traceback (most recent call last)" in out + err:
        bad.append("a traceback")
    if _raw_controls(err, "\n") or _raw_controls(out, "\n\t"):
        bad.append(f"raw control characters {_raw_controls(err, chr(10)) + _raw_controls(out, chr(10) + chr(9))}")
    if SECRET in err:  # stdout is the command's output, where it names the paths it was given
        bad.append("the secret printed")
    return bad


def check_case(group: click.Group, case: Case, capsys: Any, scan: Path) -> tuple[list[str], int, str, float]:
    """Run one case: (what it did wrong, exit code, stderr, seconds); a secret file it wrote is
    removed once reported."""
    code, out, err, took = run_case(group, case.argv, capsys)
    bad = problems(code, out, err)
    leaked = secret_files(scan)
    if leaked:
        bad.append(f"the secret written to {leaked}")
        for f in leaked:  # reported once, not again by every later case
            Path(f).unlink()
    return bad, code, err, took


def fuzz(group: click.Group, baselines: Mapping[str, Mapping[str, Any]], paths: Sequence[str], seed: int,
         budget: int | None, capsys: Any, scan: Path, deadline_s: float | None = None
         ) -> tuple[list[str], list[tuple[float, Case]]]:
    """Run the cases (until `deadline_s` has passed); (a line per failing case, (seconds, case)
    of every case run)."""
    failures, times = [], []
    t_end = None if deadline_s is None else time.monotonic() + deadline_s
    # click strips escape sequences when stderr is not a terminal (as under capsys): keep them, as a
    # terminal would get them
    strip, click.utils.should_strip_ansi = click.utils.should_strip_ansi, lambda *a, **k: False
    try:
        for case in cases(group, baselines, paths, seed, budget):
            if t_end is not None and time.monotonic() > t_end:
                break
            bad, code, err, took = check_case(group, case, capsys, scan)
            times.append((took, case))
            if bad:
                tail = (err.strip().splitlines() or [""])[-1][:300]
                failures.append(f"{case}\n    -> {', '.join(bad)}; exit {code}; stderr: {tail!r}")
    finally:
        click.utils.should_strip_ansi = strip
    return failures, times
