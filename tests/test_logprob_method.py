"""The logprob methods end to end on controlled models: the signal gate (--min-coverage) and the
final-answer position of reasoning models (real Qwen3 tokenizer and chat template)."""

from __future__ import annotations

import os
import shutil

import pytest
from click.testing import CliRunner

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from harness.models import assets  # noqa: E402
from harness.data.readers import load_dataset  # noqa: E402
from harness.methods import MethodConfig  # noqa: E402
from harness.run.loop import run_methods  # noqa: E402
from harness.runlog import RunLog  # noqa: E402
from tests.test_tokenization_scoring import Bigram  # noqa: E402


@pytest.fixture(scope="module")
def smollm2_tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(assets.prepare("smollm2")))


@pytest.mark.parametrize("boundary", [False, True])
def test_min_coverage_gate(smollm2_tok, tmp_path, boundary: bool) -> None:
    """Target-word mass 0.004 < 0.01: no prediction, no score, counted as no_signal (report and
    `show`). Mass 0.4: P(eval) = 0.3 / 0.4 exactly as before the gate (to 1e-6 with the boundary
    term off; with it on too, as every word is followed by EOS here)."""
    from evalaware.main import cli
    from harness.core.render import Renderer
    from harness.core.sample import Message
    from tokenization import from_backend

    samples = load_dataset("demo")[:4]
    probe = Bigram(smollm2_tok, {}, len(smollm2_tok))
    tok = from_backend(probe)
    last = Renderer(smollm2_tok).render((Message("user", "x"),))[-1]
    ev, rl = tok.assistant_ids("evaluation")[0], tok.assistant_ids("real")[0]
    other, eos = tok.encode(" banana")[0], smollm2_tok.convert_tokens_to_ids("<|im_end|>")
    for (a, b), signal in (((0.003, 0.001), False), ((0.3, 0.1), True)):
        table = {last: {ev: a, rl: b, other: 1 - a - b}, ev: {eos: 1.0}, rl: {eos: 1.0}}
        run = tmp_path / f"run{signal}"
        cfg = MethodConfig(aware_boundary=boundary, aware_tol=0.0)
        run_methods(samples, ["logprob"], Bigram(smollm2_tok, table, len(smollm2_tok)), run, config=cfg,
                    progress=False)
        recs = RunLog(run, create=False).result_dicts("logprob")
        assert len(recs) == 4
        for r in recs:
            d = r["details"]
            assert d["aware_coverage"] == pytest.approx(a + b, rel=1e-4)
            if signal:
                assert r["prediction"] == "eval" and r["n_valid"] == 1 and d["signal"] and d["error"] is None
                assert r["score"] == pytest.approx(0.75, abs=1e-6)
                assert d["naive_p_eval"] == pytest.approx(0.75, abs=1e-6)
            else:
                assert r["prediction"] is None and r["score"] is None and r["n_invalid"] == 1
                assert d["error"] == "no_signal" and not d["signal"]
                assert d["aware_p_eval"] == pytest.approx(0.75, abs=1e-6)  # still recorded
        out = CliRunner().invoke(cli, ["show", str(run)]).output
        line = next(x for x in out.splitlines() if x.startswith("logprob"))
        assert ("no_signal 4" in line) != signal, out


def test_reasoning_model_scores_the_final_answer(tmp_path) -> None:
    """A tiny random Llama with the real Qwen3 tokenizer and chat template: the logprob method
    renders the prompt with thinking off (an empty closed <think> block before the answer), and
    records say so; DeepSeek-R1's template (no switch, the model opens <think> itself) gets the
    empty block appended; gpt-oss harmony the final channel."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from harness.methods.answer_position import EMPTY_THINK, HARMONY_FINAL, answer_start
    from harness.backends.hf.backend import HFBackend
    from harness.core.render import Renderer
    from harness.core.sample import Message
    from tests.helpers.tiny_model import build_tiny_model

    def hf_tok(asset: str, eos: str):
        d = assets.prepare(asset)
        t = PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"), eos_token=eos, pad_token=eos)
        t.chat_template = (d / "chat_template.jinja").read_text()
        return t

    qwen_dir = tmp_path / "qwen3-tok"
    hf_tok("tok-qwen3", "<|im_end|>").save_pretrained(qwen_dir)
    model_dir = build_tiny_model(tmp_path / "tiny-qwen3", qwen_dir, layers=1, hidden=32)
    backend = HFBackend(str(model_dir), dtype="float32", device="cpu")
    samples = load_dataset("demo")[:2]
    run_methods(samples, ["logprob"], backend, tmp_path / "run", config=MethodConfig(min_coverage=0.0),
                progress=False)
    store = RunLog(tmp_path / "run", create=False)
    assert store.get_meta("settings/logprob")["answer_position"] == "template_thinking_off"
    tok = AutoTokenizer.from_pretrained(model_dir)
    for r in store.result_dicts("logprob"):
        assert r["details"]["answer_position"] == "template_thinking_off"
    start = answer_start(Renderer(tok))
    text = start.renderer.render_text((Message("user", "Hi"),))
    assert text.endswith("<|im_start|>assistant\n" + EMPTY_THINK)
    plain = Renderer(tok).render_text((Message("user", "Hi"),))
    assert plain.endswith("<|im_start|>assistant\n") and "<think>" not in plain
    # the scored prompt is exactly the thinking-off rendering
    ids = start.render(samples[0].first_turn())
    assert tok.decode(ids).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")

    r1 = answer_start(Renderer(hf_tok("tok-deepseek-r1", "<｜end▁of▁sentence｜>")))
    assert r1.how == "closed_empty_reasoning" and r1.prefix == EMPTY_THINK
    assert r1.renderer.render_text((Message("user", "Hi"),)).endswith("<｜Assistant｜>")
    harmony = type("T", (), {"chat_template": "{{ '<|start|>assistant' }}<|channel|>",
                             "apply_chat_template": lambda self, m, **k: "<|start|>user<|message|>Hi<|end|><|start|>assistant"})()
    h = answer_start(Renderer(harmony))
    assert h.how == "harmony_final_channel" and h.prefix == HARMONY_FINAL
    smol = answer_start(Renderer(AutoTokenizer.from_pretrained(str(assets.prepare("smollm2")))))
    assert smol.how == "direct" and smol.prefix == ""
    shutil.rmtree(tmp_path / "tiny-qwen3", ignore_errors=True)
