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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.core.errors import EvalAwareError
from harness.models.card import CARD_NAME
from harness.runlog import RunLog
from harness.runlog.copy import slim_copy, staging_dir
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
    manifest: dict[str, Any]


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
                       model_key(v["writer"], v.get("writer_card_sha256"))), (v["reader"], v["writer"]), data, m)
    return SubRun(sub, str(v.get("role") or sub.name), str(v.get("kind")),
                  (model_key(v["organism"], v.get("card_sha256")),), (v["organism"],), data, m)


def sub_runs(run: Path) -> list[SubRun]:
    """The validate sub-runs directly under `run`, by name (hidden directories skipped)."""
    return [s for p in sorted(run.iterdir()) if p.is_dir() and not p.name.startswith(".")
            for s in [sub_run(p)] if s is not None]


def _in_table_order(run: Path, subs: list[SubRun]) -> list[SubRun]:
    """`subs` in the order the run's validate table lists them (its command line's, so that a
    judged archive prints its rows in its run's order); by name where the table is absent."""
    try:
        pos = {n: i for i, n in enumerate(table_names(json.loads((run / "sensitivity.json").read_text())))}
    except (OSError, ValueError):
        return subs
    return sorted(subs, key=lambda s: pos.get(s.path.name, len(pos)))


def table_names(table: dict[str, Any]) -> list[str]:
    """The sub-runs a validate table was computed from: the base, the reference builds, the
    organisms and the monitor's cross reads (the first reference with each organism)."""
    ref = (table.get("reference") or {}).get("name")
    refs = [r["name"] for r in table.get("references") or []] or [ref]
    orgs = list(table.get("organisms") or {})
    base = (table.get("base") or {}).get("name")
    cross = [n for o in orgs for n in (f"cross-{ref}-reads-{o}", f"cross-{o}-reads-{ref}")]
    return list(dict.fromkeys(n for n in [base, *refs, *orgs, *cross] if n))


def _run_table(run: Path) -> dict[str, Any]:
    try:
        table = json.loads((run / "sensitivity.json").read_text())
    except (OSError, ValueError) as e:
        raise EvalAwareError(f"{run}/sensitivity.json: cannot be read ({e}); archive the --out of an `organism "
                             "validate` that finished (its table names the sub-runs it read)") from None
    if not isinstance(table, dict) or not table.get("reference"):
        raise EvalAwareError(f"{run}/sensitivity.json: not a validate table (no reference)")
    return table


