"""Hostile and careless options: non-finite or out-of-range floats, a --person a method would
record without applying, --prompts templates that str.format would evaluate (issue 35)."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from harness.backends import registry
from harness.backends.cache import CachedBackend
from evalaware.main import cli
from harness.core.bounds import FiniteFloat
from harness.core.errors import EvalAwareError
from harness.core.render import Renderer, format_transcript
from harness.core.sample import Message, sample_view
from harness.data.readers import load_dataset
from harness.methods import MethodConfig
from harness.methods.answer_position import answer_start
from harness.methods.logprob import SCORING_CASES
from harness.methods.prompts import BUILTIN
from harness.run.loop import run_methods
from harness.runlog import RunLog
from tokenization import ScoringPlan, TargetWords, from_backend, score_prompts


def _float_options(group: click.Group = cli, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Parameter]]:
    """Every float-typed parameter of the command tree, with the command path that takes it."""
    out = []
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            out += _float_options(cmd, path + (name,))
        else:
            out += [(path + (name,), p) for p in cmd.params if isinstance(p.type, click.types.FloatParamType)]
    return out


FLOATS = _float_options()


def _bad_values(t: click.types.FloatParamType) -> list[str]:
    """nan, inf and values just outside (or on an open) bound of the option's range."""
    bad = ["nan", "inf", "-inf", "1e400"]
    lo, hi = getattr(t, "min", None), getattr(t, "max", None)
    if lo is not None:
        bad += [str(lo - 1)] + ([str(lo)] if t.min_open else [])  # type: ignore[attr-defined]
    if hi is not None:
        bad += [str(hi + 1)] + ([str(hi)] if t.max_open else [])  # type: ignore[attr-defined]
    return bad


def test_the_tree_walk_finds_the_float_options():
    found = {(" ".join(c), p.opts[0]) for c, p in FLOATS}
    assert {("run", "--min-coverage"), ("run", "--min-label-mass"), ("run", "--aware-tol"),
            ("data audit", "--threshold"), ("probes train", "--C"), ("organism build", "--lr"),
            ("report", "--base-rate"), ("taxonomy", "--artifact-threshold")} <= found


@pytest.mark.parametrize("command,param", FLOATS, ids=[f"{' '.join(c)} {p.opts[0]}" for c, p in FLOATS])
def test_every_float_option_is_finite_and_bounded(command, param):
    assert isinstance(param.type, FiniteFloat), f"{' '.join(command)} {param.opts[0]}: use harness.core.bounds"
    assert param.type.min is not None or param.type.max is not None, "declare the option's bounds"
    for value in _bad_values(param.type):
        res = CliRunner().invoke(cli, [*command, f"{param.opts[0]}={value}"])
        assert res.exit_code == 2 and f"Invalid value for '{param.opts[0]}'" in res.output, (value, res.output)


