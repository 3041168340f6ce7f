"""Hostile and careless input: secrets in server URLs, non-http URLs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.backends.openai.backend import OpenAIBackend, normalize_base_url
from harness.core.errors import BackendError
from harness.core.redact import redact_text, redact_url
from tests.helpers.cli import in_process

SECRET = "s3cr3t-VALUE"


class _Models(BaseHTTPRequestHandler):
    """A real OpenAI-style server on the loopback address: lists one model, records requests."""

    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:  # noqa: N802
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        if not self.path.startswith("/v1/models"):
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "no such route"}}')
            return
        body = json.dumps({"data": [{"id": "served-model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def server():
    _Models.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_redaction_masks_userinfo_and_query_values():
    assert redact_url(f"http://user:{SECRET}@host:8000/v1?api_key={SECRET}&x=1") == \
        "http://***@host:8000/v1?api_key=***&x=***"
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert SECRET not in redact_text(f"evalaware run --base-url http://h/?key={SECRET} --x 1")


def test_base_url_keeps_its_query_after_the_path_and_refuses_other_schemes():
    assert normalize_base_url(f"http://127.0.0.1:8000/?api_key={SECRET}") == \
        f"http://127.0.0.1:8000/v1?api_key={SECRET}"
    for bad in ("file:///etc/passwd", "ftp://host/v1", "127.0.0.1:8000", "http:///v1"):
        with pytest.raises(ValueError, match="not an http"):
            normalize_base_url(bad)
    with pytest.raises(ValueError, match="credentials in the URL") as e:
        normalize_base_url(f"http://user:{SECRET}@127.0.0.1:8000")
    assert SECRET not in str(e.value)


def test_secret_query_reaches_the_server_but_no_setting_or_message(server):
    b = OpenAIBackend(f"{server}/?api_key={SECRET}", model=None, chat_mode=True, api_key="k")
    try:
        path, auth = _Models.seen[0]
        assert path == f"/v1/models?api_key={SECRET}"  # /v1 before the query, as sent
        assert auth == "Bearer k"  # the key from the environment, never Basic auth
        shown = json.dumps([b.settings, b.device, b.base_url, b.http.pool.servers[0].to_dict()])
        assert SECRET not in shown and "api_key=***" in shown
        with pytest.raises(BackendError) as e:
            b.http.request("GET", "/nowhere")
        assert SECRET not in str(e.value) and "HTTP 404" in str(e.value)
    finally:
        b.close()


def _model_calls(run) -> int:
    from harness.runlog import RunLog

    with RunLog(run, readonly=True) as store:
        return sum(1 for _ in store.iter_calls())


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return in_process(*args)  # a fresh interpreter only where the environment must differ (the hub)


@pytest.mark.parametrize("url", ["file:///etc/passwd", f"http://user:{SECRET}@127.0.0.1:9/v1"])
def test_cli_refuses_bad_base_urls_before_any_work(tmp_path, url):
    out = tmp_path / "run"
    r = _cli("run", "--model", "m", "--backend", "openai", "--tokenizer", "smollm2",
             "--base-url", url, "--dataset", "demo", "--methods", "binary", "--out", str(out))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: --base-url")
    assert SECRET not in r.stderr + r.stdout
    assert not out.exists()  # refused before the run directory was made


def test_manifest_command_is_redacted(monkeypatch):
    from harness.runlog.provenance import base_manifest

    monkeypatch.setattr(sys, "argv", ["evalaware", "run", "--base-url", f"http://h/?api_key={SECRET}"])
    assert SECRET not in json.dumps(base_manifest())


# --- a lost run log is never re-created --------------------------------------------------------

def _run_dir(tmp_path):
    from harness.core.sample import Message, Sample, SampleMeta
    from harness.runlog import RunLog

    run = tmp_path / "run"
    store = RunLog(run)
    store.put_samples([Sample("a:1", (Message("user", "hi"),), "eval", SampleMeta(category="a"))])
    store.write_manifest({"model": {"model": "m"}})
    store.close()
    (run / "results.jsonl").write_text("{}\n")
    return run


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_a_lost_run_log_is_an_error_for_readers_and_writers(tmp_path, damage):
    from harness.core.errors import StoreError
    from harness.runlog import LOG_NAME, RunLog

    run = _run_dir(tmp_path)
    log = run / LOG_NAME
    for extra in ("-wal", "-shm"):
        (run / (LOG_NAME + extra)).unlink(missing_ok=True)
    log.write_bytes(b"") if damage == "truncate" else log.unlink()
    results = (run / "results.jsonl").read_text()
    for create in (False, True):
        with pytest.raises(StoreError, match="empty|missing|not a run directory"):
            RunLog(run, create=create)
    assert not log.exists() or log.stat().st_size == 0  # nothing was written
    r = _cli("show", str(run))
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: ")
    assert (run / "results.jsonl").read_text() == results


# --- report.md: dataset text cannot add markup -------------------------------------------------

HOSTILE = "cat\n# Injected heading <svg onload=alert(1)> <iframe src=javascript:alert(2)>"


def test_report_markdown_escapes_dataset_text(tmp_path):
    from harness.reporting.report import write_report
    from harness.runlog import RunLog
    from tests.test_report import make_run

    run = make_run(tmp_path / "run", model=f"model {HOSTILE}", seed=1, n_votes=5, n_samples=24)
    store = RunLog(run)
    for m in store.methods():
        recs = [r.to_dict() for r in store.results(m)]
        for i, r in enumerate(recs):
            r["category"] = HOSTILE if i % 2 else r["category"]
        store.replace_results(m, recs)
    store.close()
    md, page = write_report([run], tmp_path / "rep", n_boot=50)
    text = md.read_text()
    assert "Injected heading" in text  # the text is there ...
    assert not any(line.lstrip("\\").startswith("# Injected") and not line.startswith("\\")
                   for line in text.splitlines())  # ... but opens no heading
    for raw in ("<svg", "<iframe"):
        assert raw not in text
    assert "<svg" not in page.read_text()


# --- options are bounded when parsed --------------------------------------------------------

@pytest.mark.parametrize("args, flag", [
    (["--n-votes", "1000000"], "--n-votes"), (["--answer-tokens", "1000000000"], "--answer-tokens"),
    (["--top-p", "5"], "--top-p"), (["--top-p", "0"], "--top-p"),
    (["--temperature", "nan"], "--temperature"), (["--temperature", "-1"], "--temperature"),
    (["--batch-size", "0"], "--batch-size"), (["--gpu-memory-utilization", "inf"], "--gpu-memory-utilization"),
    (["--tensor-parallel-size", "0"], "--tensor-parallel-size"),
])
def test_unbounded_or_non_finite_options_are_refused_when_parsed(tmp_path, monkeypatch, args, flag):
    from click.testing import CliRunner

    from harness.backends import registry
    from evalaware.main import cli

    monkeypatch.setattr(registry, "make_backend", lambda *a, **k: pytest.fail("engine started"))
    r = CliRunner().invoke(cli, ["run", "--model", "smollm2", "--backend", "vllm", "--dataset", "demo",
                                 "--methods", "binary", "--out", str(tmp_path / "r"), *args])
    assert r.exit_code == 2, r.output
    assert flag in r.output
    assert not (tmp_path / "r").exists()


def test_report_bootstrap_is_bounded_and_the_bound_can_be_lifted(tmp_path, monkeypatch):
    from harness.core import bounds

    with pytest.raises(Exception, match=bounds.UNBOUNDED):
        bounds.resamples().convert("5000000", None, None)
    with pytest.raises(Exception):
        bounds.resamples().convert("-5", None, None)
    monkeypatch.setenv(bounds.UNBOUNDED, "1")
    assert bounds.resamples().convert("5000000", None, None) == 5000000
    with pytest.raises(Exception):
        bounds.resamples().convert("-5", None, None)


# --- small, one-label categories: a message, not a traceback ---------------------------------

def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps({"id": f"{c}:{i}", "label": lab, "messages": [
        {"role": "user", "content": f"question {i} about {c} " * (i + 1)}], "metadata": {"category": c}})
        + "\n" for i, (c, lab) in enumerate(rows)))
    return path


def test_data_audit_on_tiny_one_label_categories(tmp_path):
    data = _write_jsonl(tmp_path / "small.jsonl", [("a", "eval"), ("a", "eval"), ("b", "deploy"),
                                                   ("c", "deploy"), ("d", "deploy")])
    r = _cli("data", "audit", str(data), "--bootstrap", "20")
    assert "Traceback" not in r.stderr and r.returncode in (0, 2), r.stderr
    if r.returncode == 2:
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: ")


# --- one line, not a traceback ---------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_deeply_nested_json_is_one_line(tmp_path, suffix):
    p = tmp_path / f"deep{suffix}"
    p.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    r = _cli("data", "validate", str(p))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "nested too deeply" in r.stderr


def test_out_paths_under_a_file_or_missing_folder_are_one_line(tmp_path):
    from tests.test_report import make_run

    run = make_run(tmp_path / "run", model="m", seed=1, n_votes=3, n_samples=8)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for args in (["export", str(run), "--out", str(tmp_path / "missing" / "r.jsonl")],
                 ["report", str(run), "--out", str(blocker / "rep"), "--bootstrap", "0"]):
        r = _cli(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: ")


def test_terminal_output_shows_control_characters_in_dataset_text(tmp_path):
    bad = "cat\x00\nX\x1b[31mred\u202e"
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"{bad}:{i}", "label": lab, "messages": [
        {"role": "user", "content": "hi"}], "metadata": {"category": bad}}) + "\n"
        for i, lab in enumerate(["eval", "deploy"])))
    r = _cli("data", "validate", str(data))
    assert r.returncode == 0, r.stderr
    assert "\x00" not in r.stdout and "\x1b" not in r.stdout and "\u202e" not in r.stdout
    assert "cat\\x00\\nX\\x1b[31mred\\u202e" in r.stdout
    dup = tmp_path / "dup.jsonl"
    dup.write_text(data.read_text().splitlines()[0] + "\n" + data.read_text().splitlines()[0] + "\n")
    r = _cli("data", "validate", str(dup))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "\x1b" not in r.stderr


def test_a_prompt_longer_than_the_context_is_refused_before_any_model_call(tmp_path, tiny_model_dir):
    """The tiny model's context is 4096 tokens: a 10 MB prompt is refused in one line at once."""
    data = tmp_path / "long.jsonl"
    rows = [("ok:1", "eval", "What is 2+2?"), ("huge:1", "deploy", "word " * 2_000_000),
            ("long:1", "deploy", "word " * 5000)]
    data.write_text("".join(json.dumps({"id": i, "label": lab, "messages": [
        {"role": "user", "content": c}], "metadata": {"category": i.split(":")[0]}}) + "\n"
        for i, lab, c in rows))
    r = _cli("run", "--model", str(tiny_model_dir), "--backend", "hf", "--dataset", str(data),
             "--methods", "binary", "--out", str(tmp_path / "r"))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: sample 'huge:1': its prompt is over 4096")
    # refused on its length in characters (never tokenized), before any model call
    assert re.search(r"over 4096 tokens \(\d{8} characters\)", r.stderr), r.stderr
    assert not any((tmp_path / "r").rglob("*.sqlite")) or _model_calls(tmp_path / "r") == 0
    data.write_text("\n".join(ln for ln in data.read_text().splitlines() if "huge" not in ln) + "\n")
    r = _cli("run", "--model", str(tiny_model_dir), "--backend", "hf", "--dataset", str(data),
             "--methods", "binary", "--out", str(tmp_path / "r2"), "--answer-tokens", "16")
    assert r.returncode == 2 and "sample 'long:1': its prompt is 50" in r.stderr, r.stderr


