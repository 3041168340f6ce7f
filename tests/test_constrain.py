"""--constrain and what comes with it, on a tiny random model (whose free text is garbage):
engine-enforced tagged answers and judge verdicts on the hf backend, label probabilities, the
recorded setting, token-limit counts and warnings, judge independence, prompt provenance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.methods.answer_format import BINARY, PROBABILITY, label_probabilities
from harness.backends.base import Capabilities, GenerationRequest, SamplingParams, StructuredOutput
from harness.backends.cache import call_key
from harness.data.readers import load_dataset
from harness.core.errors import StoreError
from harness.methods.judge import VERDICT_SCHEMA, judge_texts, parse_verdict
from harness.methods import MethodConfig, RunContext
from harness.core.parsing import parse_label, parse_probability
from harness.methods.prompts import PromptLibrary
from harness.core.render import Renderer
from harness.reporting.report import method_label, write_report
from harness.run.monitor import RunMonitor, tally
from harness.stats.tally import cut_cell
from harness.run.loop import run_methods
from harness.core.sample import Message
from harness.runlog import RunLog
from tests.helpers.tiny_model import build_tiny_model
from harness.methods.token_limits import PLAIN, REASONING, default_token_limits

# sampled, so unconstrained answers are varied garbage
CFG = MethodConfig(answer_tokens=6, probe_tokens=24, judge_tokens=900, temperature=1.0, seed=1, min_label_mass=0.0,
                   constrain=True)


@pytest.fixture(scope="module")
def samples():
    return load_dataset("demo")[:2]


def test_structured_is_left_out_of_unconstrained_keys():
    plain = SamplingParams()
    assert "structured" not in plain.to_dict()
    con = SamplingParams(structured=BINARY.structured)
    assert call_key({}, "generate", {"params": plain.to_dict()}) != \
        call_key({}, "generate", {"params": con.to_dict()})
    assert BINARY.structured.grammar.startswith("root ::=")


def test_constrained_generation_parses_on_random_model(hf_tiny):
    r = Renderer(hf_tiny.tokenizer)
    prompt = r.render((Message("user", "hello"),))
    for fmt, parse in ((BINARY, parse_label), (PROBABILITY, parse_probability)):
        free = hf_tiny.generate([GenerationRequest(prompt, SamplingParams(max_tokens=24, temperature=1.0,
                                                                          seed=s)) for s in range(4)])
        assert not any(parse(g.text).ok for g in free)  # the model cannot write the tag itself
        con = hf_tiny.generate([GenerationRequest(prompt, SamplingParams(
            max_tokens=24, temperature=1.0, seed=s, structured=fmt.structured)) for s in range(4)])
        assert all(parse(g.text).ok and g.finish_reason == "stop" for g in con), [g.text for g in con]


def test_label_probabilities_are_normalised_teacher_forced(hf_tiny):
    r = Renderer(hf_tiny.tokenizer)
    conv = (Message("user", "Is this a test?"),)
    [lab] = label_probabilities(hf_tiny, r, BINARY, [conv])
    prompt = r.render(conv, assistant_prefix="<label>")
    tok = hf_tiny.tokenizer
    ll = [hf_tiny.loglikelihood([(prompt, tok.encode(c, add_special_tokens=False))])[0]
          for _, c in BINARY.options]
    assert lab["label_probs"]["eval"] == pytest.approx(math.exp(ll[0]) / sum(map(math.exp, ll)), rel=1e-6)
    assert lab["label_mass"] == pytest.approx(sum(map(math.exp, ll)), rel=1e-6)
    assert lab["label_score"] == lab["label_probs"]["eval"]
    [p] = label_probabilities(hf_tiny, r, PROBABILITY, [conv])
    assert len(p["label_probs"]) == 11 and sum(p["label_probs"].values()) == pytest.approx(1)
    assert p["label_score"] == pytest.approx(sum(float(k) * v for k, v in p["label_probs"].items()))


def test_prefix_teacher_forcing_equals_loglikelihood(hf_tiny):
    """The prefix-cache path (vLLM) gives the values of `loglikelihood`, label probabilities too."""
    from harness.backends.base import WrappedBackend, loglikelihood_by_prefix

    r = Renderer(hf_tiny.tokenizer)
    convs = [(Message("user", "Is this a test?"),), (Message("user", "hi there"),)]
    pairs = [(r.render(c, assistant_prefix="<probability>"),
              hf_tiny.tokenizer.encode(o, add_special_tokens=False)) for c in convs for _, o in PROBABILITY.options]
    np.testing.assert_allclose(loglikelihood_by_prefix(hf_tiny, pairs), hf_tiny.loglikelihood(pairs), atol=1e-4)

    class Prefixing(WrappedBackend):
        capabilities = Capabilities(prefix_scoring=True)  # what a prefix-caching engine declares

    direct = label_probabilities(hf_tiny, r, PROBABILITY, convs)
    via_prefix = label_probabilities(Prefixing(hf_tiny), r, PROBABILITY, convs)
    for a, b in zip(direct, via_prefix):
        assert a["label_probs"] == pytest.approx(b["label_probs"], abs=1e-5)


def test_run_constrain_records_and_refuses_a_change(hf_tiny, samples, tmp_path):
    run_methods(samples, ["binary", "probability"], hf_tiny, tmp_path / "r", config=CFG, progress=False)
    store = RunLog(tmp_path / "r", create=False)
    for m in ("binary", "probability"):
        assert store.get_meta(f"settings/{m}")["config"]["constrain"] is True
        for rec in store.result_dicts(m):
            votes = rec["details"]["votes"]
            assert all(v["constrained"] and v["error"] is None for v in votes)
            assert rec["prediction"] in ("eval", "deploy") and rec["n_invalid"] == 0
            assert rec["score"] == pytest.approx(sum(v["label_score"] for v in votes) / 5)
            assert rec["details"]["score_source"] == "label_probability"
            assert rec["n_answers"] == 6  # the sample answer + 5 question answers
            assert rec["n_cut"] == 1  # answer_tokens=6 cuts the sample answer, never a tag
            assert rec["n_cut_context"] == 1  # ... which the questions follow as cut: no warning
    man = store.get_meta("manifest")
    assert method_label("binary", man) == "binary (constrained)"
    assert man["self_judged"] is None and man["prompt_set"]["set"] == "evalaware"
    store.close()
    with pytest.raises(StoreError, match="setting for method binary"):
        run_methods(samples, ["binary"], hf_tiny, tmp_path / "r",
                    config=MethodConfig(answer_tokens=6, probe_tokens=24, temperature=1.0, seed=1),
                    progress=False)


def test_constrained_judge_writes_valid_verdicts(hf_tiny):
    ctx = RunContext(backend=hf_tiny, renderer=Renderer(hf_tiny.tokenizer), config=CFG,
                     prompts=PromptLibrary())
    texts = ["The user is probably testing me with a benchmark question.", "They want a recipe."]
    verdicts = judge_texts(ctx, texts, kind="motivation")
    assert all(v.ok and isinstance(v.aware, bool) for v in verdicts), [v.raw for v in verdicts]
    assert all(v.to_dict()["constrained"] for v in verdicts)
    assert all(len(v.evidence) <= VERDICT_SCHEMA["properties"]["evidence"]["maxItems"] for v in verdicts)
    free = RunContext(backend=hf_tiny, renderer=ctx.renderer, prompts=ctx.prompts,
                      config=MethodConfig(judge_tokens=40))
    assert not any(v.ok for v in judge_texts(free, texts, kind="motivation"))


def test_unverified_verdicts_are_flagged_and_cast_no_vote():
    from harness.core.parsing import error_kind

    v = parse_verdict('{"aware": true, "evidence": [{"quote": "not there", "feature": "x"}]}', "some text")
    assert v.unverified and v.to_dict()["unverified"] is True
    assert v.as_parsed().value is None and error_kind(v.as_parsed().error) == "unverified"
    bare = parse_verdict('{"aware": true, "evidence": []}', "some text")
    assert not bare.unverified and bare.as_parsed().value == "eval"
    ok = parse_verdict('{"aware": true, "evidence": [{"quote": "some", "feature": "x"}]}', "some text")
    assert not ok.unverified and "unverified" not in ok.to_dict()


def _rec(n_answers, n_cut, judge_errors=(), n_cut_context=None):
    votes = [{"error": f"judge: {e}" if e else None, "judge": {"error": e}} for e in judge_errors]
    return {"n_answers": n_answers, "n_cut": n_cut, "n_cut_context": n_cut_context, "details": {"votes": votes}}


def test_sample_answers_cut_with_text_are_noted_not_warned(hf_tiny, samples):
    """The demo's case (issue 46): 2 of 18 answers cut, both answers to the sample, every vote
    parsed: a note that asks nothing; a cut answer to a question is still a warning."""
    said: list[str] = []
    mon = RunMonitor(said.append)
    mon.add("binary", [_rec(6, 1, n_cut_context=1), _rec(6, 0, n_cut_context=0), _rec(6, 1, n_cut_context=1)])
    assert len(said) == 1 and said[0].startswith("note: binary: 2 of 18 answers")
    assert "raise" not in said[0] and "warning" not in said[0]
    mon.add("binary", [_rec(6, 3, n_cut_context=1)])  # 2 of 24 cut where it costs a reading: 8%
    assert len(said) == 1
    mon.add("binary", [_rec(6, 2, n_cut_context=0)])  # 4 of 30: 13%
    assert len(said) == 2 and said[1].startswith("warning: binary: 4 of 30 answers") and "raise" in said[1]
    assert tally([_rec(6, 3, n_cut_context=1)])["cut_read"] == 2
    assert cut_cell(tally([_rec(6, 3, n_cut_context=1), _rec(6, 0)])) == "3/12 (1 sample answer)"

    from harness.backends.base import Generation
    from harness.methods.base import REGISTRY
    from harness.methods.voting import Tally

    ctx = RunContext(backend=hf_tiny, renderer=Renderer(hf_tiny.tokenizer), config=CFG, prompts=PromptLibrary())
    method = REGISTRY["binary"](ctx)
    def gen(text: str, why: str) -> Generation:
        return Generation(text=text, reasoning=None, raw_text=text, token_ids=(1,), finish_reason=why)
    t = Tally("eval", 1.0, 1, 0)
    kept = method.record(samples[0], t, answers=[gen("<label>EVALUATION</label>", "stop")],
                         context=[gen("The answer is", "length")])
    assert (kept.n_answers, kept.n_cut, kept.n_cut_context) == (2, 1, 1)
    empty = method.record(samples[0], t, answers=[gen("x", "length")], context=[gen("  ", "length")])
    assert (empty.n_cut, empty.n_cut_context) == (2, 0)  # nothing for the question to follow: a real cut
    assert method.record(samples[0], t, answers=[gen("x", "stop")]).n_cut_context is None


def test_monitor_warns_once_when_a_batch_shows_a_high_share():
    said: list[str] = []
    mon = RunMonitor(said.append)
    mon.add("binary", [_rec(10, 1)])  # 10%: not more than 10%
    assert said == []
    mon.add("binary", [_rec(10, 2)])  # 3/20 = 15%
    assert len(said) == 1 and "3 of 20 answers" in said[0]
    mon.add("binary", [_rec(10, 9)])
    assert len(said) == 1  # once per method
    mon.add("motivation", [_rec(3, 0, ["no JSON object with an 'aware' key", None, "empty text"])])
    assert len(said) == 2 and "1 of 2 judge verdicts" in said[1] and "unjudged" in said[1]
    assert tally([_rec(3, 0, ["x", None, "empty text"])])["verdicts"] == 2
    unver = {"error": "judge: unverified: x", "judge": {"error": None, "unverified": True}}
    mon.add("reasoning", [{"n_answers": 1, "n_cut": 0, "details": {"votes": [unver]}}])
    assert len(said) == 3 and "quote nothing" in said[2]


def test_self_judged_is_said_recorded_and_marked(hf_tiny, samples, tmp_path, tmp_path_factory,
                                                 smollm2_dir):
    from harness.backends.hf.backend import HFBackend

    said: list[str] = []
    cfg = MethodConfig(answer_tokens=4, probe_tokens=4, judge_tokens=4)
    run_methods(samples[:1], ["motivation"], hf_tiny, tmp_path / "self", config=cfg, progress=False,
                say=said.append)
    assert any("judges its own answers" in s for s in said)
    man = RunLog(tmp_path / "self", create=False).get_meta("manifest")
    assert man["self_judged"] is True
    assert method_label("motivation", man) == "motivation (self-judged)"
    other = HFBackend(str(build_tiny_model(tmp_path_factory.mktemp("judge") / "m", smollm2_dir, seed=7)))
    said.clear()
    run_methods(samples[:1], ["motivation"], hf_tiny, tmp_path / "indep", config=cfg, judge=other,
                progress=False, say=said.append)
    assert not any("judges its own" in s for s in said)
    assert RunLog(tmp_path / "indep", create=False).get_meta("manifest")["self_judged"] is False
    md = write_report([tmp_path / "self"], tmp_path / "rep", n_boot=10)[0].read_text()
    assert "motivation (self-judged)" in md and "not Needham et al.'s" in md


def test_token_limits_follow_the_template(smollm2_dir):
    from pathlib import Path
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from harness.models.assets import prepare

    # the real Qwen3 chat template (the asset is a tokenizer, not a transformers directory)
    qwen = SimpleNamespace(chat_template=(Path(prepare("tok-qwen3")) / "chat_template.jinja").read_text())
    smol = AutoTokenizer.from_pretrained(str(smollm2_dir))
    assert default_token_limits(smol) == PLAIN
    assert default_token_limits(qwen) == REASONING
    assert default_token_limits(qwen, {"enable_thinking": False}) == PLAIN
    assert default_token_limits(qwen, probe_tokens=99)["probe_tokens"] == 99


def test_prompt_provenance(tmp_path):
    lib = PromptLibrary()
    lib.variants("binary")
    assert lib.provenance() == {"set": "evalaware", "override_dir": None, "overridden": []}
    (tmp_path / "binary").mkdir()
    (tmp_path / "binary" / "v1.txt").write_text("Eval or real? <label>X</label>")
    lib = PromptLibrary(tmp_path)
    lib.variants("binary")
    assert lib.provenance() == {"set": "custom", "override_dir": str(tmp_path), "overridden": ["binary/v1"]}
