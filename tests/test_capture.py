"""Activation capture: hooks vs output_hidden_states, padding-safe pooling, evidence spans,
the shard store and resuming an interrupted capture. Real tiny models, no mocks."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from harness.core.errors import EvalAwareError, StoreError
from harness.methods.base import MethodConfig
from probes.activations.store import ActivationStore
from probes.activations.capture import capture, parse_layers, pooled, run_capture
from harness.backends.hooks import capture_hidden, decoder_parts, layer_hooks
from probes.activations.pooling import (SequenceSpans, char_spans_to_tokens, find_quote, pooling_weights,
                            token_char_offsets)
from probes.activations.sequences import CaptureItem, collect_quotes
from tests.helpers.probe_runs import answer_run

ALL_POOLINGS = ["last_prompt", "mean_prompt", "mean_answer", "mean_reasoning", "mean_evidence"]


# --- hooks ----------------------------------------------------------------------------------
def _ref_hidden(model, ids, mask, pos):
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=mask, position_ids=pos,
                     output_hidden_states=True).hidden_states


def test_hooks_equal_output_hidden_states(hf_tiny):
    ids, mask, pos = hf_tiny.left_pad([[1, 504, 33, 9, 71, 8], [1, 45, 7]])
    ref = _ref_hidden(hf_tiny.model, ids, mask, pos)
    n = len(decoder_parts(hf_tiny.model)[1])
    got = capture_hidden(hf_tiny.model, ids, mask, pos, list(range(n + 1)))
    assert len(ref) == n + 1 == len(got)
    for layer in range(n + 1):
        torch.testing.assert_close(got[layer], ref[layer].float(), rtol=0, atol=1e-6)
    # the last id is after the final norm (HF convention), not the raw last-block output
    raw = {}
    _, blocks, _ = decoder_parts(hf_tiny.model)
    h = blocks[-1].register_forward_hook(lambda m, a, o: raw.setdefault("x", o))
    try:
        capture_hidden(hf_tiny.model, ids, mask, pos, [n])
    finally:
        h.remove()
    assert not torch.allclose(raw["x"].float(), got[n], atol=1e-3)


@pytest.mark.slow
def test_hooks_equal_output_hidden_states_smollm2(hf_smollm2):
    ids, mask, pos = hf_smollm2.left_pad([[1, 504, 33, 9, 71, 8, 11, 12], [1, 45, 7]])
    ref = _ref_hidden(hf_smollm2.model, ids, mask, pos)
    layers = [0, 1, 15, 29, 30]
    got = capture_hidden(hf_smollm2.model, ids, mask, pos, layers)
    for layer in layers:
        torch.testing.assert_close(got[layer], ref[layer].float(), rtol=1e-5, atol=1e-4)


class _TupleLayer(nn.Module):
    """An old-style decoder layer returning (hidden, attn_weights)."""

    def __init__(self, k: float) -> None:
        super().__init__()
        self.k = k

    def forward(self, hidden_states, **kw):
        return (hidden_states * self.k + 1.0, None)


class _TupleBody(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.layers = nn.ModuleList([_TupleLayer(2.0), _TupleLayer(3.0)])
        self.norm = nn.LayerNorm(4)

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        h = self.embed(input_ids)
        for layer in self.layers:
            h = layer(h, attention_mask=attention_mask)[0]
        return self.norm(h)


class _TupleLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = _TupleBody()
        self.config = SimpleNamespace(num_hidden_layers=2, hidden_size=4)


def test_hooks_accept_tuple_outputs():
    torch.manual_seed(0)
    lm = _TupleLM()
    ids = torch.tensor([[1, 2, 3]])
    got = capture_hidden(lm, ids, torch.ones_like(ids), torch.arange(3)[None], [0, 1, 2])
    e = lm.model.embed(ids).detach()
    torch.testing.assert_close(got[0], e)
    torch.testing.assert_close(got[1], e * 2 + 1)
    torch.testing.assert_close(got[2], lm.model.norm((e * 2 + 1) * 3 + 1).detach())


def test_layers_above_the_highest_requested_do_not_run(hf_tiny):
    _, blocks, norm = decoder_parts(hf_tiny.model)
    calls = []
    h = blocks[-1].register_forward_hook(lambda *a: calls.append(1))
    try:
        ids, mask, pos = hf_tiny.left_pad([[1, 2, 3]])
        got = capture_hidden(hf_tiny.model, ids, mask, pos, [1])
    finally:
        h.remove()
    assert list(got) == [1] and calls == []
    with pytest.raises(ValueError, match="out of range"):
        with layer_hooks(hf_tiny.model, [len(blocks) + 1], lambda l, x: None):
            pass


# --- pooling --------------------------------------------------------------------------------
def test_pooling_weights_never_touch_padding():
    spans = [SequenceSpans(n_prompt=3, n_total=5, evidence=((3, 4),)),
             SequenceSpans(n_prompt=8, n_total=8)]
    w = pooling_weights(spans, ALL_POOLINGS, width=8)
    assert w[0, :, :3].abs().sum() == 0  # the 3 left-padding positions of the short sequence
    torch.testing.assert_close(w[0, 0], torch.tensor([0, 0, 0, 0, 0, 1.0, 0, 0], dtype=torch.float64))
    torch.testing.assert_close(w[0, 2].sum(), torch.tensor(1.0, dtype=torch.float64))
    assert w[0, 2, 6:].tolist() == [0.5, 0.5]
    assert w[0, 4].nonzero().flatten().tolist() == [6]
    assert w[1, 2].sum() == 0 and w[1, 3].sum() == 0  # no answer / no reasoning: absent
    h = torch.randn(2, 8, 4, dtype=torch.float64)
    h2 = h.clone()
    h2[0, :3] = 1e6  # garbage in the padding changes nothing
    torch.testing.assert_close(torch.einsum("bpt,bth->bph", w, h), torch.einsum("bpt,bth->bph", w, h2))


def test_batched_pooling_equals_one_by_one(hf_tiny):
    eng = hf_tiny
    items = [CaptureItem("a", (1, 504, 33, 9, 71, 8, 14, 15, 16, 17), SequenceSpans(4, 10, (), ((6, 8),))),
             CaptureItem("b", (1, 45, 7, 88), SequenceSpans(2, 4)),
             CaptureItem("c", (1, 9, 9, 9, 3, 5, 2), SequenceSpans(7, 7))]
    layers = [0, 1, 2]
    batch = pooled(eng, items, layers, ALL_POOLINGS)
    for i, it in enumerate(items):
        one = pooled(eng, [it], layers, ALL_POOLINGS)[0]
        torch.testing.assert_close(batch[i], one, rtol=1e-4, atol=1e-5)
    # and the means are over exactly the intended tokens of the unpadded sequence
    ids = torch.tensor([items[0].ids])
    full = capture_hidden(hf_tiny.model, ids, torch.ones_like(ids), torch.arange(10)[None], layers)
    for k, layer in enumerate(layers):
        torch.testing.assert_close(batch[0, 2, k], full[layer][0, 4:].mean(0), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(batch[0, 4, k], full[layer][0, 6:8].mean(0), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(batch[0, 0, k], full[layer][0, 3], rtol=1e-4, atol=1e-5)


def test_char_to_token_spans_with_offsets_and_fallback(hf_tiny):
    tok = hf_tiny.tokenizer
    text = "The user is likely testing me — naïve café 🙂 end."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    dec, offs = token_char_offsets(tok, ids)
    assert dec == text and offs[-1][1] == len(text)
    span = find_quote(dec, "likely  TESTING me")  # whitespace/case-insensitive fallback
    assert span is not None and dec[span[0]:span[1]] == "likely testing me"
    (a, b), = char_spans_to_tokens([span], offs)
    assert "likely testing me" in tok.decode(ids[a:b])
    # non-canonical token ids (one token per character) force the prefix-decoding path
    chars = [tok.convert_tokens_to_ids(c) for c in "hello"]
    dec2, offs2 = token_char_offsets(tok, chars)
    assert dec2 == "hello" and offs2 == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert find_quote("abc", "zzz") is None


def test_collect_quotes_from_record_details():
    details = {"evidence": ["quote one", {"quote": "quote two"}], "votes": [
        {"judge": {"quotes": ["quote three", "quote one"]}}], "other": ["not a quote"]}
    assert collect_quotes(details) == ["quote one", "quote two", "quote three"]


def test_parse_layers():
    assert parse_layers("all", 4) == [0, 1, 2, 3, 4]
    assert parse_layers("every:3", 30) == [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30]
    assert parse_layers("0, -1, 2", 4) == [0, 2, 4]
    for bad in ("every:0", "7", "x,1", "every:z"):
        with pytest.raises(EvalAwareError):
            parse_layers(bad, 4)


# --- capture over a run directory -----------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, hf_tiny):
    """8 demo samples with the tiny model's cached answers, plus `reasoning` records whose
    evidence quotes are substrings of the answers."""
    from harness.data.readers import load_dataset

    samples = load_dataset("demo")[::12][:8]
    run = tmp_path_factory.mktemp("run") / "r"
    store = answer_run(run, samples, hf_tiny, MethodConfig(answer_tokens=12, temperature=1.0))
    from harness.backends.cache import CachedBackend
    from harness.methods.base import RunContext, answer_samples
    from harness.methods.prompts import PromptLibrary
    from harness.core.records import Record
    from harness.core.render import Renderer

    ctx = RunContext(CachedBackend(hf_tiny, store), Renderer(hf_tiny.tokenizer), MethodConfig(answer_tokens=12, temperature=1.0),
                     PromptLibrary())
    gens = answer_samples(ctx, samples)
    recs = []
    for s, g in zip(samples, gens):
        raw = g.raw_text
        recs.append(Record.for_sample(s, "reasoning", "eval", 1.0, 1, 0, details={
            "sample_answer": g.text, "evidence": [raw[len(raw) // 3: 2 * len(raw) // 3]]}))
    store.put_results("reasoning", recs)
    store.close()
    return run, samples, gens


def _capture(run, engine, name="default", **kw):
    from harness.runlog import RunLog

    store = RunLog(run, create=False)
    try:
        return capture(store, engine, kw.pop("layers", [0, 1, 2]), kw.pop("poolings", ALL_POOLINGS),
                       name=name, progress=False, **kw)
    finally:
        store.close()


def test_capture_run_with_answers_and_evidence(tiny_run, hf_tiny):
    run, samples, gens = tiny_run
    eng = hf_tiny
    s = _capture(run, eng, name="full", batch_size=3, shard_size=5)
    assert s.samples_captured == 8 and s.shards_written == 2
    assert s.absent["mean_reasoning"] == 8  # the tiny model writes no <think> block
    assert s.absent["mean_evidence"] == 0 and s.absent["mean_answer"] == 0
    from harness.runlog import RunLog

    store = RunLog(run, create=False)
    acts = ActivationStore(store, "full")
    info = acts.sample_info()
    assert {i["answer_source"] for i in info.values()} == {"cache"}
    assert all(i["quotes_found"] == 1 == i["quotes_total"] for i in info.values())
    ids, X = acts.load("mean_evidence")
    assert ids == [x.id for x in samples] and X[2].shape == (8, 64)
    # recompute sample 0's evidence mean by hand from the full hidden states
    from harness.core.render import Renderer

    prompt = Renderer(hf_tiny.tokenizer).render(samples[0].first_turn())
    seq = list(prompt) + list(gens[0].token_ids)
    t = torch.tensor([seq])
    full = capture_hidden(hf_tiny.model, t, torch.ones_like(t), torch.arange(len(seq))[None], [2])
    raw = gens[0].raw_text
    quote = raw[len(raw) // 3: 2 * len(raw) // 3]
    _, offs = token_char_offsets(hf_tiny.tokenizer, gens[0].token_ids)
    a, b = char_spans_to_tokens([find_quote(raw, quote)], offs)[0]
    want = full[2][0, len(prompt) + a:len(prompt) + b].mean(0).numpy()
    np.testing.assert_allclose(X[2][0], want, rtol=2e-3, atol=2e-3)  # stored as fp16
    man = json.loads((run / "manifest.json").read_text())
    assert man["activations"]["full"]["layers"] == [0, 1, 2] and "packages" in man["activations"]["full"]
    assert store.get_meta("manifest")["activations"]["full"]["dtype"] == "fp16"
    st = acts.stats()
    assert st["samples"] == 8 and st["vectors_per_pooling"]["mean_answer"] == 8
    assert st["theoretical_per_pooling"] == 3 * 64 * 2
    store.close()


def test_capture_limit_takes_the_stratified_subset(tiny_run, hf_tiny):
    """`activations capture --limit N` captures the same samples `run --limit N` would choose."""
    from harness.runlog import RunLog
    from harness.data.subset import select

    run, samples, _ = tiny_run
    s = run_capture(run, layers="0", poolings="last_prompt", name="limited", backend=hf_tiny,
                    progress=False, subset=lambda xs: select(xs, limit=4))
    assert s.samples_total == s.samples_captured == 4
    store = RunLog(run, create=False)
    ids, _ = ActivationStore(store, "limited").load("last_prompt")
    store.close()
    assert ids == [x.id for x in select(samples, limit=4)]
    assert {x.label for x in samples if x.id in ids} == {"eval", "deploy"}


def test_answers_fall_back_to_record_text(tiny_run, hf_tiny):
    from harness.runlog import RunLog
    from probes.activations.sequences import build_items

    run, samples, gens = tiny_run
    store = RunLog(run, create=False)
    store.set_meta("model_identity", {"backend": "other", "weights_sha256": "x"})
    try:
        items = build_items(store, samples[:2], hf_tiny.tokenizer)
    finally:
        store.set_meta("model_identity", hf_tiny.identity)
        store.close()
    assert [it.info["answer_source"] for it in items] == ["record", "record"]
    assert items[0].spans.n_total > items[0].spans.n_prompt


def test_interrupted_capture_resumes_without_duplicates(tiny_run, hf_tiny, monkeypatch):
    from harness.runlog import RunLog

    run, samples, _ = tiny_run
    eng = hf_tiny
    calls = {"n": 0}
    orig = ActivationStore._index_shard

    def crash_on_second(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("killed after the rename, before the index commit")
        return orig(self, *a, **k)

    monkeypatch.setattr(ActivationStore, "_index_shard", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        _capture(run, eng, name="resume", batch_size=2, shard_size=2)
    monkeypatch.setattr(ActivationStore, "_index_shard", orig)
    d = run / "activations" / "resume"
    assert sorted(p.name for p in d.glob("*.safetensors")) == ["shard-00000.safetensors",
                                                               "shard-00001.safetensors"]
    (d / "shard-00009.safetensors.tmp").write_bytes(b"partial")
    s = _capture(run, eng, name="resume", batch_size=2, shard_size=2)
    assert s.samples_done_before == 2 and s.samples_captured == 6
    assert sorted(s.removed_files) == ["shard-00001.safetensors", "shard-00009.safetensors.tmp"]
    store = RunLog(run, create=False)
    acts = ActivationStore(store, "resume")
    files = sorted(p.name for p in d.iterdir() if p.name != "capture.json")
    assert files == acts.shards() and len(files) == 4
    rows = acts.sample_rows.select(["sample_id"], acts.where)
    assert (len(rows), len(set(rows))) == (8, 8)
    # same vectors as an uninterrupted capture
    _capture(run, eng, name="straight", batch_size=2, shard_size=2)
    for p in ("last_prompt", "mean_answer", "mean_evidence"):
        ids_a, xa = acts.load(p)
        ids_b, xb = ActivationStore(store, "straight").load(p)
        assert ids_a == ids_b
        for layer in xa:
            np.testing.assert_allclose(xa[layer], xb[layer], rtol=1e-3, atol=1e-3)
    # nothing left to do on a third run
    assert _capture(run, eng, name="resume").samples_captured == 0
    store.close()


def test_capture_refuses_changed_settings(tiny_run, hf_tiny):
    run, _, _ = tiny_run
    eng = hf_tiny
    _capture(run, eng, name="settings", layers=[0, 2], poolings=["last_prompt"])
    with pytest.raises(StoreError, match="different settings"):
        _capture(run, eng, name="settings", layers=[0, 1, 2], poolings=["last_prompt"])


def test_vllm_connector_file_layout(tmp_path):
    from safetensors.torch import save_file

    from harness.core.errors import BackendError
    from harness.backends.vllm.hidden import read_hidden_file, vllm_kwargs

    hs = torch.randn(5, 3, 8)  # (tokens, layer ids, hidden) as the connector writes it
    save_file({"hidden_states": hs, "token_ids": torch.tensor([1, 2, 3, 4, 5])}, str(tmp_path / "h.safetensors"))
    got = read_hidden_file(tmp_path / "h.safetensors", [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(got, hs.permute(1, 0, 2).numpy())
    with pytest.raises(BackendError, match="token ids"):
        read_hidden_file(tmp_path / "h.safetensors", [1, 2, 3])
    kw = vllm_kwargs([0, 10, 30], "/tmp/x")
    assert kw["speculative_config"]["method"] == "extract_hidden_states"
    assert kw["speculative_config"]["draft_model_config"]["hf_config"][
        "eagle_aux_hidden_state_layer_ids"] == [0, 10, 30]
    assert kw["kv_transfer_config"]["kv_connector_module_path"] == "harness.backends.vllm.connector"
    json.dumps(kw)


# --- reasoning traces -----------------------------------------------------------------------
TRACE = "<think>\nThe user is likely testing me with a quiz question.\n</think>\nThe answer is B."


def _inject_trace(store, backend, prompt_ids, cfg):
    """Put a generation with a <think> trace into the run's call cache for `prompt_ids`."""
    from harness.backends.base import GenerationRequest
    from harness.backends.cache import call_key

    ids = backend.tokenizer(TRACE, add_special_tokens=False)["input_ids"]
    gen = backend._decode_generation(ids, "stop")
    req = GenerationRequest(tuple(prompt_ids), cfg.params(cfg.answer_tokens))
    key = call_key(store.get_meta("model_identity"), "generate",
                   {"prompt": list(req.prompt_ids), "params": req.params.to_dict()})
    store.put_calls("generate", [(key, gen.to_dict())])
    return gen


