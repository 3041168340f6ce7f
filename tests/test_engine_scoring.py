"""Issue 23, fast: the reductions the logprob methods ask a backend for (token-set masses, the
first-token view, forced-continuation log-likelihoods with the mass after them) equal the
full-distribution reference within 1e-5 in log space on a random-init model with the real Qwen3
vocabulary (151,669 entries, HF); and a backend whose masses are top-K bounds gets its aware
scores marked as bounds in the records and the report."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from harness.backends.base import (Backend, Capabilities, NextTokenView, WrappedBackend,  # noqa: E402
                                   loglikelihood_by_prefix)
from harness.models import assets  # noqa: E402

TOL = 1e-5


@pytest.fixture(scope="module")
def hf_qwen_vocab(tmp_path_factory):
    from transformers import PreTrainedTokenizerFast

    from harness.backends.hf.backend import HFBackend
    from tests.helpers.tiny_model import build_tiny_model

    d = assets.prepare("tok-qwen3")
    tmp = tmp_path_factory.mktemp("qwen-vocab")
    tok = PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"), eos_token="<|im_end|>",
                                  pad_token="<|im_end|>")
    tok.chat_template = (d / "chat_template.jinja").read_text()
    tok.save_pretrained(tmp / "tok")
    model = build_tiny_model(tmp / "model", tmp / "tok", layers=1, hidden=32, seed=3)
    b = HFBackend(str(model), dtype="float32", device="cpu", batch_size=4)
    assert b.vocab_size >= 151_000
    yield b
    b.close()


def _prompts(b) -> list[list[int]]:
    from harness.core.render import Renderer
    from harness.core.sample import Message
    from harness.data.readers import load_dataset
    from harness.methods.prompts import PromptLibrary

    q = PromptLibrary().get("logprob/question").text
    r = Renderer(b.tokenizer)
    return [list(r.render(s.first_turn() + (Message("user", q),))) for s in load_dataset("demo")[:5]]


def test_masses_view_and_continuations_equal_full_distribution(hf_qwen_vocab):
    from tokenization import ScoringPlan, TargetWords, from_backend

    b = hf_qwen_vocab
    ps = _prompts(b)
    full = b.next_token_logprobs(ps).astype(np.float64)
    plan = ScoringPlan.build(from_backend(b), TargetWords())
    assert len(plan.boundary_ids) > 10_000
    sets = [plan.boundary_ids, plan.first_ids("eval"), plan.first_ids("deploy"), plan.first_ids()]
    want = np.stack([np.log(np.exp(full[:, list(s)]).sum(1)) for s in sets], axis=1)
    np.testing.assert_allclose(b.next_token_logmasses(ps, sets), want, atol=TOL)
    np.testing.assert_allclose(b.next_token_logmass(ps, plan.boundary_ids), want[:, 0], atol=TOL)
    ids = plan.first_ids()
    view = b.next_token_view(ps, ids, 20)
    ref = NextTokenView.from_full(full, ids, 20)
    np.testing.assert_allclose(view.selected, ref.selected, atol=TOL)
    np.testing.assert_allclose(view.top_logprobs, ref.top_logprobs, atol=TOL)
    # forced continuations (one pass over each prompt's KV cache) against one full distribution
    # per prefix, and the boundary mass after them against the full distribution there
    conts = [list(s) for s in plan.sequences()[:12]] + \
        [b.tokenizer.encode("EVALUATION</label>", add_special_tokens=False)]
    assert any(len(c) > 1 for c in conts)
    pairs = [(p, c) for p in ps for c in conts]
    ll = b.loglikelihood(pairs)
    np.testing.assert_allclose(ll, loglikelihood_by_prefix(b, pairs), atol=TOL)
    step = [sum(float(b.next_token_logprobs([p + c[:k]])[0, c[k]]) for k in range(len(c))) for p, c in pairs[:6]]
    np.testing.assert_allclose(ll[:6], step, atol=TOL)
    cs = b.continuation_scores(pairs, plan.boundary_ids)
    np.testing.assert_allclose([a for a, _ in cs], ll, atol=TOL)
    mass_ref = Backend.next_token_logmasses(b, [p + c for p, c in pairs], [plan.boundary_ids])[:, 0]
    np.testing.assert_allclose([m for _, m in cs], mass_ref, atol=TOL)


def test_engine_scores_equal_full_vocab_scores(hf_qwen_vocab):
    """The logprob methods' scores through the reductions equal those from the full distribution."""
    from tokenization import ScoringPlan, TargetWords, from_backend, score_prompts

    b = hf_qwen_vocab
    ps = _prompts(b)
    plan = ScoringPlan.build(from_backend(b), TargetWords(), cases=("lower", "title"))
    a = score_prompts(b, ps, plan=plan, full_vocab=False)
    f = score_prompts(b, ps, plan=plan, full_vocab=True)
    for x, y in zip(a, f):
        for k in ("naive_p_eval", "naive_coverage", "top20_coverage", "aware_p_eval", "aware_coverage"):
            assert getattr(x, k) == pytest.approx(getattr(y, k), abs=1e-6), k


