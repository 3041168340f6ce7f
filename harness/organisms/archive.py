"""Validate runs kept with the repository: ``organism archive`` writes one, ``organism judge``
re-judges one or several.

An organism's weights (~60 MB a build) and a validate run's sub-runs (minutes to an hour a model
on 2 cores) stay on the machine that made them, and a machine does not outlive a session. A
table that pools several seeds of each kind needs more builds than one session makes, so what
crosses sessions is the records the table is computed from:

- ``archive RUN --out DIR`` writes, for each sub-run of the validate run RUN, its manifest and
  its log with the samples, records and meta but without the request cache and the call log
  (``calls``, ``model_calls``: what a resumed run reuses, not what the table reads) or captured
  activations; for each organism and reference, its card (the same bytes, so the same sha256)
  and its ``organism measure`` output beside it; and RUN's own ``sensitivity.*``. DIR appears
  only when complete.
- ``judge DIR... --out OUT`` copies the archived sub-runs into OUT under the names ``validate``
  gives the same models (one organism ``organism``, several ``organism-<directory>``) and judges
  them with ``validate``'s own code (:func:`harness.organisms.validate.sensitivity`): several
  archives pool their builds as seeds, as one validate run over all of them would. The archives
  must share the base and the paired set (its sha256); a model in several archives (the base in
  every one) is taken from the first.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.core.errors import EvalAwareError
from harness.models.card import CARD_NAME
from harness.runlog import RunLog
from harness.runlog.copy import slim_copy
from harness.runlog.schema import LOG_NAME

INDEX = "archive.json"
MODELS = "models"


@dataclass(frozen=True)
class SubRun:
    """One archived sub-run and the model(s) it ran, as its validate manifest names them."""

    path: Path
    role: str  # validate's sub-run name: base, reference, organism, organism-<dir>, cross-...
    kind: str  # the card's kind, "base", or "cross read"
    keys: tuple[str, ...]  # one model key (two for a cross read: reader, writer)
    models: tuple[str, ...]  # the model as validate was given it (a directory or the base's id)
    dataset_sha256: str | None


def model_key(model: str, card_sha256: str | None) -> str:
    """A model across archives: a build by its card's sha256, the base by its id."""
    return f"card:{card_sha256}" if card_sha256 else f"model:{model}"