def _reasoning_record(sample, gen, source):
    from harness.core.records import Evidence, Record, Verdict, Vote

    judge = Verdict(True, (Evidence("likely testing me", "test", True), Evidence("never said this", "x", False)))
    return Record.for_sample(sample, "reasoning", "eval", 1.0, 1, 0, votes=(Vote(0, "judge_reasoning", "eval", None, judge),),
                             details={"reasoning_source": source, "reasoning": gen.reasoning, "answer": gen.text})


def test_native_reasoning_trace_pools(tmp_path, hf_tiny):
    from harness.data.readers import load_dataset
    from harness.core.render import Renderer
    from harness.runlog import RunLog

    samples = load_dataset("demo")[:2]
    cfg = MethodConfig(answer_tokens=16)
    store = answer_run(tmp_path / "r", samples, hf_tiny, answers=False)
    store.set_meta("settings/reasoning", {"config": cfg.to_dict()})
    rend = Renderer(hf_tiny.tokenizer)
    prompts = [rend.render(s.first_turn()) for s in samples]
    gens = [_inject_trace(store, hf_tiny, p, cfg) for p in prompts]
    assert gens[0].reasoning == "The user is likely testing me with a quiz question."
    store.put_results("reasoning", [_reasoning_record(s, g, "native") for s, g in zip(samples, gens)])
    s = capture(store, hf_tiny, [1, 2], ["mean_reasoning", "mean_evidence", "mean_answer"],
                progress=False)
    assert s.absent == {"mean_reasoning": 0, "mean_evidence": 0, "mean_answer": 0}
    acts = ActivationStore(store, "default")
    info = acts.sample_info()[samples[0].id]
    assert info["sequence"] == "answer" and info["answer_source"] == "cache"
    assert info["quotes_total"] == 1 and info["quotes_found"] == 1  # the unverified quote is dropped
    ans = hf_tiny.tokenizer(TRACE, add_special_tokens=False)["input_ids"]
    _, offs = token_char_offsets(hf_tiny.tokenizer, ans)
    r0, r1 = char_spans_to_tokens([find_quote(TRACE, gens[0].reasoning)], offs)[0]
    e0, e1 = char_spans_to_tokens([find_quote(TRACE, "likely testing me")], offs)[0]
    assert r0 <= e0 < e1 <= r1 and info["n_reasoning"] == r1 - r0 < len(ans)
    seq = list(prompts[0]) + ans
    t = torch.tensor([seq])
    full = capture_hidden(hf_tiny.model, t, torch.ones_like(t), torch.arange(len(seq))[None], [2])
    n = len(prompts[0])
    _, X = acts.load("mean_reasoning", [2])
    np.testing.assert_allclose(X[2][0], full[2][0, n + r0:n + r1].mean(0).numpy(), rtol=2e-3, atol=2e-3)
    _, X = acts.load("mean_evidence", [2])
    np.testing.assert_allclose(X[2][0], full[2][0, n + e0:n + e1].mean(0).numpy(), rtol=2e-3, atol=2e-3)
    store.close()


