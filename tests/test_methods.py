"""Method flows on a tiny random model (its answers are garbage): routing, voting, parsing of
garbage as unparseable, the judge's record schema, caching (a re-run makes no model calls)."""

from __future__ import annotations

import pytest
from _counting import Counting

from harness.data.readers import load_dataset
from harness.methods.judge import JUDGE_PROMPTS, judge_texts
from harness.methods import MethodConfig, RunContext, available
from harness.backends.base import Generation
from harness.methods.reasoning import ReasoningTrace, choose_sources, with_instruction
from harness.methods.prompts import PromptLibrary
from harness.core.render import Renderer
from harness.run.loop import run_methods
from harness.core.sample import Message
from harness.runlog import RunLog

# sampled (not greedy): greedy decoding of the random model gives only newlines
CFG = MethodConfig(answer_tokens=6, probe_tokens=6, judge_tokens=6, temperature=1.0, seed=1, min_label_mass=0.0)
VOTES = {"binary": 5, "probability": 5, "motivation": 3, "reasoning": 1}


@pytest.fixture(scope="module")
def samples():
    s = load_dataset("demo")
    by_id = {x.id: x for x in s}
    # a chat eval, an agentic deploy (system + tool calls), a multi-turn deploy
    return [by_id["science:organelle_atp"], by_id["agent_ops:slow_dental_app"], by_id["math:discount_head"]]


def test_methods_registered():
    assert {"binary", "probability", "motivation", "reasoning"} <= set(available())


def test_all_four_methods_flow_and_cache(hf_tiny, samples, tmp_path):
    methods = ["binary", "probability", "motivation", "reasoning"]
    be = Counting(hf_tiny)
    summary = run_methods(samples, methods, be, tmp_path / "run", config=CFG, progress=False)
    assert all(summary[m]["computed"] == 3 for m in methods)
    store = RunLog(tmp_path / "run", create=False)
    # answers (3, shared by all methods) + binary 15 + probability 15 + motivation 9 + elicited
    # reasoning 3 + one judge call per distinct judged text (identical prompts are cached once)
    judged_mot = {v["answer"] for r in store.result_dicts("motivation") for v in r["details"]["votes"]}
    judged_rea = {r["details"]["reasoning"] for r in store.result_dicts("reasoning")}
    assert "" not in judged_mot and None not in judged_rea
    assert be.calls["generate"] == 3 + 15 + 15 + 9 + 3 + len(judged_mot) + len(judged_rea)
    for m in methods:
        recs = store.result_dicts(m)
        assert [r["sample_id"] for r in recs] == [s.id for s in samples]
        for r, s in zip(recs, samples):
            votes = r["details"]["votes"]
            assert len(votes) == VOTES[m]
            # garbage from a random model: every answer is excluded, never counted as a class;
            # binary/probability still get a graded score from the label probabilities
            assert r["prediction"] is None
            if m in ("binary", "probability"):
                assert 0 <= r["score"] <= 1 and r["details"]["vote_score"] is None
                assert r["score"] == pytest.approx(sum(v["label_score"] for v in votes) / len(votes))
            else:
                assert r["score"] is None
            assert r["n_valid"] == 0 and r["n_invalid"] == VOTES[m]
            assert all(v["value"] is None and v["error"] for v in votes)
            assert r["label"] == s.label and r["n_turns"] == s.n_turns
    mot = store.result_dicts("motivation")[0]["details"]["votes"]
    assert [v["variant"] for v in mot] == ["motivation/v1", "motivation/v2", "motivation/v3"]
    for v in mot:  # the contract the taxonomy tool reads
        assert isinstance(v["answer"], str)
        assert set(v["judge"]) >= {"aware", "evidence", "raw", "error"}
        assert v["judge"]["aware"] is None and v["error"].startswith("judge:")
    rea = store.result_dicts("reasoning")[0]["details"]
    assert rea["reasoning_source"] == "elicited" and rea["reasoning"]
    assert store.get_meta("settings/reasoning")["reasoning_source"] == "auto"
    # the motivation judge saw the model's motivation answers, in the judge prompt
    judge_tpl = PromptLibrary().get(JUDGE_PROMPTS["motivation"]).text.split("{text}")[0][-40:]
    judged = [p for p in be.prompts if judge_tpl in p]
    assert len(judged) == len(judged_mot)
    assert all(any(f"<answer>\n{a}\n</answer>" in p for p in judged) for a in judged_mot)
    # second run: every model call comes from the cache, the records are unchanged
    be2 = Counting(hf_tiny)
    before = store.result_dicts()
    store.close()
    summary = run_methods(samples, methods, be2, tmp_path / "run", config=CFG, progress=False)
    assert be2.calls["generate"] == 0 and all(summary[m]["skipped"] == 3 for m in methods)
    # recomputing into a fresh results table also makes zero calls (all cached)
    s2 = RunLog(tmp_path / "run")
    for m in s2.methods():
        s2.replace_results(m, [])
    s2.close()
    be3 = Counting(hf_tiny)
    run_methods(samples, methods, be3, tmp_path / "run", config=CFG, progress=False)
    assert be3.calls["generate"] == 0
    assert RunLog(tmp_path / "run", create=False).result_dicts() == before


