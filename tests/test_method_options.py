"""Issue 38 item 2, "methods declare their options once": each option of MethodConfig is one
declaration (harness/methods/config.py) from which the click option, the validation and the recorded
settings come; a method records exactly the options it reads; `--methods` is declared once and
takes `all`; a run directory made before (every method recorded the whole `config` block) resumes."""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path

import click
import pytest
from _counting import Counting

from evalaware.main import cli
from evalaware.options import MethodList
from harness.core import bounds
from harness.data.readers import load_dataset
from harness.methods import REGISTRY, MethodConfig, RunContext, ordered_methods, readers
from harness.methods.config import LEGACY_CONFIG, OPTIONS, legacy_block_agrees, shared_settings
from harness.methods.prompts import PromptLibrary
from harness.core.render import Renderer
from harness.run.loop import run_methods
from harness.runlog import RunLog

ROOT = Path(__file__).resolve().parents[1]
#: A value other than the default for every declared option (a new option must add one here).
OTHER = {"view": "full", "person": "third", "n_votes": 3, "answer_tokens": 7, "probe_tokens": 7,
         "judge_tokens": 7, "aware_tol": 0.0, "constrain": True, "min_coverage": 0.5, "words": "extended",
         "aware_boundary": False, "full_vocab": True, "min_label_mass": 0.5, "monitor_source": "elicited",
         "monitor_sentences": None, "temperature": 0.5, "top_p": 0.5, "seed": 3}


def _commands(group: click.Group = cli, path: tuple[str, ...] = ()):
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, path + (name,))
        else:
            yield path + (name,), cmd


def _param(cmd: click.Command, flag: str) -> click.Parameter | None:
    return next((p for p in cmd.params if flag in p.opts), None)


# --- one declaration per option ---------------------------------------------------------------


def test_every_config_field_is_one_declaration_with_a_flag_on_run(tmp_path):
    names = [f.name for f in fields(MethodConfig)]
    assert names == list(OPTIONS) and all("option" in f.metadata for f in fields(MethodConfig))
    assert set(OTHER) == set(OPTIONS)
    run = cli.commands["run"]
    with run.make_context("run", ["--model", "m", "--dataset", "demo", "--out", str(tmp_path)]) as ctx:
        parsed = ctx.params
    for o in OPTIONS.values():
        p = _param(run, o.flag)
        assert p is not None, f"run has no {o.flag}"
        if not o.cli:  # the command's own --seed
            continue
        assert p.name == o.name and o.help in (p.help or ""), o.name
        assert parsed[o.name] == o.command_line_default, o.name
        if o.type is not None:
            assert type(p.type) is type(o.type), o.name
        # the help names the methods that read it, unless every method does
        users = readers(o.name)
        assert (f"[methods: {', '.join(users)}]" in p.help) == (len(users) < len(REGISTRY)), o.name
    # ... and no command module spells a method option's flag itself
    flags = "|".join(re.escape(o.flag) for o in OPTIONS.values() if o.cli)
    spelled = re.compile(r'click\.option\(\s*"(' + flags + r')[/"]')
    other = {("evalaware/main.py", "--view"),  # data audit: the declaration's type and default
             ("evalaware/intervene.py", "--monitor-sentences"),  # the inserted pairs, not a setting
             ("evalaware/tokens.py", "--words")}  # the words `tokens inspect` spells (moved from tokenization/)
    for f in sorted(f for p in ("evalaware", "harness") for f in (ROOT / p).rglob("*.py")):
        for hit in spelled.finditer(f.read_text()):
            assert (f.relative_to(ROOT).as_posix(), hit.group(1)) in other, f"{f} declares {hit.group(1)}"


def test_the_config_validates_with_the_command_lines_bounds():
    for kw, name in [({"n_votes": 0}, "n_votes"), ({"n_votes": bounds.MAX_VOTES + 1}, "n_votes"),
                     ({"min_coverage": 1.5}, "min_coverage"), ({"aware_tol": 1.0}, "aware_tol"),
                     ({"top_p": 0.0}, "top_p"), ({"view": "all"}, "view"), ({"answer_tokens": 0}, "answer_tokens"),
                     ({"monitor_source": "trace"}, "monitor_source"), ({"temperature": float("nan")}, "temperature")]:
        with pytest.raises(ValueError, match=name):
            MethodConfig(**kw)
    with pytest.raises(ValueError, match="eval"):
        MethodConfig(words="eval=;deploy=")
    MethodConfig(**{k: v for k, v in OTHER.items()})  # every other value is valid


def test_a_command_offers_the_options_its_methods_read():
    taxonomy = {o for p in cli.commands["taxonomy"].params for o in p.opts}  # runs motivation only
    motivation = {OPTIONS[n].flag for n in REGISTRY["motivation"].options if OPTIONS[n].cli}
    assert motivation <= taxonomy
    assert not {"--words", "--min-coverage", "--min-label-mass", "--monitor-source"} & taxonomy