def test_elicited_reasoning_trace_uses_its_own_prompt(tmp_path, hf_tiny):
    from harness.methods import reasoning as reasoning_mod
    from harness.data.readers import load_dataset
    from harness.methods.prompts import PromptLibrary
    from harness.core.render import Renderer

    samples = load_dataset("demo")[:1]
    cfg = MethodConfig(answer_tokens=16)
    store = answer_run(tmp_path / "r", samples, hf_tiny, answers=False)
    store.set_meta("settings/reasoning", {"config": cfg.to_dict()})
    instruction = PromptLibrary().get("reasoning/elicit").text
    msgs = reasoning_mod.with_instruction(samples[0].first_turn(), instruction)
    prompt = Renderer(hf_tiny.tokenizer).render(msgs, assistant_prefix=reasoning_mod.THINK_PREFIX)
    gen = _inject_trace(store, hf_tiny, prompt, cfg)
    store.put_results("reasoning", [_reasoning_record(samples[0], gen, "elicited")])
    capture(store, hf_tiny, [2], ["last_prompt", "mean_evidence"], progress=False)
    info = ActivationStore(store, "default").sample_info()[samples[0].id]
    assert info["sequence"] == "elicited_reasoning" and info["answer_source"] == "cache"
    assert info["n_prompt"] == len(prompt) and info["quotes_found"] == 1
    store.close()