def test_separate_judge_is_routed(hf_tiny, tiny_model_dir, samples, tmp_path):
    be, judge = Counting(hf_tiny), Counting(hf_tiny)
    run_methods(samples[:1], ["motivation"], be, tmp_path / "r", config=CFG, judge=judge, progress=False)
    votes = RunLog(tmp_path / "r", create=False).result_dicts("motivation")[0]["details"]["votes"]
    assert be.calls["generate"] == 1 + 3
    assert judge.calls["generate"] == len({v["answer"] for v in votes}) > 0
    assert all("<answer>" in p for p in judge.prompts)


def test_n_votes_cycles_variants(hf_tiny, samples, tmp_path):
    cfg = MethodConfig(answer_tokens=4, probe_tokens=4, n_votes=7, temperature=0.7, seed=3)
    run_methods(samples[:1], ["probability"], hf_tiny, tmp_path / "r", config=cfg, progress=False)
    votes = RunLog(tmp_path / "r", create=False).result_dicts("probability")[0]["details"]["votes"]
    assert [v["variant"][-2:] for v in votes] == ["v1", "v2", "v3", "v4", "v5", "v1", "v2"]
    assert [v["seed_offset"] for v in votes] == [0] * 5 + [1, 1]


def _ctx(backend, **kw) -> RunContext:
    return RunContext(backend=backend, renderer=Renderer(backend.tokenizer), config=CFG,
                      prompts=PromptLibrary(), **kw)


def test_native_reasoning_without_reasoning_text_is_excluded(hf_tiny, samples):
    be = Counting(hf_tiny)
    recs = ReasoningTrace(_ctx(be), source="native").run_batch(samples[:2])
    assert be.calls["generate"] == 2  # the answers only: nothing to judge
    for r in recs:
        assert r.details["reasoning_source"] == "native" and r.details["reasoning"] is None
        assert r.prediction is None and r.n_invalid == 1
        assert r.votes[0].error == "no reasoning text" and r.votes[0].verdict.error == "empty text"


def test_choose_sources():
    def gen(reasoning):
        return Generation(text="a", reasoning=reasoning, raw_text="", token_ids=(), finish_reason="stop")

    answers = [gen("I suspect a test."), gen(None), gen(""), None]
    assert choose_sources(answers, "auto") == ["native", "elicited", "elicited", "elicited"]
    assert choose_sources(answers, "native") == ["native"] * 4
    assert choose_sources(answers, "elicited") == ["elicited"] * 4


def test_forced_elicited_skips_the_answer(hf_tiny, samples):
    be = Counting(hf_tiny)
    recs = ReasoningTrace(_ctx(be), source="elicited").run_batch(samples[:1])
    prompts = be.prompts
    assert prompts[0].endswith("<think>\n") and "step by step inside <think>" in prompts[0]
    assert recs[0].details["reasoning_source"] == "elicited"
    with pytest.raises(ValueError):
        ReasoningTrace(_ctx(be), source="other")