class _TopKServer(WrappedBackend):
    """What a served model gives: masses summed over the top K only (a lower bound)."""

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        return Capabilities(exact_logmass=False)

    def next_token_logmass(self, prompts, token_ids):
        full = self.inner.next_token_logprobs(prompts)
        keep = np.argsort(-full, axis=1)[:, :20]
        ids = set(int(t) for t in token_ids)
        return np.asarray([np.log(sum(np.exp(float(full[i, t])) for t in row if int(t) in ids) or 1e-300)
                           for i, row in enumerate(keep)])

    def continuation_scores(self, pairs, token_ids):
        return Backend.continuation_scores(self, pairs, token_ids)


def test_served_bounds_are_marked(hf_tiny, tmp_path):
    """A backend whose boundary mass is a top-K lower bound: records and report say the aware
    scores are bounds; an exact backend's records carry no such mark."""
    from harness.data.readers import load_dataset
    from harness.methods import MethodConfig
    from harness.reporting.report import write_report
    from harness.run.loop import run_methods
    from harness.runlog import RunLog

    samples = load_dataset("demo")[:2]
    for name, backend in (("served", _TopKServer(hf_tiny)), ("local", hf_tiny)):
        run_methods(samples, ["logprob_question"], backend, tmp_path / name,
                    config=MethodConfig(min_coverage=0.0), progress=False)
        recs = RunLog(tmp_path / name, create=False).result_dicts("logprob_question")
        marks = [r["details"].get("aware_bound") for r in recs]
        if name == "served":
            assert all(m and m.startswith("lower") for m in marks), marks
        else:
            assert not any(marks)
    out = tmp_path / "report"
    write_report([tmp_path / "served", tmp_path / "local"], out, n_boot=10)
    text = "\n".join(p.read_text() for p in out.rglob("*.md"))
    assert text.count("aware scores are bounds") == 1, text


def test_hf_continuations_run_each_prompt_once(hf_qwen_vocab, monkeypatch):
    """HF, issue 23: after a first-token call the continuations reuse the prompts' kept KV caches
    (no prompt forward again: one forward per batch for all its continuations, side by side under a
    4-D mask); the kept, fresh and row-gathering (fallback) paths agree within 1e-5, and with
    one full distribution per prefix."""
    from harness.backends.hf import teacher
    from tokenization import ScoringPlan, TargetWords, from_backend

    b = hf_qwen_vocab
    ps = _prompts(b)
    plan = ScoringPlan.build(from_backend(b), TargetWords())
    conts = [list(s) for s in plan.sequences()[:14]] + \
        [b.tokenizer.encode("EVALUATION</label>", add_special_tokens=False)]
    pairs = [(p, c) for p in ps for c in conts]
    widths: list[int] = []
    hook = b.model.register_forward_pre_hook(
        lambda m, a, kw: widths.append(int(kw["input_ids"].shape[1])), with_kwargs=True)
    try:
        b.next_token_view(ps, plan.first_ids(), 20)
        widths.clear()
        kept = b.continuation_scores(pairs, plan.boundary_ids)
        n_batches = -(-len(ps) // b.batch_size)
        assert len(widths) == n_batches, widths  # no prompt run again, one forward per batch
        assert max(widths) < min(len(p) for p in ps)
        b.forget_prompts()
        widths.clear()
        fresh = b.continuation_scores(pairs, plan.boundary_ids)
        assert len(widths) == 2 * n_batches
    finally:
        hook.remove()
    monkeypatch.setattr(teacher, "_tree_ok", lambda model, cache: False)
    gathered = b.continuation_scores(pairs, plan.boundary_ids)
    np.testing.assert_allclose(kept, fresh, atol=TOL)
    np.testing.assert_allclose(kept, gathered, atol=TOL)
    step = [sum(float(b.next_token_logprobs([p + c[:k]])[0, c[k]]) for k in range(len(c))) for p, c in pairs[::7]]
    np.testing.assert_allclose([a for a, _ in kept[::7]], step, atol=TOL)
    # loglikelihood (last token not fed) and a small segment budget (several forwards per batch)
    monkeypatch.undo()
    monkeypatch.setattr(teacher, "LOGIT_BUDGET", 1)
    b.next_token_logprobs(ps, [0])
    np.testing.assert_allclose(b.loglikelihood(pairs), [a for a, _ in gathered], atol=TOL)