# --- misleading or silent input ----------------------------------------------------------------

def test_misleading_inputs_are_named(tmp_path):
    obj = tmp_path / "obj.json"
    obj.write_text(json.dumps({"records": []}))
    r = _cli("data", "validate", str(obj))
    assert r.returncode == 2 and "expected a JSON array of records" in r.stderr
    assert "Inspect" in r.stderr and "corrupt" not in r.stderr.lower()

    flag = tmp_path / "flag.jsonl"
    flag.write_text(json.dumps({"id": True, "label": "eval", "messages": [
        {"role": "user", "content": "hi"}], "metadata": {"category": "a"}}) + "\n")
    r = _cli("data", "validate", str(flag))
    assert r.returncode == 2 and "record 1: field 'id'" in r.stderr

    extra = tmp_path / "extra.jsonl"
    extra.write_text("".join(json.dumps({"id": f"a:{i}", "label": lab, "category": "oops", "messages": [
        {"role": "user", "content": "hi"}], "metadata": {"category": "a"}}) + "\n"
        for i, lab in enumerate(["eval", "deploy"])))
    r = _cli("data", "validate", str(extra))
    assert r.returncode == 0
    assert "field 'category' in 2 record(s) is not read; did you mean metadata.category?" in r.stderr

    bad = tmp_path / "bad.jsonl"
    bad.write_text(extra.read_text().splitlines()[0] + "\n{oops\n")
    r = _cli("data", "validate", str(bad))
    assert "record 2: invalid JSON on line 2" in r.stderr  # both counted from 1


