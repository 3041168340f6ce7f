"""What every method shares: configuration, run context, the conversation views, the model's own
answer to a sample, and the ask-parse-vote flow (cf. Inspect AI's solver -> scorer layering).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Sequence

from harness.core.errors import EvalAwareError
from harness.methods.answer_format import AnswerFormat, label_probabilities
from harness.methods.answer_position import answer_start
from harness.backends.base import Backend, Generation, GenerationRequest, SamplingParams
from harness.methods.config import (OPTIONS, PERSONS, VIEWS, MethodConfig,  # noqa: F401  (re-exported)
                                    legacy_block_agrees)
from harness.runlog import RunLog
from harness.methods.call_log import CallLog
from harness.core.parsing import Parsed
from harness.methods.prompts import Prompt, PromptLibrary
from harness.core.render import Renderer, format_transcript
from harness.methods.report_spec import ReportSpec
from harness.core.sample import Message, Sample, sample_view
from harness.core.details import Detail, LabelGate, LabelVote
from harness.core.records import Record, Verdict, Vote
from harness.methods.voting import Tally

#: What the model's own answer to a sample reads (:func:`answer_samples`, an elicited trace).
ANSWER_OPTIONS = ("answer_tokens", "temperature", "top_p", "seed")
#: What a judge's verdicts read (:func:`harness.methods.judge.judge_texts`; judges decode greedily).
JUDGE_OPTIONS = ("judge_tokens", "constrain")
#: What the label probabilities of a tagged answer format read (binary, probability).
LABEL_OPTIONS = ("constrain", "min_label_mass")


@dataclass
class RunContext:
    """Everything a method needs; `backend` and `judge` are cached backends; `log` collects the
    roles of the generations made (the runner stores them with the records)."""

    backend: Backend
    renderer: Renderer
    config: MethodConfig
    prompts: PromptLibrary
    judge: Backend | None = None
    judge_renderer: Renderer | None = None
    log: CallLog = field(default_factory=CallLog)

    def recorded(self, method: str) -> dict[str, Any] | None:
        """The settings the run directory already holds for `method` (None outside a run
        directory and before the method's first run there): read from the run log behind the
        cached backend that :func:`harness.run.loop.run_methods` hands the methods."""
        store = getattr(self.backend, "store", None)
        return store.get_meta(f"settings/{method}") if isinstance(store, RunLog) else None


REGISTRY: dict[str, type["Method"]] = {}


def register(cls: type["Method"]) -> type["Method"]:
    """Add `cls` to :data:`REGISTRY` under its `name`; a name taken by another class is refused,
    naming both (a second registration would silently replace the first)."""
    old = REGISTRY.get(cls.name)
    if old is not None and old is not cls:
        raise EvalAwareError(f"method {cls.name!r} is registered twice: by {_qualname(old)} and by "
                             f"{_qualname(cls)}; give one of them another name")
    REGISTRY[cls.name] = cls
    return cls


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class Method(ABC):
    """A method turns a batch of samples into one :class:`~harness.core.records.Record` per sample."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    needs_judge: ClassVar[bool] = False  # asks RunContext.judge (the CLI starts one only then)
    #: What the report shows for this method (order, score, sections): :mod:`harness.methods.report_spec`.
    report: ClassVar[ReportSpec] = ReportSpec()
    #: The ``person`` settings the method applies; it refuses the others, which it would record
    #: but not apply (:func:`check_person`).
    persons: ClassVar[tuple[str, ...]] = ("first",)
    #: The options of :class:`MethodConfig` the method reads (:mod:`harness.methods.config`): its
    #: settings record these and no other, so a run directory refuses to resume after a change to
    #: one of them and only then (tests/test_method_options.py checks what each method reads).
    options: ClassVar[tuple[str, ...]] = ("view", "person")
    #: The typed details its records carry that other layers read (:mod:`harness.core.details`):
    #: it writes them with ``to_dict()``, statistics and the report read them with ``of()``.
    details: ClassVar[tuple[type[Detail], ...]] = ()

    def __init__(self, ctx: RunContext) -> None:
        check_person([type(self)], ctx.config.person)
        self.ctx = ctx

    @abstractmethod
    def run_batch(self, samples: Sequence[Sample]) -> list[Record]:
        """Records for these samples (same order)."""

    def settings(self) -> dict[str, Any]:
        """What the run directory records for the method and checks on resume: the options it
        reads (:func:`recorded_options`); a subclass adds what it resolved (its words, its judge)."""
        return recorded_options(self.ctx, self.name, self.options)

    def record(self, sample: Sample, tally: Tally, answers: Sequence[Generation | None] = (),
               votes: Sequence[Vote] | None = None, context: Sequence[Generation | None] = (),
               **details: Any) -> Record:
        """The standard record: prediction ("eval"/"deploy"/None), score (P(eval)-like, for AUROC),
        vote counts, `n_answers`/`n_cut` (the model's generations behind the record, judge calls
        included, and how many of them stopped at the token limit), the sample's slicing
        metadata, the votes and method-specific details.

        `context`: generations the questions follow but nothing parses (the model's answer to
        the sample). They count in `n_answers`/`n_cut`; one cut with its text kept also in
        `n_cut_context`: the question reads the answer as far as it went, no vote is lost to the cut,
        so a run does not warn about it (:mod:`harness.run.monitor`). One cut with no text (a
        reasoning model that spent the limit thinking) leaves the question following an empty
        answer and counts as an ordinary cut."""
        given = [g for g in (*context, *answers) if g is not None]
        cuts = [g.finish_reason == "length" for g in given] + [v.cut for v in judged(votes or ())]
        kept = sum(g.finish_reason == "length" and bool(g.text.strip()) for g in context if g is not None)
        return Record.for_sample(sample, self.name, tally.prediction, tally.score, tally.n_valid,
                                 tally.n_invalid, n_answers=len(cuts), n_cut=sum(cuts),
                                 n_cut_context=kept if context else None,
                                 votes=None if votes is None else tuple(votes), details=details)


def recorded_options(ctx: RunContext, method: str, names: Sequence[str]) -> dict[str, Any]:
    """The options `names` of ``ctx.config`` as `method` records them: those declared
    ``record="config"`` in the ``config`` block, ``"top"`` ones at the top level (``"own"`` ones
    the method records itself). A run directory made before issue 38 holds every method's whole
    ``config`` block (:data:`~harness.methods.config.LEGACY_CONFIG`); where it agrees on the
    options the method reads, that block is kept, so the directory resumes (docs/decisions.md,
    "Method options")."""
    cfg, used = ctx.config, [OPTIONS[n] for n in names]
    block = {o.name: getattr(cfg, o.name) for o in used if o.record == "config"}
    old = (ctx.recorded(method) or {}).get("config")
    if legacy_block_agrees(old, block):
        block = old
    return {"config": block, **{o.name: getattr(cfg, o.name) for o in used if o.record == "top"}}


def check_person(methods: Sequence[str | type[Method]], person: str) -> None:
    """Refuse a `person` that one of `methods` (names or classes; unknown names are left to
    :func:`harness.run.loop.check_methods`) does not apply."""
    classes = [REGISTRY.get(m) if isinstance(m, str) else m for m in methods]
    bad = [c.name for c in classes if c is not None and person not in c.persons]
    if bad:
        raise EvalAwareError(f"--person {person}: not applied by {', '.join(bad)} (no question about "
                             f"a transcript there; the manifest would record a setting not used); run "
                             f"{'it' if len(bad) == 1 else 'them'} with --person first (the default), "
                             f"e.g. as another command into the same --out")


def judged(votes: Sequence[Vote]) -> list[Verdict]:
    """The verdicts of these votes that came from a judge call (not skipped texts)."""
    return [v.verdict for v in votes if v.verdict is not None and v.verdict.error != "empty text"]


# --- conversation views ---------------------------------------------------------------------


def answer_samples(ctx: RunContext, samples: Sequence[Sample]) -> list[Generation | None]:
    """The model's own answer to each sample's view (one cached call per sample, shared by
    every method). None where the view already ends with an assistant message."""
    cfg = ctx.config
    todo, reqs = [], []
    for i, s in enumerate(samples):
        msgs = sample_view(s, cfg.view)
        if msgs[-1].role != "assistant":
            todo.append(i)
            reqs.append(GenerationRequest(ctx.renderer.render(msgs), cfg.params(cfg.answer_tokens)))
    out: list[Generation | None] = [None] * len(samples)
    tags = [(samples[i].id, "answer", 0) for i in todo]
    for i, g in zip(todo, ctx.log.generate(ctx.backend, reqs, tags)):
        out[i] = g
    return out


def transcript(sample: Sample, answer: Generation | None, view: str) -> tuple[Message, ...]:
    msgs = sample_view(sample, view)
    return msgs + ((Message("assistant", answer.text),) if answer is not None else ())


def question_messages(ctx: RunContext, sample: Sample, answer: Generation | None,
                      question: str) -> tuple[Message, ...]:
    """First person: the conversation continues with the question. Third person: one user
    message holding the transcript and the question."""
    conv = transcript(sample, answer, ctx.config.view)
    if ctx.config.person == "first":
        return conv + (Message("user", question),)
    wrapper = ctx.prompts.get("third_person").text
    return (Message("user", wrapper.format(transcript=format_transcript(conv), question=question)),)


def vote_plan(variants: Sequence[Prompt], n_votes: int | None) -> list[tuple[int, Prompt, int]]:
    """(vote index, variant, seed offset) for each vote."""
    n = n_votes or len(variants)
    return [(k, variants[k % len(variants)], k // len(variants)) for k in range(n)]


#: Summary note of the methods whose score is the label probability (binary, probability).
LABEL_SCORE_NOTE = ("binary and probability: the shares come from the parsed answers, the score "
                    "(AUROC, Brier, ECE) from the label probabilities at the label position (mean "
                    "over votes of P(EVALUATION), resp. the expected value over 0.0..1.0; "
                    "`harness/methods/answer_format.py`), so a model whose free text never holds a tag "
                    "still gets a graded score. `label mass` is the options' share of the probability "
                    "at the label position (median and 10th–90th percentile over the votes); votes "
                    "below the run's `--min-label-mass` give no label probability to the score "
                    "(withheld, counted), and a sample whose every vote is withheld has no score.")


class QuestionVoteMethod(Method):
    """Answer the sample, ask `n_votes` question variants, parse each answer, aggregate.

    Subclasses give the prompt set, the parser and the aggregation rule; a subclass that
    interprets answers with further model calls (the judge) overrides :meth:`parse_answers`."""

    prompt_set: ClassVar[str]
    parse: ClassVar[Callable[[str], Parsed]]
    aggregate: ClassVar[Callable[[Sequence[Any]], Tally]]
    #: The tagged answer format (binary, probability): with it, every vote also records the
    #: label probabilities and ``--constrain`` holds answers to its grammar.
    answer_format: ClassVar[AnswerFormat | None] = None
    persons = PERSONS  # the question follows the conversation or a shown transcript
    options = Method.options + ANSWER_OPTIONS + ("n_votes", "probe_tokens")

    def settings(self) -> dict[str, Any]:
        if self.answer_format is None:
            return super().settings()
        return {**super().settings(), "label_position": answer_start(self.ctx.renderer).how}

    @property
    def constrained(self) -> bool:
        return self.answer_format is not None and self.ctx.config.constrain

    def probe_params(self, seed_offset: int) -> SamplingParams:
        cfg = self.ctx.config
        p = cfg.params(cfg.probe_tokens, seed_offset)
        return replace(p, structured=self.answer_format.structured) if self.constrained else p

    def parse_answers(self, gens: Sequence[Generation],
                      tags: Sequence[tuple[str, int]]) -> list[tuple[Parsed, Verdict | None]]:
        """Each answer's parsed vote and, where a judge read the answer, its verdict (one batch;
        ``tags[i]`` = (sample id, vote k) of answer i)."""
        return [(type(self).parse(g.text), None) for g in gens]

    def run_batch(self, samples: Sequence[Sample]) -> list[Record]:
        ctx, cfg = self.ctx, self.ctx.config
        answers = answer_samples(ctx, samples)
        plan = vote_plan(ctx.prompts.variants(self.prompt_set), cfg.n_votes)
        convs = [question_messages(ctx, s, a, v.text) for s, a in zip(samples, answers)
                 for _, v, _ in plan]
        reqs = [GenerationRequest(ctx.renderer.render(c), self.probe_params(off))
                for c, (_, _, off) in zip(convs, plan * len(samples))]
        tags = [(s.id, k) for s in samples for k, _, _ in plan]
        gens = ctx.log.generate(ctx.backend, reqs, [(sid, "question", k) for sid, k in tags])
        parsed = self.parse_answers(gens, tags)
        labels = ([LabelVote.read(x) for x in label_probabilities(ctx.backend, ctx.renderer, self.answer_format, convs)]
                  if self.answer_format is not None else [None] * len(convs))
        records = []
        for j, (s, a) in enumerate(zip(samples, answers)):
            votes: list[Vote] = []
            block = slice(j * len(plan), (j + 1) * len(plan))
            for (k, v, off), g, (p, verdict), lab in zip(plan, gens[block], parsed[block], labels[block]):
                votes.append(Vote(k, v.name, p.value, p.error, verdict, {
                    "seed_offset": off, "answer": g.text, "reasoning": g.reasoning,
                    "finish_reason": g.finish_reason,
                    **(replace(lab, label_withheld=lab.label_mass < cfg.min_label_mass).to_dict() if lab else {}),
                    **({"constrained": True} if self.constrained else {})}))
            tally = type(self).aggregate([x.value for x in votes])
            more: dict[str, Any] = {}
            if self.answer_format is not None:
                kept = [lv.label_score for lv in map(LabelVote.of_vote, votes) if lv and not lv.label_withheld]
                more = LabelGate(cfg.min_label_mass, len(votes) - len(kept), tally.score).to_dict()
                tally = replace(tally, score=sum(kept) / len(kept) if kept else None)
            records.append(self.record(s, tally, answers=gens[block], votes=votes, context=[a],
                                       sample_answer=a.text if a else None, **more))
        return records
