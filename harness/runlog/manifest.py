"""Run settings and the manifest, kept in the run log's ``meta`` table and ``manifest.json``."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable

from harness.core.atomic import write_text
from harness.core.errors import StoreError
from harness.runlog.codec import dumps
from harness.runlog.schema import SCHEMA_VERSION
from harness.runlog.tables import Table


class MetaAndManifest:
    """The ``meta`` part of :class:`harness.runlog.RunLog` (needs its `_meta` table,
    `transaction` and `run_dir`)."""

    _meta: Table
    run_dir: Path
    transaction: Callable[[], AbstractContextManager[Any]]

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._meta.select(["value"], {"key": key})
        return json.loads(row[0][0]) if row else default

    def set_meta(self, key: str, value: Any) -> None:
        self._meta.insert([(key, dumps(value))], replace=True)

    def meta_keys(self, prefix: str = "") -> list[str]:
        return sorted(k for (k,) in self._meta.select(["key"]) if k.startswith(prefix))

    def manifest(self) -> dict[str, Any]:
        """The run manifest (falls back to ``manifest.json`` for a run that has only the file)."""
        man = self.get_meta("manifest")
        mf = self.run_dir / "manifest.json"
        if not man and mf.exists():
            man = json.loads(mf.read_text())
        return man or {}

    def write_manifest(self, manifest: dict[str, Any], history: bool = True) -> None:
        """Store the manifest (and append it to ``manifests`` when `history`), then write
        ``manifest.json`` atomically (a fresh temporary file + rename, never through a link
        planted in the run directory: :func:`harness.core.atomic.replace_file`)."""
        manifest = {**manifest, "schema_version": SCHEMA_VERSION}
        with self.transaction():
            if history:
                self.set_meta("manifests", self.get_meta("manifests", []) + [manifest])
            self.set_meta("manifest", manifest)
        write_text(self.run_dir / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True))

    def dataset(self) -> dict[str, str] | None:
        """The dataset this run directory belongs to (:func:`harness.runlog.provenance.
        dataset_identity`); for a run made before it was recorded, the one its manifest names."""
        return self.get_meta("dataset") or (self.get_meta("manifest") or {}).get("dataset")

    def check_dataset(self, dataset: dict[str, str]) -> None:
        """Refuse a dataset other than the run's own: a run directory belongs to one dataset
        file (its content; the path may differ, a --limit/--first subset of it is the same)."""
        old = self.dataset()
        if not old or old.get("sha256") == dataset["sha256"]:
            return
        was = f"{old.get('path')} (sha256 {str(old.get('sha256'))[:12]}...)"
        now = (f"that file has changed since (sha256 now {dataset['sha256'][:12]}...)"
               if old.get("path") == dataset["path"] else
               f"{dataset['path']} (sha256 {dataset['sha256'][:12]}...) is another dataset")
        raise StoreError(f"{self.run_dir}: this run directory belongs to dataset {was}; {now}: "
                         f"use a new --out directory")

    def claim_dataset(self, dataset: dict[str, str]) -> None:
        """:meth:`check_dataset`, then record `dataset` as the run's own (one transaction)."""
        with self.transaction():
            self.check_dataset(dataset)
            self.set_meta("dataset", dataset)

    def add_to_manifest(self, section: str, name: str, entry: dict[str, Any]) -> None:
        """Record a derived artifact (a capture, a taxonomy) under ``manifest[section][name]``."""
        with self.transaction():
            man = self.get_meta("manifest") or {}
            man.setdefault(section, {})[name] = entry
            self.write_manifest(man, history=False)
