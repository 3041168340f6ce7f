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
- An ``.eval`` archive is checked before inspect-ai opens it: no member may unpack to more than
  :data:`MAX_MEMBER_BYTES`, nor all members together to more than :data:`MAX_ARCHIVE_BYTES` (a
  few hundred KB of zip can hold hundreds of MB of one string, or of several, which took minutes
  and GBs to parse). The sizes the archive declares are checked first, then the bytes really
  unpacked, counted while streaming (a forged header cannot get past): a one-line error names the
  file, the member and the cap. ``EVALAWARE_UNBOUNDED=1`` lifts both, as it lifts the
  command-line bounds (:mod:`harness.core.bounds`).
"""

from __future__ import annotations

import os
import struct
import zipfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from harness.data.records import LoadedDataset, RecordContext, duplicate_id, id_key, parse_messages
from harness.core.bounds import UNBOUNDED
from harness.core.errors import DatasetError
from harness.core.sample import LABELS, Sample, SampleMeta

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalSample

LOG_SUFFIXES = (".eval", ".json")

MAX_MEMBER_BYTES = 64 * 1024 * 1024
"""The most one member of an ``.eval`` archive may unpack to (64 MiB). Inspect writes one member
per sample and epoch (plus the header, the sample summaries and a journal); a sample's member,
even a long agent run with its events and attachments, is KBs to tens of MBs. Parsing costs about
1 s and 4 MB of memory per MB unpacked (a 250 MB member: 4 min 15 s and 1.05 GB, measured on the
2-core machine; 320 MB: 270 s and 1.3 GB), so 64 MiB bounds a hostile archive to about a minute;
``EVALAWARE_UNBOUNDED=1`` lifts it for a real log with a larger sample."""

MAX_ARCHIVE_BYTES = 128 * 1024 * 1024
"""The most all members of an ``.eval`` archive together may unpack to (128 MiB): about two
minutes of parsing at the rate above, where the per-member cap alone let 4 members of 60 MB
(263 KB of zip) take 57 s and 565 MB."""

_CHUNK = 1 << 20  # bytes read, and at most unpacked, per step of the check


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


_ZIP_ZSTANDARD = 93  # the zip method number of zstd, inspect-ai's default


class _MemberBytes:
    """The compressed bytes of one member, read from the archive file as a stream."""

    def __init__(self, f: Any, start: int, size: int) -> None:
        self.f, self.left = f, size
        f.seek(start)

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        b = self.f.read(n) if n > 0 else b""
        self.left = 0 if not b else self.left - len(b)
        return b


def _unpacked_chunks(f: Any, info: zipfile.ZipInfo, end: int) -> Iterator[int]:
    """Sizes of the chunks a member really unpacks to (stored, deflate, zstd), each at most
    _CHUNK bytes, from its compressed bytes on disk: the declared size is never trusted."""
    f.seek(info.header_offset)
    head = f.read(30)
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"bad local header of member {info.filename!r}")
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    start = info.header_offset + 30 + name_len + extra_len
    raw = _MemberBytes(f, start, max(0, min(info.compress_size, end - start)))
    if info.compress_type == zipfile.ZIP_STORED:
        while b := raw.read(_CHUNK):
            yield len(b)
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        d = zlib.decompressobj(-zlib.MAX_WBITS)
        while (b := raw.read(_CHUNK)) and not d.eof:
            while b and not d.eof:
                yield len(d.decompress(b, _CHUNK))
                b = d.unconsumed_tail
    elif info.compress_type == _ZIP_ZSTANDARD:
        import zstandard  # inspect-ai's own dependency

        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        while out := reader.read(_CHUNK):
            yield len(out)
    # another method: inspect-ai cannot read it either, and its error names the file


def check_archive(path: Path) -> None:
    """Refuse an ``.eval`` archive with a member that unpacks to more than
    :data:`MAX_MEMBER_BYTES`, or members that together unpack to more than
    :data:`MAX_ARCHIVE_BYTES` (no cap with ``EVALAWARE_UNBOUNDED=1``): the declared sizes first,
    then the bytes really unpacked. A broken zip is the usual one-line unreadable-log error."""
    if os.environ.get(UNBOUNDED):
        return
    cap, budget = MAX_MEMBER_BYTES, MAX_ARCHIVE_BYTES

    def too_big(info: zipfile.ZipInfo, size: str) -> DatasetError:
        return DatasetError(str(path), f"member {info.filename!r} of the archive {size} more than "
                                       f"{cap} bytes, the cap per member (MAX_MEMBER_BYTES in "
                                       f"harness/data/inspect_logs.py; {UNBOUNDED}=1 lifts it)")

    def over_budget(info: zipfile.ZipInfo, size: str) -> DatasetError:
        return DatasetError(str(path), f"the archive's members up to {info.filename!r} {size} more "
                                       f"than {budget} bytes, the cap for all members together "
                                       f"(MAX_ARCHIVE_BYTES in harness/data/inspect_logs.py; "
                                       f"{UNBOUNDED}=1 lifts it)")
    try:
        with zipfile.ZipFile(path) as z, open(path, "rb") as f:
            end = os.fstat(f.fileno()).st_size
            declared = 0
            for info in z.infolist():
                declared += info.file_size
                if info.file_size > cap:
                    raise too_big(info, f"declares {info.file_size} bytes unpacked,")
                if declared > budget:
                    raise over_budget(info, f"declare {declared} bytes unpacked,")
            unpacked = 0
            for info in z.infolist():
                total = 0
                for n in _unpacked_chunks(f, info, end):
                    total += n
                    unpacked += n
                    if total > cap:
                        raise too_big(info, "unpacks to")
                    if unpacked > budget:
                        raise over_budget(info, "unpack to")
    except DatasetError:
        raise
    except Exception as e:  # BadZipFile, zlib.error, zstandard.ZstdError, OSError
        raise _unreadable(path, e) from None


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
    if path.suffix == ".eval":
        check_archive(path)
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
    first: dict[str, tuple[Path, str]] = {}
    for f in log_files(path):
        got = read_log(f, label, label_field, explicit_label)
        for s in got.samples:
            other, other_id = first.setdefault(id_key(s.id), (f, s.id))
            if other_id != s.id:  # in one log or two: the same id after NFC, spelled apart
                raise DatasetError(str(f), duplicate_id(other_id, f"in {other}", s.id), record_id=s.id)
            if other != f:
                raise DatasetError(str(f), f"duplicate id (also in {other}): logs of the same "
                                           "task in one directory", record_id=s.id)
        out.samples += got.samples
        out.notes += got.notes
    if not out.samples:
        raise DatasetError(str(path), "no samples with messages in the Inspect log(s)")
    return out