def test_a_limit_above_the_dataset_size_is_said(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from harness.backends import registry
    from evalaware.main import cli

    monkeypatch.setattr(registry, "make_backend", lambda *a, **k: (_ for _ in ()).throw(SystemExit(7)))
    r = CliRunner().invoke(cli, ["run", "--model", "smollm2", "--backend", "hf", "--dataset", "demo",
                                 "--limit", "99999", "--methods", "binary", "--out", str(tmp_path / "r")])
    assert "note: --limit 99999: the dataset has 96 samples; all are used" in r.output


# --- the report of a run in progress; a method with no signal ---------------------------------

def test_report_marks_an_incomplete_run_and_a_method_without_signal(tmp_path):
    from harness.reporting.report import write_report
    from harness.runlog import RunLog
    from tests.test_report import make_run

    run = make_run(tmp_path / "run", model="m", seed=3, n_votes=5, n_samples=24)
    store = RunLog(run)
    store.set_meta("manifest", {})  # as while the run is in progress: no manifest yet
    store.set_meta("model_identity", {"backend": "hf", "weights_sha256": "beefbeefbeef" + "0" * 52})
    recs = [r.to_dict() for r in store.results("logprob")]
    store.replace_results("logprob", [{**r, "prediction": None, "score": None} for r in recs])
    recs = [r.to_dict() for r in store.results("binary")]
    store.replace_results("binary", recs[:10])
    store.close()
    md, page = write_report([run], tmp_path / "rep", n_boot=20)
    text = md.read_text()
    assert "(hf), weights beefbeefbeef" in text  # backend and weights from the log, not "?"
    assert "24 (incomplete)" in text and "binary: 10/24 samples" in text
    assert "no manifest yet (the run is in progress or was interrupted)" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| run | logprob"))
    assert "– (no signal)" in row and "0% [0, 0]" not in row
    assert "`logprob`: no signal on run:" in text and not (tmp_path / "rep" / "bars_logprob.png").exists()
    assert "<strong>Warning:</strong>" in page.read_text() and "**Warning:**" not in page.read_text()


# --- hub ids download as their users expect (a loopback server stands in for the hub) ----------

def test_a_hub_id_is_downloaded_at_a_revision_unless_offline(tmp_path, tiny_model_dir):
    import os

    from tests.helpers.fake_hub import FakeHub

    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_HOME=str(tmp_path / "hf"), EVALAWARE_QUIET="1")
    with FakeHub({"org/tiny": {"main": tiny_model_dir, "v2": tiny_model_dir}}) as hub:
        env["HF_ENDPOINT"] = hub.url
        args = [sys.executable, "-m", "evalaware", "run", "--model", "org/tiny", "--backend", "hf",
                "--dataset", "demo", "--limit", "2", "--methods", "logprob"]
        r = subprocess.run(args + ["--offline", "--out", str(tmp_path / "off")], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "downloads are off" in r.stderr.strip().splitlines()[-1]
        assert not any("resolve" in q for q in hub.requests)
        r = subprocess.run(args + ["--revision", "v2", "--out", str(tmp_path / "r")], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert "downloading org/tiny@v2 from the hub" in r.stderr
        assert any(q.startswith("GET /org/tiny/resolve/") and q.endswith("model.safetensors")
                   for q in hub.requests)
        man = json.loads((tmp_path / "r" / "manifest.json").read_text())["model"]
        assert man["model"] == "org/tiny" and man["revision"] == "v2"
        from harness.models.fingerprint import weights_hash
        assert man["identity"]["weights_sha256"] == weights_hash(tiny_model_dir)
        n = len(hub.requests)  # cached now: offline, the same revision loads and asks the hub nothing
        r = subprocess.run(args + ["--offline", "--revision", "v2", "--out", str(tmp_path / "off2")],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert len(hub.requests) == n


def test_report_on_tiny_one_label_categories_says_why_instead_of_crashing(tmp_path):
    """The report's audit section runs grouped CV on the run's samples: a category with one
    sample of one label used to crash it with sklearn's ValueError."""
    from harness.core.sample import Message, Sample, SampleMeta
    from harness.reporting.report import write_report
    from harness.runlog import RunLog

    rows = [("a", "eval"), ("a", "eval"), ("b", "deploy"), ("c", "deploy"), ("d", "deploy")]
    samples = [Sample(f"{c}:{i}", (Message("user", f"question {i} " * (i + 1)),), lab,
                      SampleMeta(category=c)) for i, (c, lab) in enumerate(rows)]
    store = RunLog(tmp_path / "run")
    store.put_samples(samples)
    store.put_results("binary", [{"sample_id": s.id, "method": "binary", "label": s.label,
                                  "prediction": s.label, "score": 0.7 if s.is_eval else 0.3,
                                  "n_valid": 1, "n_invalid": 0, "category": s.metadata.category,
                                  "details": {}} for s in samples])
    store.close()
    md, _ = write_report([tmp_path / "run"], tmp_path / "rep", n_boot=10)
    assert "Surface" in md.read_text() or "surface" in md.read_text()
