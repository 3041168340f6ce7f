"""A saved probe as a readout of `evalaware cues` (:class:`harness.cues.attribute.Readout`): the
probe stays frozen (trained elsewhere, e.g. on another dataset's eval/deploy labels); its layer
and pooling are captured for every original and variant of the cues run directory, with the
sequence the probe was trained on (prompt only, or prompt + answer), and its P(eval) is written
as records of method ``name``, so the probe's effects sit beside the methods'.

A sample whose original the probe was trained on is not scored (its score would be in-sample):
the same id, or the same messages under another id (an organism's paired set reuses the demo
set's prompts as its no-cue side), by the digests the probe recorded; the count is recorded as
``excluded_train_overlap``. The capture matches the probe's own: layer, pooling, the answer or
not, and the activations' storage dtype."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.backends.base import Backend
from harness.core.errors import EvalAwareError
from harness.core.sample import Sample
from harness.cues.variants import SEP
from harness.runlog import RunLog

from probes.activations.capture import run_capture
from probes.apply import apply_probe, messages_digest
from probes.io import load_probe
from probes.records import probe_records, saved_probe_owner, write_records


class ProbeReadout:
    """Capture + apply one frozen probe in a cues run directory."""

    def __init__(self, probe_dir: str | Path, model: str | None, backend: Backend | None = None,
                 engine_opts: dict[str, Any] | None = None, name: str = "probe",
                 batch_size: int = 8, progress: bool = True, force: bool = False) -> None:
        """`force`: apply the probe to a model with other weights than the one it was trained on
        (a frozen instrument on an organism of its base model)."""
        self.probe_dir, self.model, self.backend = str(probe_dir), model, backend
        self.force = force
        self.engine_opts, self.name = dict(engine_opts or {}), name
        self.batch_size, self.progress = batch_size, progress
        self.probe = load_probe(probe_dir)
        cap = self.probe.meta.get("capture") or {}
        self.include_answer = bool(cap.get("include_answer", False))
        train = self.probe.meta.get("train") or {}
        self.train_ids = set(train.get("sample_ids") or [])
        self.train_texts = set(train.get("messages_sha256") or [])
        self.store_dtype = str(cap.get("dtype") or "fp16")
        self.settings = {"probe": self.probe_dir, "layer": self.probe.layer, "pooling": self.probe.pooling,
                         "include_answer": self.include_answer, "store_dtype": self.store_dtype,
                         "kind": self.probe.meta.get("kind"), "text_overlap_checked": bool(self.train_texts),
                         "label_source": self.probe.meta.get("label_source"),
                         "train_run": train.get("run"), "train_ids_sha256": train.get("sample_ids_sha256")}
        if self.probe.meta.get("label_source") not in (None, "truth"):
            raise EvalAwareError(f"{probe_dir}: a probe trained on {self.probe.meta.get('label_source')!r} "
                                 f"labels is no eval/deploy readout; train it on the truth labels")

    def trained_on(self, samples: list[Sample]) -> set[str]:
        """Ids of the samples whose original (the sample itself, or a variant's ``pair``) the
        probe was trained on, by id or by messages."""
        by_id = {s.id: s for s in samples}

        def original(s: Sample) -> Sample:
            ex = s.metadata.extra
            is_variant = SEP in s.id and "direction" in ex and str(ex.get("pair")) in by_id
            return by_id[str(ex["pair"])] if is_variant else s

        out = set()
        for s in samples:
            o = original(s)
            if o.id in self.train_ids or messages_digest(o) in self.train_texts:
                out.add(s.id)
        return out

    @property
    def capture_name(self) -> str:
        return f"cues-{self.name}-L{self.probe.layer}-{self.probe.pooling}" + ("-answer" if self.include_answer else "")

    def score(self, run_dir: Path) -> dict[str, Any]:
        """Capture the probe's layer for every sample of `run_dir` (resumable), apply the probe,
        write its records (replacing earlier ones); what was done."""
        hidden = self.backend is not None and self.backend.capabilities.hidden_states
        summary = run_capture(run_dir, layers=str(self.probe.layer), poolings=self.probe.pooling,
                              dtype=self.store_dtype, model=self.model, name=self.capture_name,
                              batch_size=self.batch_size,
                              include_answer=self.include_answer, progress=self.progress,
                              backend=self.backend if hidden else None,
                              engine_opts=self.engine_opts)
        with RunLog(run_dir, create=False) as store:
            res = apply_probe(self.probe, store, self.capture_name, force=self.force)
            trained = self.trained_on(store.samples())
            keep = [i for i, sid in enumerate(res["ids"]) if sid not in trained]
            details = {"probe": self.probe.meta.get("kind"), "layer": self.probe.layer,
                       "pooling": self.probe.pooling, "capture": self.capture_name, "scores": "applied, frozen",
                       "train_run": (self.probe.meta.get("train") or {}).get("run")}
            recs = probe_records(store, [res["ids"][i] for i in keep], res["proba"][keep], res["decision"][keep],
                                 details, method=self.name)
            write_records(store, recs, self.name, saved_probe_owner(self.probe.meta))
        return {"captured": summary.samples_captured, "captured_before": summary.samples_done_before,
                "scored": len(keep), "excluded_train_overlap": len(res["ids"]) - len(keep),
                "capture": self.capture_name}