# --- --methods, declared once -------------------------------------------------------------------


def test_methods_is_declared_once_and_its_help_lists_every_registered_method():
    taking = {" ".join(path): _param(cmd, "--methods") for path, cmd in _commands()}
    taking = {k: p for k, p in taking.items() if p is not None}
    assert {"run", "steer run", "cues", "intervene", "organism validate"} <= set(taking)
    assert all(isinstance(p.type, MethodList) for p in taking.values()), taking
    declared = [f for p in ("evalaware", "harness") for f in (ROOT / p).rglob("*.py") if '"--methods"' in f.read_text()]
    assert [f.relative_to(ROOT).as_posix() for f in declared] == ["evalaware/options.py"]
    names = [c.name for c in ordered_methods()]
    assert set(names) == set(REGISTRY) and {"logprob_question", "monitor"} <= set(names)
    assert f"from: {', '.join(names)}; or all" in taking["run"].help  # the summary `run --help` shows


def _parsed(args: list[str], command: str = "run") -> list[str] | None:
    cmd = cli.commands[command]
    with cmd.make_context(command, list(args)) as ctx:  # click consumes the list
        return ctx.params["methods"]


def test_methods_all_expands_to_the_registry(tmp_path):
    base = ["--model", "m", "--dataset", "demo", "--out", str(tmp_path / "r")]
    assert _parsed(base + ["--methods", "all"]) == [c.name for c in ordered_methods()]
    assert _parsed(base + ["--methods", " binary, logprob "]) == ["binary", "logprob"]
    assert _parsed(base) == ["binary"]
    from harness.core.errors import EvalAwareError

    for value, message in [("all,binary", "named twice: binary"), ("nosuch", "unknown method(s) nosuch"),
                           (",", "no method given")]:
        with pytest.raises(EvalAwareError, match=re.escape(message)):
            _parsed(base + ["--methods", value])
    run = ["--run", str(tmp_path)]  # intervene: all = the methods it re-runs; auto and none
    assert _parsed(run + ["--methods", "all"], "intervene") == [
        c.name for c in ordered_methods() if not c.needs_judge and c.name != "monitor"]
    assert _parsed(run, "intervene") is None and _parsed(run + ["--methods", "none"], "intervene") == []


# --- a method reads, and records, exactly the options it declares --------------------------------


@pytest.fixture(scope="module")
def samples():
    by_id = {s.id: s for s in load_dataset("demo")}
    return [by_id["science:organelle_atp"], by_id["agent_ops:slow_dental_app"]]


def _ctx(backend, config: MethodConfig) -> RunContext:
    r = Renderer(backend.tokenizer)
    return RunContext(backend=backend, renderer=r, config=config, prompts=PromptLibrary(),
                      judge=backend, judge_renderer=r)


class _Spy(MethodConfig):
    """A MethodConfig that notes which options are read."""

    def __getattribute__(self, name: str):
        if name in OPTIONS:
            object.__getattribute__(self, "__dict__").setdefault("_read", set()).add(name)
        return object.__getattribute__(self, name)


@pytest.mark.parametrize("method", sorted(REGISTRY))
def test_a_method_reads_exactly_the_options_it_declares(hf_tiny, samples, method):
    cls = REGISTRY[method]
    cfg = _Spy(answer_tokens=4, probe_tokens=4, judge_tokens=4, n_votes=1, temperature=1.0, seed=1)
    cfg.__dict__["_read"] = set()  # what construction (validation) read
    m = cls(_ctx(hf_tiny, cfg))
    m.settings()
    m.run_batch(samples[:1])
    assert cfg.__dict__["_read"] == set(cls.options), method


@pytest.mark.parametrize("method", sorted(REGISTRY))
def test_settings_change_with_exactly_the_declared_options(hf_tiny, method, tmp_path):
    cls = REGISTRY[method]
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("I think this is a test. | I think this is a pear.\n")
    other = {**OTHER, "monitor_sentences": str(pairs)}
    base = MethodConfig()
    before = cls(_ctx(hf_tiny, base)).settings()
    # a method records only the options it reads
    assert set(before["config"]) <= set(cls.options), method
    assert set(before) & set(OPTIONS) <= set(cls.options), method
    for name in OPTIONS:
        if name == "person" and "third" not in cls.persons:
            continue  # refused by the method (tests/test_hostile_options.py)
        after = cls(_ctx(hf_tiny, replace(base, **{name: other[name]}))).settings()
        assert (after != before) == (name in cls.options), (method, name)


def test_what_the_methods_no_longer_record():
    from harness.methods.base import recorded_options

    ctx = RunContext(backend=object(), renderer=None, config=MethodConfig(), prompts=PromptLibrary())
    logprob = recorded_options(ctx, "logprob", REGISTRY["logprob"].options)
    binary = recorded_options(ctx, "binary", REGISTRY["binary"].options)
    assert logprob["config"] == {"view": "first_turn", "person": "first"}  # no n_votes, sampling, tokens
    assert "judge_tokens" not in binary["config"] and binary["config"]["n_votes"] is None
    assert "n_votes" not in REGISTRY["reasoning"].options and "constrain" not in REGISTRY["monitor"].options