def archive_run(run: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the archive of the validate run `run` to `out` (a new path): the sub-runs its table
    read (leftovers of other invocations into the same directory are not taken); returns its index."""
    run, out = Path(run), Path(out)
    if not run.is_dir():
        raise EvalAwareError(f"{run}: no validate sub-runs (not a directory)")
    table = _run_table(run)
    names = table_names(table)
    subs = {s.path.name: s for s in sub_runs(run)}
    lost = [n for n in names if n not in subs and not n.startswith("cross-")]
    if lost or not subs:
        raise EvalAwareError(f"{run}: no validate sub-runs for {', '.join(lost) or 'its table'} (directories with a "
                             "manifest.json naming a `validate` role and a run log)")
    if out.exists():
        raise EvalAwareError(f"{out}: exists; an archive is written to a new path")
    tmp = staging_dir(out, "archiving")  # a killed archive's leftovers cleared
    try:
        run_info = table.get("run") or {}
        index: dict[str, Any] = {"archived_from": str(run), "sub_runs": {}, "models": {},
                                 "methods": run_info.get("methods") or _methods(table),
                                 "sample_ids": run_info.get("sample_ids"),
                                 "rule": ({k: run_info.get(k) for k in ("margin", "bootstrap", "seed")}
                                          if run_info else None),
                                 "probe_sha256": _probe_sha256(table)}
        for n in names:
            if n not in subs:
                continue
            s = subs[n]
            slim_copy(s.path, tmp / n)
            index["sub_runs"][n] = {"role": s.role, "kind": s.kind, "models": list(s.models)}
            if s.kind in ("base", "cross read"):
                continue
            src = Path(s.models[0])
            card = src / CARD_NAME
            if not card.is_file():
                raise EvalAwareError(f"{s.path}: its model {src} has no {CARD_NAME} here; archive on the "
                                     "machine that holds the organisms")
            if src.name in index["models"]:
                raise EvalAwareError(f"{run}: two models share the directory name {src.name!r} "
                                     f"({index['models'][src.name]['model']}, {src}); an archive keeps one card a name")
            (tmp / MODELS / src.name).mkdir(parents=True)
            shutil.copy2(card, tmp / MODELS / src.name / CARD_NAME)
            measured = sorted(src.parent.glob(f"{src.name}.measure*.json"))
            for p in measured:
                shutil.copy2(p, tmp / MODELS / p.name)
            index["models"][src.name] = {"model": s.models[0], "measure": [p.name for p in measured]}
        for f in ("sensitivity.json", "sensitivity.md"):
            if (run / f).is_file():
                shutil.copy2(run / f, tmp / f)
        (tmp / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return index


def _methods(table: dict[str, Any]) -> list[str]:
    """A table written before it recorded its methods: its decision rows' readouts, in order."""
    return list(dict.fromkeys(r["readout"] for r in (table.get("decision") or {}).get("rows", [])))


def _probe_sha256(table: dict[str, Any]) -> str | None:
    """The sha256 of the frozen probe the table applied (every file of its directory, by name),
    where that directory is still here: archives pool probe records only of one probe."""
    probe = (table.get("probe") or {}).get("dir")
    if not probe or not Path(probe).is_dir():
        return None
    h = hashlib.sha256()
    for f in sorted(p for p in Path(probe).rglob("*") if p.is_file()):
        h.update(str(f.relative_to(probe)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


@dataclass
class Gathered:
    """What `judge` reads from its archives: the base's id, the archived model directories (cards)
    of the references (every null sham) and organisms, each model's (and cross read's) sub-run,
    and what the archived runs agree on: methods, samples, rule settings."""

    base: str
    references: list[str]
    organisms: list[str]
    runs: dict[tuple[str, ...], SubRun]  # by model keys (one, or reader and writer)
    dirs: dict[str, str]  # model key -> archived model directory (organisms and references)
    taken: list[str]  # one line per model found in several archives: which one was taken
    methods: list[str]
    sample_ids: list[str] | None
    rule: dict[str, Any]  # margin, bootstrap, seed where the archives record and agree on them
    probe_mismatch: str | None


def _same(what: str, values: dict[str, Any]) -> Any:
    """The one value every place in `values` gives (None where none gives one); else an error
    naming the places."""
    given = {w: v for w, v in values.items() if v is not None}
    if len({json.dumps(v, sort_keys=True) for v in given.values()}) > 1:
        raise EvalAwareError(f"judge: the archives differ in {what} (" + "; ".join(
            f"{w}: {json.dumps(v, sort_keys=True)[:120]}" for w, v in given.items()) + "); judge archives made "
            "the same way together")
    return next(iter(given.values()), None)


def gather(archives: Sequence[str | Path]) -> Gathered:
    """The models of `archives` and their sub-runs (see the module's docstring). Every null sham
    (card kind ``sham``) is a reference, whatever its role in its own run; the archives must agree
    on the paired set, the base, the methods and their settings, the backend's settings, the
    samples and the rule's settings, and a model in several of them on its identity."""
    base: str | None = None
    roles: dict[str, str] = {}  # model key -> reference | organism
    runs: dict[tuple[str, ...], SubRun] = {}
    dirs: dict[str, str] = {}  # in the order first found
    taken: list[str] = []
    indexes = {}
    for a in map(Path, archives):
        try:
            indexes[str(a)] = json.loads((a / INDEX).read_text())
        except (OSError, ValueError):
            raise EvalAwareError(f"{a}: not an archive (no readable {INDEX}); write one with "
                                 "`evalaware organism archive`") from None
    found = {a: _in_table_order(a, sub_runs(a)) for a in map(Path, archives)}
    _same("the paired set (sha256)", {f"{a}/{s.path.name}": s.dataset_sha256 for a, subs in found.items()
                                      for s in subs})
    methods = [str(m) for m in next(iter(indexes.values())).get("methods") or []]
    _same("their methods", {a: sorted(i.get("methods") or []) for a, i in indexes.items()})
    ids = _same("the samples they read", {a: i.get("sample_ids") for a, i in indexes.items()})
    rule = {k: _same(f"--{k}", {a: (i.get("rule") or {}).get(k) for a, i in indexes.items()})
            for k in ("margin", "bootstrap", "seed")}
    shas = {a: i.get("probe_sha256") for a, i in indexes.items()}
    mismatch = None if len(shas) < 2 or (len(set(shas.values())) == 1 and None not in shas.values()) else (
        "the archives applied different probes, or a probe not archived ("
        + ", ".join(f"{a}: {str(v)[:12] if v else 'unknown'}" for a, v in shas.items()) + ")")
    settings: dict[str, dict[str, Any]] = {}
    backend: dict[str, Any] = {}
    identity: dict[tuple[str, ...], dict[str, Any]] = {}
    for a, subs in found.items():
        for s in subs:
            where = f"{a}/{s.path.name}"
            if s.kind != "cross read":
                for m, v in (s.manifest.get("methods") or {}).items():
                    settings.setdefault(m, {})[where] = v
                backend[where] = (s.manifest.get("model") or {}).get("backend_settings")
            identity.setdefault(s.keys, {})[where] = (s.manifest.get("model") or {}).get("identity")
            if s.kind == "base":
                if base is not None and base != s.models[0]:
                    raise EvalAwareError(f"judge: {where}: base {s.models[0]}, another archive's base is {base}; "
                                         "judge archives of one base together")
                base = s.models[0]
            elif s.kind != "cross read":
                key = s.keys[0]
                card = a / MODELS / Path(s.models[0]).name / CARD_NAME
                try:
                    raw = card.read_bytes()
                    kind = json.loads(raw).get("kind")
                except (OSError, ValueError):
                    raise EvalAwareError(f"{where}: its model's card ({card}) is missing from the archive "
                                         "or unreadable") from None
                if key != model_key(s.models[0], hashlib.sha256(raw).hexdigest()):
                    raise EvalAwareError(f"{card}: not the card {where} ran (its sha256 differs from the "
                                         "manifest's card_sha256)")
                roles[key] = "reference" if kind == "sham" else "organism"
                dirs.setdefault(key, str(card.parent))
            if s.keys in runs:
                taken.append(f"{where}: the same model(s) as {runs[s.keys].path}, which is taken")
                continue
            runs[s.keys] = s
    for m, by in settings.items():
        _same(f"the settings of {m}", by)
    _same("the backend's settings", backend)
    for by in identity.values():
        _same("a model's identity (weights, backend, dtype)", by)
    if base is None:
        raise EvalAwareError("judge: no archive holds the base's sub-run")
    return Gathered(base, [d for k, d in dirs.items() if roles[k] == "reference"],
                    [d for k, d in dirs.items() if roles[k] == "organism"], runs, dirs, taken, methods, ids,
                    rule, mismatch)
