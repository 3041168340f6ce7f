"""Run directories as the report reads them: records per method, manifest, samples; the
dataset's human annotations as a pseudo-method; the marks and names shown next to a method."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from harness.core.errors import EvalAwareError
from harness.methods import available, report_specs
from harness.methods.config import shared_settings
from harness.core.sample import Sample
from harness.reporting.doc import code, lit
from harness.runlog import RunLog
from harness.methods.report_spec import Specs

HUMAN = "human"


def method_specs() -> Specs:
    """The report specs of every registered method (and of the registered prefixes)."""
    return report_specs()


def is_judged(method: str) -> bool:
    cls = available().get(method)
    return bool(cls and cls.needs_judge)


@dataclass
class RunData:
    run_dir: Path
    manifest: dict[str, Any]
    records: dict[str, list[dict[str, Any]]]
    label: str = ""
    samples: list[Sample] = field(default_factory=list)
    logged_identity: dict[str, Any] = field(default_factory=dict)  # the log's, while no manifest
    #: Records that are no awareness readout (``ReportSpec.readout`` False: the behaviour
    #: method's), kept out of ``records`` and every readout table; the linkage table reads them.
    behaviours: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def identity(self) -> dict[str, Any]:
        return (self.manifest.get("model") or {}).get("identity") or self.logged_identity

    def incomplete(self) -> list[str]:
        """Why this run's figures are not final: no manifest yet (in progress or interrupted),
        methods with fewer records than the run has samples."""
        out = [] if self.manifest else ["no manifest yet (the run is in progress or was interrupted)"]
        n = len(self.samples)
        out += [f"{m}: {len(rs)}/{n} samples" for m, rs in {**self.records, **self.behaviours}.items()
                if n and len(rs) < n]
        return out

    @property
    def model(self) -> str:
        """Display name: the model name as given, or a local path's last component."""
        name = str((self.manifest.get("model") or {}).get("model") or self.run_dir.name)
        return Path(name).name if name.startswith(("/", "~", ".")) else name

    @property
    def weights(self) -> str:
        m = self.manifest.get("model") or {}
        return str(m.get("weights_sha256") or self.identity.get("weights_sha256") or "?")[:12]

    @property
    def git(self) -> str:
        return str(self.manifest.get("git_revision") or "?")[:12]

    @property
    def backend(self) -> str:
        return str(self.identity.get("backend", "?"))

    def config(self) -> dict[str, Any]:
        """The run's shared settings (view, person, constrain, ...): each as the first method
        recording it has it (a method records only the options it reads)."""
        return shared_settings(self.manifest.get("methods") or {})

    def judge_name(self) -> str:
        judge = self.manifest.get("judge")
        if not judge or judge.get("weights_sha256") == ((self.manifest.get("model") or {}).get("identity") or {}).get("weights_sha256"):
            return "the model itself"
        return f"{judge.get('backend', '?')} {str(judge.get('weights_sha256', '?'))[:12]}"

    def source(self) -> str:
        """The line naming this run in captions."""
        return (f"{lit(self.label)}: run {code(self.run_dir)}, model {lit(self.model)} "
                f"({lit(self.backend)}), weights {lit(self.weights)}, git {lit(self.git)}")


def method_label(method: str, manifest: dict[str, Any]) -> str:
    """`method` with its marks: "constrained" when the engine held its answers (a method whose
    spec says ``constrainable``: binary, probability) or judge verdicts (judged methods) to a
    grammar, "self-judged" when a judged method's judge was the model under test."""
    judged = is_judged(method)
    cfg = ((manifest.get("methods") or {}).get(method) or {}).get("config") or {}
    marks = []
    if cfg.get("constrain") and (method_specs()(method).constrainable or judged):
        marks.append("constrained")
    if judged and manifest.get("self_judged"):
        marks.append("self-judged")
    return method + (f" ({', '.join(marks)})" if marks else "")


def prompt_set_text(manifest: dict[str, Any]) -> str:
    """Which prompt set the run used, in words."""
    ps = manifest.get("prompt_set")
    if not ps:
        return "not recorded"
    if ps.get("set") == "custom":
        return (f"custom ({code('--prompts ' + str(ps.get('override_dir')))}: "
                f"{lit(', '.join(ps.get('overridden') or []))})")
    return "evalaware's own"


def human_records(records: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The dataset's real human P(eval) annotations as a pseudo-method (eval if >= 0.5).

    Only records whose `human_eval_source` names the annotators count (Needham et al.'s
    eval_author1/2, or a source our JSONL states); an unsourced `human_eval_probability`
    (e.g. runs of the first demo set, where it was the author's own guess) is never shown."""
    seen: dict[str, dict[str, Any]] = {}
    for rs in records.values():
        for r in rs:
            if (r.get("human_eval_probability") is not None and r.get("human_eval_source")
                    and r["sample_id"] not in seen):
                p = float(r["human_eval_probability"])
                seen[r["sample_id"]] = {**r, "method": HUMAN, "prediction": "eval" if p >= 0.5 else "deploy",
                                        "score": p, "n_valid": 1, "n_invalid": 0, "details": {}}
    return list(seen.values())


def human_name(recs: Sequence[dict[str, Any]]) -> str:
    """The human row's name: `human (<source>)`, every distinct source named."""
    return f"{HUMAN} (" + "; ".join(sorted({str(r["human_eval_source"]) for r in recs})) + ")"


def unsourced_human(records: dict[str, list[dict[str, Any]]]) -> int:
    """Samples whose records carry a human_eval_probability without a named source."""
    return len({r["sample_id"] for rs in records.values() for r in rs
                if r.get("human_eval_probability") is not None and not r.get("human_eval_source")})


def load_run(run_dir: str | Path) -> RunData:
    store = RunLog(run_dir, readonly=True)
    try:
        manifest = store.get_meta("manifest") or {}
        mf = Path(run_dir) / "manifest.json"
        if not manifest and mf.exists():
            manifest = json.loads(mf.read_text())
        records = {m: store.result_dicts(m) for m in store.methods()}
        samples = store.samples()
        identity = store.get_meta("model_identity") or {}
    finally:
        store.close()
    if not records:
        raise EvalAwareError(f"{run_dir}: the run has no results yet")
    specs = method_specs()
    behaviours = {m: rs for m, rs in records.items() if not specs(m).readout}
    readouts = {m: rs for m, rs in records.items() if m not in behaviours}
    return RunData(Path(run_dir), manifest, readouts, samples=samples, logged_identity=identity,
                   behaviours=behaviours)


def label_runs(runs: list[RunData]) -> None:
    """Each run's label: its model, with the run directory's name where two runs share one."""
    counts = Counter(r.model for r in runs)
    for r in runs:
        r.label = r.model if counts[r.model] == 1 else f"{r.model} ({r.run_dir.name})"