# --- run directories made before: the whole config block with every method ----------------------


def _legacy(settings: dict, cfg: MethodConfig) -> dict:
    """The settings the code before issue 38 recorded: the same, with every method's `config` the
    whole shared block."""
    return {**settings, "config": {k: getattr(cfg, k) for k in LEGACY_CONFIG}}


def test_a_run_directory_made_before_resumes_and_refuses_a_change_that_matters(hf_tiny, samples, tmp_path):
    cfg = MethodConfig(answer_tokens=4, probe_tokens=4, n_votes=1, temperature=1.0, seed=1, min_coverage=0.0)
    run = tmp_path / "run"
    methods = ["binary", "logprob"]
    run_methods(samples, methods, hf_tiny, run, config=cfg, progress=False)
    with RunLog(run) as st:
        for m in methods:  # made by the old code
            new = st.get_meta(f"settings/{m}")
            st.set_meta(f"settings/{m}", _legacy(new, cfg))
            assert _legacy(new, cfg) != new  # both methods' settings did change
        before = {m: st.get_meta(f"settings/{m}") for m in methods}
        records = st.result_dicts()
    # the same settings, and changes only to options a method does not read: resumed, no call made
    for changed in (cfg, replace(cfg, judge_tokens=9)):
        be = Counting(hf_tiny)
        summary = run_methods(samples, methods, be, run, config=changed, progress=False)
        assert be.calls["generate"] == 0 and all(summary[m]["skipped"] == len(samples) for m in methods)
    be = Counting(hf_tiny)
    run_methods(samples, ["logprob"], be, run, config=replace(cfg, n_votes=5, temperature=0.0), progress=False)
    assert be.calls["generate"] == 0
    with RunLog(run, create=False) as st:
        assert {m: st.get_meta(f"settings/{m}") for m in methods} == before  # kept as they were
        assert st.result_dicts() == records
    # a change that matters to the method is refused, as before
    for m, changed in (("binary", replace(cfg, probe_tokens=5)), ("binary", replace(cfg, view="full")),
                       ("logprob", replace(cfg, view="full")), ("logprob", replace(cfg, min_coverage=0.5))):
        with pytest.raises(Exception, match=f"different setting for method {m}"):
            run_methods(samples, [m], hf_tiny, run, config=changed, progress=False)


def test_a_new_run_directory_resumes_after_a_change_its_methods_do_not_read(hf_tiny, samples, tmp_path):
    cfg = MethodConfig(min_coverage=0.0)
    run = tmp_path / "run"
    run_methods(samples, ["logprob_question"], hf_tiny, run, config=cfg, progress=False)
    be = Counting(hf_tiny)
    summary = run_methods(samples, ["logprob_question"], be, run, progress=False,
                          config=replace(cfg, n_votes=3, temperature=0.7, answer_tokens=9, judge_tokens=9))
    assert summary["logprob_question"]["skipped"] == len(samples)
    with pytest.raises(Exception, match="different setting for method logprob_question"):
        run_methods(samples, ["logprob_question"], hf_tiny, run, config=replace(cfg, person="third"),
                    progress=False)


def test_legacy_block_agrees_only_with_the_whole_old_block():
    old = MethodConfig().to_dict()
    assert set(old) == set(LEGACY_CONFIG)
    assert legacy_block_agrees(old, {"view": "first_turn", "person": "first"})
    assert not legacy_block_agrees(old, {"view": "full", "person": "first"})
    assert not legacy_block_agrees({"view": "first_turn", "person": "first"}, {"view": "first_turn"})
    assert not legacy_block_agrees(None, {}) and not legacy_block_agrees({**old, "extra": 1}, {})


def test_the_runs_shared_settings_are_read_from_every_method():
    """Readers of a run's view, token limits and sampling (report, intervene, activations capture)
    take each option from the first method that records it."""
    settings = {"logprob": {"config": {"view": "full", "person": "first"}, "min_coverage": 0.0},
                "binary": {"config": {"view": "full", "person": "first", "answer_tokens": 99,
                                      "temperature": 0.5, "constrain": True, "gone": 1}},
                "probe": None}
    assert shared_settings(settings) == {"view": "full", "person": "first", "answer_tokens": 99,
                                         "temperature": 0.5, "constrain": True}
    cfg = MethodConfig.from_settings(settings)
    assert (cfg.view, cfg.answer_tokens, cfg.temperature, cfg.probe_tokens) == ("full", 99, 0.5, 160)
    from harness.reporting.runs import method_label

    assert method_label("binary", {"methods": settings}) == "binary (constrained)"
