"""`organism validate --reuse DIR`: a model's sub-run taken from an earlier validate run instead
of run again.

Two validate runs over the same paired set often share models: `make validate-seeds` runs the
seed-0 builds that `make validate-organisms` ran, under other sub-run names (``reference`` there,
``reference-smollm2-graded-sham`` here). A sub-run of DIR is taken for a model of this run when
its manifest says it ran the same model (the organism directory or base model as given, resolved;
for a cross read the same reader over the same writer), on a paired set of the same content
(sha256), and, where both record it, from the same organism card. The sub-run is copied
(:func:`harness.runlog.copy.copy_run`); the run then resumes in the copy as in any run directory:
the model's identity (weights, backend, dtype) and each method's settings are checked against the
copied log; a copy that does not match is removed and the model run afresh, so a sub-run made under
other settings is never read as this run's; the methods and samples it lacks are run. Only a
sub-run this run lacks is taken: one already under --out is never replaced.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.core import console
from harness.core.errors import StoreError, first_line
from harness.runlog import RunLog
from harness.runlog.copy import copy_run
from harness.runlog.schema import LOG_NAME

#: The meta key of a copied sub-run's log that names where it was copied from.
REUSED = "validate_reused"


def model_key(model: str) -> str:
    """A model as a validate manifest names it: a local directory resolved, else as given."""
    p = Path(model)
    return str(p.resolve()) if p.is_dir() else model


@dataclass(frozen=True)
class Found:
    """One reusable sub-run: its directory and what it ran."""

    path: Path
    key: tuple[str, ...]
    dataset_sha256: str | None
    cards: tuple[str | None, ...]  # the card sha256 of each model in `key`, where recorded


def _found(sub: Path) -> Found | None:
    try:
        m = json.loads((sub / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    v = m.get("validate") if isinstance(m, dict) else None
    if not isinstance(v, dict) or not (sub / LOG_NAME).is_file():
        return None
    if v.get("kind") == "cross read":
        if not (v.get("reader") and v.get("writer")):
            return None
        key: tuple[str, ...] = ("cross", model_key(v["reader"]), model_key(v["writer"]))
        cards = (v.get("reader_card_sha256"), v.get("writer_card_sha256"))
    elif v.get("organism"):
        key, cards = ("run", model_key(v["organism"])), (v.get("card_sha256"),)
    else:
        return None
    return Found(sub, key, (m.get("dataset") or {}).get("sha256"), cards)


class Reuse:
    """The sub-runs of the --reuse directories, found by what they ran."""

    def __init__(self, dirs: Sequence[str | Path], dataset_sha256: str) -> None:
        self.dataset_sha256 = dataset_sha256
        self.found = [f for d in dirs for sub in sorted(Path(d).iterdir())
                      if sub.is_dir() and not sub.name.startswith(".")  # a copy under way, or left by a kill
                      for f in [_found(sub)] if f is not None]

    def match(self, key: tuple[str, ...], cards: tuple[str | None, ...]) -> Found | None:
        """The first sub-run that ran `key` on this paired set (from the same cards, where both
        record one)."""
        for f in self.found:
            if f.key == key and f.dataset_sha256 == self.dataset_sha256 and all(
                    a is None or b is None or a == b for a, b in zip(f.cards, cards)):
                return f
        return None

    @staticmethod
    def earlier(dst: Path) -> dict[str, Any] | None:
        """What an earlier invocation of this run copied into `dst` (recorded in its log the moment
        it was copied), so that a resumed run keeps saying where its sub-run came from."""
        if not (dst / LOG_NAME).is_file():
            return None
        with RunLog(dst, readonly=True) as st:
            return st.get_meta(REUSED)

    def run(self, key: tuple[str, ...], cards: tuple[str | None, ...], dst: Path,
            run: Callable[[dict[str, Any] | None], Any]) -> None:
        """`run(reused)` in `dst`, first copying the matching sub-run there when `dst` holds no
        run yet (`reused`: where it came from, now or in an earlier invocation, for the manifest).
        A copy the run refuses (another model identity or method setting, a
        :class:`~harness.core.errors.StoreError`) is removed and the model run afresh."""
        if dst.exists() and any(dst.iterdir()):
            run(self.earlier(dst))
            return
        f = self.match(key, cards)
        if f is None:
            run(None)
            return
        if dst.exists():
            dst.rmdir()
        taken = {"from": str(f.path)}

        def afresh(what: str, e: BaseException) -> None:
            shutil.rmtree(dst, ignore_errors=True)
            console.status(f"validate: {dst.name}: the sub-run {what} {f.path} ({first_line(e)}); run afresh")
            run(None)

        try:
            copy_run(f.path, dst)
            with RunLog(dst, create=False) as st:
                st.set_meta(REUSED, taken)
        except (StoreError, OSError) as e:
            return afresh("could not be copied from", e)
        console.status(f"validate: {dst.name}: its sub-run copied from {f.path}, resumed there")
        try:
            run(taken)
        except StoreError as e:
            afresh("is not this run's: copied from", e)