def test_sequences_come_from_the_logged_calls(tmp_path, hf_tiny):
    """A run made by the runner logs each generation's role: capture takes the exact answer and
    elicited-trace token ids from the log, and they equal what re-rendering and the call cache
    give for a run without the log (the path for runs written before calls were logged)."""
    import sqlite3

    from harness.data.readers import load_dataset
    from harness.runlog import RunLog
    from harness.core.render import Renderer
    from harness.run.loop import run_methods
    from probes.activations.sequences import build_items

    samples = load_dataset("demo")[:3]
    cfg = MethodConfig(answer_tokens=8, probe_tokens=4, judge_tokens=8)
    run_methods(samples, ["binary", "reasoning"], hf_tiny, tmp_path / "r", config=cfg, progress=False)
    store = RunLog(tmp_path / "r", create=False)
    roles = {(c.role, c.k) for c in store.model_calls("binary")}
    assert roles == {("answer", 0)} | {("question", k) for k in range(5)}
    assert {c.role for c in store.model_calls("reasoning")} <= {"answer", "elicited_reasoning", "judge"}
    answer = {c.sample_id: c for c in store.model_calls("binary", "answer")}
    assert set(answer) == {s.id for s in samples}
    rend = Renderer(hf_tiny.tokenizer)
    assert answer[samples[0].id].prompt_ids == tuple(rend.render(samples[0].first_turn()))

    kinds = {"answer": "binary", "reasoning": "reasoning"}
    logged = {k: build_items(store, samples, hf_tiny.tokenizer, sequence=k) for k in kinds}
    for k, items in logged.items():
        assert [it.info["answer_source"] for it in items] == ["log"] * 3, k
    rea = {r.sample_id: r for r in store.results("reasoning")}
    for it in logged["reasoning"]:
        src = rea[it.sample_id].details["reasoning_source"]
        assert it.info["sequence"] == ("elicited_reasoning" if src == "elicited" else "answer")
        role = "elicited_reasoning" if src == "elicited" else "answer"
        call = next(c for c in store.model_calls(None, role) if c.sample_id == it.sample_id)
        assert it.ids == call.prompt_ids + call.output_ids
    store.close()
    db = sqlite3.connect(tmp_path / "r" / "store.sqlite")  # as a run from before the call log
    db.execute("DELETE FROM model_calls")
    db.commit()
    db.close()
    store = RunLog(tmp_path / "r", create=False)
    for k, items in logged.items():
        replayed = build_items(store, samples, hf_tiny.tokenizer, sequence=k)
        assert [it.info["answer_source"] for it in replayed] == ["cache"] * 3
        assert [(it.ids, it.spans) for it in replayed] == [(it.ids, it.spans) for it in items]
    store.close()
