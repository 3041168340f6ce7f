"""Inspect AI eval logs (``.eval``, ``.json``, or a directory of them) as a dataset.

Read with inspect-ai's own reader (``read_eval_log`` for the header, then ``read_eval_log_sample``
per sample and epoch of an ``.eval`` archive, or ``read_eval_log`` once for a ``.json`` log;
attachments resolved); the archive is never parsed by hand.

Decisions:
- Each (sample, epoch) becomes one Sample with id ``<task>:<sample id>``, plus ``:<epoch>`` only
  when the log ran several epochs (so a one-epoch log's ids match its task's sample ids).
- Messages keep their roles (system/user/assistant/tool), tool calls with their ids and tool
  results with ``tool_call_id``; reasoning blocks go to ``Message.reasoning``, never into the
  answer; a tool error without output becomes the tool message's text.
- Metadata: ``category`` is the sample's own ``metadata.category`` when it has one, else the task
  (samples of one task share a template, so a task is the natural cluster); ``eval_type`` likewise;
  ``extra`` holds task, model, log file, sample id, uuid, epoch and scores so results join back.
- Label: every sample gets ``label`` (default ``eval``: an Inspect log is usually an evaluation),
  or, with ``label_field``, the value of that sample-metadata field (``eval``/``deploy``, or a
  boolean, true = eval); a sample without the field takes ``label`` when one was given explicitly,
  else it is an error.
- A log whose status is not ``success`` (cancelled, error, started): the samples it holds are
  read and the missing (sample, epoch) pairs are counted in a note, as are samples that hold no
  messages (skipped) and samples that ended in an error (kept: their first turn is intact; the
  full view stops at the error). A log inspect-ai cannot read (truncated, corrupt) is a one-line :class:`DatasetError`
  naming the file, and the sample when the failure is in one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from harness.data.records import LoadedDataset, RecordContext, parse_messages
from harness.core.errors import DatasetError
from harness.core.sample import LABELS, Sample, SampleMeta

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalSample

LOG_SUFFIXES = (".eval", ".json")


def _inspect_log_api() -> Any:
    try:
        import inspect_ai.log as api  # optional extra (inspect), heavy
    except ImportError as e:  # pragma: no cover - the test extra installs it
        raise DatasetError("inspect-ai", "reading Inspect logs needs inspect-ai "
                           "(pip install 'evalaware[inspect]')") from e
    return api


def is_inspect_log(path: Path) -> bool:
    """A directory, an ``.eval`` archive, or a ``.json`` file holding one object with Inspect's
    fields (our JSON and Needham's are arrays)."""
    if path.is_dir() or path.suffix == ".eval":
        return True
    if path.suffix != ".json":
        return False
    with open(path, "rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    # Inspect writes "version" and "status" first, then "eval": another object is not a log
    return head.startswith(b"{") and any(k in head for k in (b'"eval"', b'"version"'))


def log_files(path: Path) -> list[Path]:
    """The log itself, or every Inspect log under a directory (recursively, sorted by path)."""
    if not path.is_dir():
        return [path]
    api = _inspect_log_api()
    found = sorted(Path(info.name.removeprefix("file://"))
                   for info in api.list_eval_logs(str(path), recursive=True))
    if not found:
        raise DatasetError(str(path), "no Inspect logs (.eval or .json) in this directory")
    return found


def _unreadable(path: Path, e: Exception, where: str = "") -> DatasetError:
    msg = " ".join(str(e).split())[:200] or type(e).__name__
    return DatasetError(str(path), f"{where}not a readable Inspect log (truncated or corrupt?): "
                                   f"{type(e).__name__}: {msg}")


def _label(s: EvalSample, label: str, label_field: str | None, explicit: bool, sid: str,
           path: Path) -> str:
    if label_field is None:
        return label
    meta = s.metadata or {}
    if label_field not in meta:
        if explicit:
            return label
        raise DatasetError(str(path), "sample has no such metadata field (pass --label for a default)",
                           record_id=sid, field=f"metadata.{label_field}")
    v = meta[label_field]
    if isinstance(v, bool):
        return "eval" if v else "deploy"
    if v in LABELS:
        return str(v)
    raise DatasetError(str(path), f"label must be 'eval' or 'deploy' (or a boolean), got {v!r}",
                       record_id=sid, field=f"metadata.{label_field}")


def _message_dicts(s: EvalSample) -> list[dict[str, Any]]:
    """Inspect's chat messages as the dicts :func:`harness.data.records.parse_messages` validates."""
    out = []
    for m in s.messages:
        d = m.model_dump(exclude_none=True)
        if m.role == "tool" and not d.get("content") and getattr(m, "error", None) is not None:
            d["content"] = f"Error ({m.error.type}): {m.error.message}"
        out.append(d)
    return out


def _scores(s: EvalSample) -> dict[str, Any]:
    return {name: sc.value for name, sc in (s.scores or {}).items()}


def _to_sample(s: EvalSample, header: EvalLog, path: Path, sid: str, label: str) -> Sample:
    messages = parse_messages(_message_dicts(s), RecordContext(path, None, sid), "messages")
    meta = s.metadata or {}
    task = header.eval.task
    return Sample(
        id=sid, messages=messages, label=label,
        metadata=SampleMeta(
            category=str(meta.get("category") or task),
            agentic=any(m.tool_calls or m.role == "tool" for m in messages),
            eval_type=str(meta.get("eval_type") or ""),
            extra={"task": task, "model": header.eval.model, "log": str(path),
                   "inspect_sample_id": s.id, "uuid": s.uuid, "epoch": s.epoch,
                   "scores": _scores(s), **({"error": s.error.message} if s.error else {})},
        ),
    )


def _sample_reader(api: Any, path: Path) -> Callable[[Any, int], EvalSample]:
    """(sample id, epoch) -> sample, raising IndexError when the log lacks it. An ``.eval``
    archive is read one sample at a time; a ``.json`` log at once (inspect-ai would re-parse the
    whole file for every sample)."""
    if path.suffix != ".json":
        return lambda sample_id, epoch: api.read_eval_log_sample(
            str(path), id=sample_id, epoch=epoch, resolve_attachments="core",
            exclude_fields={"events", "store"})
    try:
        log = api.read_eval_log(str(path), resolve_attachments="core")
    except Exception as e:
        raise _unreadable(path, e) from None
    by_key = {(s.id, s.epoch): s for s in log.samples or []}

    def get(sample_id: Any, epoch: int) -> EvalSample:
        if (sample_id, epoch) not in by_key:
            raise IndexError(sample_id)
        return by_key[(sample_id, epoch)]
    return get


def read_log(path: Path, label: str = "eval", label_field: str | None = None,
             explicit_label: bool = False) -> LoadedDataset:
    """Samples of one Inspect log; see the module docstring for the decisions."""
    api = _inspect_log_api()
    try:
        header = api.read_eval_log(str(path), header_only=True)
    except Exception as e:  # inspect raises zip, JSON and validation errors alike
        raise _unreadable(path, e) from None
    task, epochs = header.eval.task, header.eval.config.epochs or 1
    ids = header.eval.dataset.sample_ids
    if ids is None:
        raise DatasetError(str(path), "log lists no sample ids (written by a very old inspect-ai?)")
    read_sample = _sample_reader(api, path)
    out, missing, empty, errored = LoadedDataset([], []), 0, 0, 0
    for sample_id in ids:
        for epoch in range(1, epochs + 1):
            sid = f"{task}:{sample_id}" + (f":{epoch}" if epochs > 1 else "")
            try:
                s = read_sample(sample_id, epoch)
            except IndexError:
                missing += 1
                continue
            except Exception as e:
                raise _unreadable(path, e, f"sample {sid!r}: ") from None
            if not s.messages:
                empty += 1
                continue
            errored += s.error is not None
            out.samples.append(_to_sample(s, header, path, sid,
                                          _label(s, label, label_field, explicit_label, sid, path)))
    expected = len(ids) * epochs
    if header.status != "success" or missing:
        out.notes.append(f"{path}: status {header.status}; read {len(out.samples)} of {expected} "
                         f"samples, skipped {missing} not in the log")
    if empty:
        out.notes.append(f"{path}: skipped {empty} samples with no messages")
    if errored:
        out.notes.append(f"{path}: {errored} samples ended in an error; kept, their transcripts "
                         "stop at the error (metadata.error)")
    return out


def read_logs(path: Path, label: str = "eval", label_field: str | None = None,
              explicit_label: bool = False) -> LoadedDataset:
    """Samples of an Inspect log or of every log under a directory; ids must be unique across
    logs (two logs of the same task collide: pass one of them, or a directory per run)."""
    out = LoadedDataset([], [])
    first: dict[str, Path] = {}
    for f in log_files(path):
        got = read_log(f, label, label_field, explicit_label)
        for s in got.samples:
            if s.id in first:
                raise DatasetError(str(f), f"duplicate id (also in {first[s.id]}): logs of the same "
                                           "task in one directory", record_id=s.id)
            first[s.id] = f
        out.samples += got.samples
        out.notes += got.notes
    if not out.samples:
        raise DatasetError(str(path), "no samples with messages in the Inspect log(s)")
    return out
