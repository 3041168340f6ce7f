"""Run settings and the manifest, kept in the run log's ``meta`` table and ``manifest.json``."""

from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable

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
        ``manifest.json`` atomically (temporary file + rename)."""
        manifest = {**manifest, "schema_version": SCHEMA_VERSION}
        with self.transaction():
            if history:
                self.set_meta("manifests", self.get_meta("manifests", []) + [manifest])
            self.set_meta("manifest", manifest)
        tmp = self.run_dir / "manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
        os.replace(tmp, self.run_dir / "manifest.json")

    def add_to_manifest(self, section: str, name: str, entry: dict[str, Any]) -> None:
        """Record a derived artifact (a capture, a taxonomy) under ``manifest[section][name]``."""
        with self.transaction():
            man = self.get_meta("manifest") or {}
            man.setdefault(section, {})[name] = entry
            self.write_manifest(man, history=False)