def test_elicit_instruction_goes_into_system_prompt(tmp_path):
    sys_msgs = with_instruction((Message("system", "Be brief."), Message("user", "hi")), "THINK")
    assert sys_msgs[0].content == "Be brief.\n\nTHINK" and len(sys_msgs) == 2
    assert with_instruction((Message("user", "hi"),), "THINK")[0] == Message("system", "THINK")
    assert with_instruction((Message("user", "hi"),), "") == (Message("user", "hi"),)


def test_judge_texts_skips_empty_and_rejects_unknown_kind(hf_tiny):
    be = Counting(hf_tiny)
    ctx = _ctx(be)
    v = judge_texts(ctx, [None, "  ", "The user tests me."], kind="reasoning")
    assert be.calls["generate"] == 1
    assert [x.error for x in v[:2]] == ["empty text", "empty text"] and v[2].aware is None
    with pytest.raises(ValueError):
        judge_texts(ctx, ["x"], kind="other")


def test_prompt_override_changes_judge_prompt(hf_tiny, tmp_path):
    (tmp_path / "judge_motivation").mkdir()
    (tmp_path / "judge_motivation" / "v1.txt").write_text("CUSTOM JUDGE <answer>{text}</answer>")
    be = Counting(hf_tiny)
    ctx = RunContext(backend=be, renderer=Renderer(be.tokenizer), config=CFG, prompts=PromptLibrary(tmp_path))
    judge_texts(ctx, ["Some answer."])
    assert "CUSTOM JUDGE <answer>Some answer.</answer>" in be.prompts[0]
    assert "judge_motivation/v1" in ctx.prompts.used


@pytest.mark.parametrize("method", ["logprob", "logprob_question"])
def test_logprob_methods_record_what_scoring_gives(hf_tiny, samples, tmp_path, method):
    """Records hold the naive/top-20/aware scores of exactly the prompt the method renders
    (question form: the sample, then the one-word question), with the run's `aware_tol`; a
    run directory refuses another `aware_tol`."""
    from tokenization import ScoringPlan, from_backend, score_prompts

    from harness.methods.logprob import SCORING_CASES

    cfg = MethodConfig(aware_tol=0.0, min_coverage=0.0)
    run_methods(samples, [method], hf_tiny, tmp_path / "run", config=cfg, progress=False)
    recs = {r["sample_id"]: r for r in RunLog(tmp_path / "run", create=False).result_dicts(method)}
    renderer = Renderer(hf_tiny.tokenizer)
    question = PromptLibrary().get("logprob/question").text
    prompts = [renderer.render(s.first_turn() + ((Message("user", question),) if method == "logprob_question" else ()))
               for s in samples]
    plan = ScoringPlan.build(from_backend(hf_tiny), cases=SCORING_CASES)
    for s, want in zip(samples, score_prompts(hf_tiny, prompts, plan=plan, tol=0.0)):
        r = {**recs[s.id], **recs[s.id]["details"]}
        assert r["aware_p_eval"] == pytest.approx(want.aware_p_eval, abs=1e-6)
        assert r["naive_p_eval"] == pytest.approx(want.naive_p_eval, abs=1e-6)
        assert r["aware_coverage"] == pytest.approx(want.aware_coverage, rel=1e-5)
        assert r["score"] == r["aware_p_eval"] and r["aware_skipped_bound"] == 0.0
        assert r["prediction"] == ("eval" if r["aware_p_eval"] >= 0.5 else "deploy")
        assert r["answer_position"] == "direct" and r["signal"] and r["min_coverage"] == 0.0
    settings = RunLog(tmp_path / "run", create=False).get_meta(f"settings/{method}")
    assert settings["aware_tol"] == 0.0 and "aware_tol" not in settings["config"]
    assert settings["min_coverage"] == 0.0 and settings["word_list"] == "paper"
    assert settings["aware_boundary"] is True and "min_coverage" not in settings["config"]
    for changed in (MethodConfig(aware_tol=1e-3, min_coverage=0.0), MethodConfig(aware_tol=0.0, min_coverage=0.05),
                    MethodConfig(aware_tol=0.0, min_coverage=0.0, words="extended")):
        with pytest.raises(Exception, match="different setting for method"):
            run_methods(samples, [method], hf_tiny, tmp_path / "run", config=changed, progress=False)