def test_nan_is_refused_at_parse_time_outside_the_test_process(tmp_path):
    r = subprocess.run([sys.executable, "-m", "evalaware.main", "run", "--model", str(tmp_path / "none"),
                        "--backend", "hf", "--dataset", "demo", "--aware-tol", "nan",
                        "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert r.returncode == 2 and "Invalid value for '--aware-tol': 'nan' is not a finite number" in r.stderr
    assert not (tmp_path / "r").exists()


# --- --person ---------------------------------------------------------------------------------

@pytest.fixture
def no_engine(monkeypatch):
    monkeypatch.setattr(registry, "make_backend", lambda *a, **k: pytest.fail("engine started"))


@pytest.mark.parametrize("methods,named", [("logprob", "logprob"), ("reasoning", "reasoning"),
                                           ("monitor", "monitor"),
                                           ("binary,logprob,logprob_question", "logprob (")])
def test_third_person_refused_by_methods_that_ask_nothing(tmp_path, tiny_model_dir, no_engine, methods, named):
    res = CliRunner().invoke(cli, ["run", "--model", str(tiny_model_dir), "--backend", "hf", "--dataset",
                                   "demo", "--limit", "2", "--methods", methods, "--person", "third",
                                   "--out", str(tmp_path / "r")])
    assert res.exit_code != 0
    assert f"--person third: not applied by {named}" in str(res.exception), res.output
    assert not (tmp_path / "r").exists()


def test_third_person_refused_by_the_method_itself(tmp_path, hf_tiny):
    samples = load_dataset("demo")[:1]
    with pytest.raises(EvalAwareError, match="--person third: not applied by logprob"):
        run_methods(samples, ["logprob"], hf_tiny, tmp_path / "r", config=MethodConfig(person="third"),
                    progress=False)
    with RunLog(tmp_path / "r", create=False) as st:
        assert st.get_meta("settings/logprob") is None and not st.results("logprob")


def _third_person_prompt(sample, renderer: Renderer) -> list[int]:
    """The third-person logprob_question prompt, built here from the prompt files."""
    wrapper = (BUILTIN / "third_person.txt").read_text().strip()
    question = (BUILTIN / "logprob" / "question.txt").read_text().strip()
    text = wrapper.format(transcript=format_transcript(sample_view(sample, "first_turn")), question=question)
    return list(answer_start(renderer).render((Message("user", text),)))


def test_logprob_question_applies_third_person(tmp_path, tiny_model_dir, hf_tiny):
    base = ["run", "--model", str(tiny_model_dir), "--backend", "hf", "--dataset", "demo", "--limit", "2",
            "--methods", "logprob_question", "--min-coverage", "0", "--no-progress"]
    scores = {}
    for person in ("first", "third"):
        res = CliRunner().invoke(cli, [*base, "--person", person, "--out", str(tmp_path / person)])
        assert res.exit_code == 0, res.output
        with RunLog(tmp_path / person, create=False) as st:
            scores[person] = {r["sample_id"]: r["details"]["aware_p_eval"] for r in st.result_dicts("logprob_question")}
            assert st.get_meta("settings/logprob_question")["config"]["person"] == person
            # a run made before the third person was applied (recorded, ignored) refuses to resume
            assert ("third_person" in st.get_meta("settings/logprob_question")) == (person == "third")
    assert scores["first"].keys() == scores["third"].keys() and len(scores["first"]) == 2
    assert all(scores["first"][i] != scores["third"][i] for i in scores["first"])
    # The third-person run scored exactly the third-person prompt: re-scoring it is all cache hits
    # and gives the recorded score; the first-person prompt was never sent there.
    with RunLog(tmp_path / "third", create=False) as st:
        cached = CachedBackend(hf_tiny, st)
        renderer = Renderer(hf_tiny.tokenizer, {})
        plan = ScoringPlan.build(from_backend(cached), TargetWords.parse("paper"), cases=SCORING_CASES)
        via = "prefix" if hf_tiny.capabilities.prefix_scoring else "loglikelihood"
        for s in st.samples():
            sc = score_prompts(cached, [_third_person_prompt(s, renderer)], plan=plan, aware_via=via)[0]
            assert not cached.misses and sc.aware_p_eval == scores["third"][s.id]
        first = answer_start(renderer).render(sample_view(s, "first_turn") + (
            Message("user", (BUILTIN / "logprob" / "question.txt").read_text().strip()),))
        score_prompts(cached, [first], plan=plan, aware_via=via)
        assert cached.misses


# --- --prompts templates ----------------------------------------------------------------------

@pytest.mark.parametrize("file,text,message", [
    ("third_person.txt", "{transcript}\n{missing}\n{question}", "field {missing}: not a field of this template"),
    ("third_person.txt", "{transcript.__class__.__mro__}\n{question}",
     "field {transcript.__class__.__mro__}: attribute or index access is not allowed"),
    ("third_person.txt", "{transcript[0]}\n{question}", "field {transcript[0]}: attribute or index access"),
    ("third_person.txt", "{0}{transcript}\n{question}", "field {0}: not a field of this template"),
    ("third_person.txt", "Is this a test?\n{question}", "field {transcript} is missing"),
    ("third_person.txt", "{transcript}", "field {question} is missing"),
    ("third_person.txt", "{transcript!r}\n{question}", "field {transcript!r}: no conversion or format spec"),
    ("third_person.txt", "{transcript:>999999999}\n{question}", "field {transcript:>999999999}: no conversion"),
    ("third_person.txt", "{transcript}\n{question", "malformed template"),
    ("judge_motivation/v1.txt", "Is this aware? Answer in JSON.", "field {text} is missing"),
])
def test_prompt_templates_checked_before_any_engine(tmp_path, tiny_model_dir, no_engine, file, text, message):
    d = tmp_path / "prompts"
    (d / file).parent.mkdir(parents=True)
    (d / file).write_text(text)
    res = CliRunner().invoke(cli, ["run", "--model", str(tiny_model_dir), "--backend", "hf", "--dataset", "demo",
                                   "--methods", "binary,motivation", "--person", "third", "--prompts", str(d),
                                   "--out", str(tmp_path / "r")])
    assert res.exit_code != 0 and f"{d / file}: {message}" in str(res.exception), res.output
    assert not (tmp_path / "r").exists()


def test_bad_template_is_one_line_exit_2(tmp_path):
    d = tmp_path / "prompts"
    d.mkdir()
    (d / "third_person.txt").write_text("{transcript.__class__.__mro__}\n{question}")
    r = subprocess.run([sys.executable, "-m", "evalaware.main", "steer", "run", "--vector", str(tmp_path),
                        "--model", str(tmp_path / "none"), "--dataset", "demo", "--prompts", str(d),
                        "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: {d / 'third_person.txt'}: field {{transcript.__class__.__mro__}}: attribute or index access "
        "is not allowed (its fields: {transcript}, {question}) (evalaware steer run)"]


def test_a_good_custom_template_is_used(tmp_path, tiny_model_dir):
    d = tmp_path / "prompts"
    d.mkdir()
    (d / "third_person.txt").write_text("A {{literal}} brace; the log:\n{transcript}\n\nNow: {question}")
    res = CliRunner().invoke(cli, ["run", "--model", str(tiny_model_dir), "--backend", "hf", "--dataset", "demo",
                                   "--limit", "1", "--methods", "binary", "--n-votes", "1", "--person", "third",
                                   "--answer-tokens", "2", "--probe-tokens", "2", "--prompts", str(d),
                                   "--no-progress", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    with RunLog(tmp_path / "r", create=False) as st:
        assert st.get_meta("manifest")["prompt_set"]["overridden"] == ["third_person"]


def test_steer_alphas_refuse_nan_and_inf():
    """`steer run --alphas` is a comma list, parsed apart from click's float types: nan/inf too."""
    from evalaware.steer import _floats
    from harness.core.errors import EvalAwareError

    assert _floats("-0.5,0,0.5", "--alphas") == [-0.5, 0.0, 0.5]
    for bad in ("nan", "0.1,inf", "-inf", "1e400"):
        with pytest.raises(EvalAwareError, match="finite"):
            _floats(bad, "--alphas")


def test_a_named_api_key_variable_that_is_not_set_is_refused(monkeypatch):
    """--api-key-env names the key to send: unset, it is an error, never OPENAI_API_KEY instead."""
    from evalaware.options import EngineOptions
    from harness.core.errors import EvalAwareError

    monkeypatch.setenv("OPENAI_API_KEY", "sk-other")
    monkeypatch.delenv("MY_TYPO_KEY", raising=False)
    with pytest.raises(EvalAwareError, match="MY_TYPO_KEY: no such environment variable"):
        EngineOptions(api_key_env="MY_TYPO_KEY").api_key
    monkeypatch.setenv("MY_TYPO_KEY", "sk-meant")
    assert EngineOptions(api_key_env="MY_TYPO_KEY").api_key == "sk-meant"
    assert EngineOptions().api_key == "sk-other"  # the default variable, as before