def _manifest(sub: Path) -> dict[str, Any] | None:
    try:
        m = json.loads((sub / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and isinstance(m.get("validate"), dict) else None


def sub_run(sub: Path) -> SubRun | None:
    """The validate sub-run in `sub` (None for anything else)."""
    m = _manifest(sub)
    if m is None or not (sub / LOG_NAME).is_file():
        return None
    v = m["validate"]
    data = (m.get("dataset") or {}).get("sha256")
    if v.get("kind") == "cross read":
        return SubRun(sub, str(v.get("role") or sub.name), "cross read",
                      (model_key(v["reader"], v.get("reader_card_sha256")),
                       model_key(v["writer"], v.get("writer_card_sha256"))), (v["reader"], v["writer"]), data)
    return SubRun(sub, str(v.get("role") or sub.name), str(v.get("kind")),
                  (model_key(v["organism"], v.get("card_sha256")),), (v["organism"],), data)


def sub_runs(run: Path) -> list[SubRun]:
    """The validate sub-runs directly under `run`, by name (hidden directories skipped)."""
    return [s for p in sorted(run.iterdir()) if p.is_dir() and not p.name.startswith(".")
            for s in [sub_run(p)] if s is not None]


def archive_run(run: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the archive of the validate run `run` to `out` (a new path); returns its index."""
    run, out = Path(run), Path(out)
    subs = sub_runs(run) if run.is_dir() else []
    if not subs:
        raise EvalAwareError(f"{run}: no validate sub-runs (directories with a manifest.json naming a "
                             "`validate` role and a run log); archive an `organism validate` --out")
    if out.exists():
        raise EvalAwareError(f"{out}: exists; an archive is written to a new path")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.archiving-", dir=out.parent))
    try:
        index: dict[str, Any] = {"archived_from": str(run), "sub_runs": {}, "models": {}}
        for s in subs:
            dst = tmp / s.path.name
            slim_copy(s.path, dst)
            for extra in dst.iterdir():  # captured activations and the like: not read by the table
                if extra.name not in ("manifest.json", LOG_NAME):
                    shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
            index["sub_runs"][s.path.name] = {"role": s.role, "kind": s.kind, "models": list(s.models)}
            if s.kind in ("base", "cross read"):
                continue
            src = Path(s.models[0])
            card = src / CARD_NAME
            if not card.is_file():
                raise EvalAwareError(f"{s.path}: its model {src} has no {CARD_NAME} here; archive on the "
                                     "machine that holds the organisms")
            (tmp / MODELS / src.name).mkdir(parents=True, exist_ok=True)
            shutil.copy2(card, tmp / MODELS / src.name / CARD_NAME)
            measured = [p for p in sorted(src.parent.glob(f"{src.name}.measure*.json"))]
            for p in measured:
                shutil.copy2(p, tmp / MODELS / p.name)
            index["models"][src.name] = {"model": s.models[0], "measure": [p.name for p in measured]}
        for f in ("sensitivity.json", "sensitivity.md"):
            if (run / f).is_file():
                shutil.copy2(run / f, tmp / f)
        index["methods"] = _methods(run, [s.path for s in subs])
        index["probe_sha256"] = _probe_sha256(run)
        (tmp / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return index


@dataclass
class Gathered:
    """What `judge` reads from its archives: the base's id, the archived model directories (cards)
    of the references and organisms, and each model's (and cross read's) sub-run."""

    base: str
    references: list[str]
    organisms: list[str]
    runs: dict[tuple[str, ...], SubRun]  # by model keys (one, or reader and writer)
    dirs: dict[str, str]  # model key -> archived model directory (organisms and references)
    taken: list[str]  # one line per model found in several archives: which one was taken


def gather(archives: Sequence[str | Path]) -> Gathered:
    """The models of `archives` and their sub-runs (see the module's docstring)."""
    base: str | None = None
    data: dict[str, str] = {}
    roles: dict[str, tuple[str, str]] = {}  # model key -> (reference|organism, where)
    runs: dict[tuple[str, ...], SubRun] = {}
    dirs: dict[str, str] = {}
    order: list[str] = []
    taken: list[str] = []
    for a in map(Path, archives):
        if not (a / INDEX).is_file():
            raise EvalAwareError(f"{a}: not an archive (no {INDEX}); write one with `evalaware organism archive`")
        for s in sub_runs(a):
            where = f"{a}/{s.path.name}"
            if s.dataset_sha256:
                data.setdefault(s.dataset_sha256, where)
            if len(data) > 1:
                raise EvalAwareError("judge: the archives were run on different paired sets ("
                                     + ", ".join(f"{w}: sha256 {d[:12]}" for d, w in data.items())
                                     + "); judge archives of one paired set together")
            if s.kind == "base":
                if base is not None and base != s.models[0]:
                    raise EvalAwareError(f"judge: {where}: base {s.models[0]}, another archive's base is {base}; "
                                         "judge archives of one base together")
                base = s.models[0]
            elif s.kind != "cross read":
                role = "reference" if s.role.startswith("reference") else "organism"
                key = s.keys[0]
                was = roles.setdefault(key, (role, where))
                if was[0] != role:
                    raise EvalAwareError(f"judge: {where} is the {role} of its run and {was[1]} the {was[0]} "
                                         "of its: one build has one role in a judged table")
                card = a / MODELS / Path(s.models[0]).name / CARD_NAME
                if not card.is_file():
                    raise EvalAwareError(f"{where}: its model's card ({card}) is missing from the archive")
                if key != model_key(s.models[0], hashlib.sha256(card.read_bytes()).hexdigest()):
                    raise EvalAwareError(f"{card}: not the card {where} ran (its sha256 differs from the "
                                         "manifest's card_sha256)")
                if key not in dirs:
                    dirs[key] = str(card.parent)
                    order.append(key)
            if s.keys in runs:
                taken.append(f"{where}: the same model(s) as {runs[s.keys].path}, which is taken")
                continue
            runs[s.keys] = s
    if base is None:
        raise EvalAwareError("judge: no archive holds the base's sub-run")
    return Gathered(base, [dirs[k] for k in order if roles[k][0] == "reference"],
                    [dirs[k] for k in order if roles[k][0] == "organism"], runs, dirs, taken)


def _methods(run: Path, subs: Sequence[Path]) -> list[str]:
    """The run's methods in the order its table gave them (its decision rows' readouts), then any
    other method with records in the sub-runs `subs` (sorted)."""
    order: list[str] = []
    try:
        table = json.loads((run / "sensitivity.json").read_text())
        order = list(dict.fromkeys(r["readout"] for r in (table.get("decision") or {}).get("rows", [])))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    found: set[str] = set()
    for p in subs:
        with RunLog(p, create=False, readonly=True) as st:
            found |= {r["method"] for r in st.result_dicts()}
    return [*order, *sorted(found - set(order))]


def archived_methods(archives: Sequence[str | Path]) -> list[str]:
    """The methods of `archives` (each archive's, in its order), every one once."""
    out: list[str] = []
    for a in archives:
        out += json.loads((Path(a) / INDEX).read_text()).get("methods", [])
    return list(dict.fromkeys(out))


def _probe_sha256(run: Path) -> str | None:
    """The sha256 of the frozen probe RUN applied (every file of its directory, by name), where
    RUN's table names one that is still here: archives pool probe records only of one probe."""
    try:
        probe = (json.loads((run / "sensitivity.json").read_text()).get("probe") or {}).get("dir")
    except (OSError, ValueError, AttributeError):
        return None
    if not probe or not Path(probe).is_dir():
        return None
    h = hashlib.sha256()
    for f in sorted(p for p in Path(probe).rglob("*") if p.is_file()):
        h.update(str(f.relative_to(probe)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def probe_mismatch(archives: Sequence[str | Path]) -> str | None:
    """Why the archives' probe records cannot be pooled (several probes, or one not known), or
    None where they can (one archive, or every archive's probe the same)."""
    shas = {str(a): json.loads((Path(a) / INDEX).read_text()).get("probe_sha256") for a in archives}
    if len(shas) < 2 or (len(set(shas.values())) == 1 and None not in shas.values()):
        return None
    return "the archives applied different probes, or a probe not archived (" + ", ".join(
        f"{a}: {str(v)[:12] if v else 'unknown'}" for a, v in shas.items()) + ")"
