"""What to run through the model for each sample of a run: prompt + answer as one sequence.

The prompt is rendered exactly as the run rendered it (same chat template switches, same view).
With `reasoning` records (the reasoning-trace method), the sequence is the one the judge read:
the model's own answer for native reasoning, or, for an *elicited* trace, the elicitation prompt
(instruction in the system prompt, answer pre-filled with ``<think>``) and its generation.
The answer/trace tokens are, in order of preference:
1. the call the run logged in role ``answer`` (of the method whose settings give the view) or
   ``elicited_reasoning`` (of the reasoning method): exact prompt and output token ids, looked
   up in the run log (``model_calls``, :class:`harness.core.records.ModelCall`);
   for runs written before calls were logged: the cached generation, found by rendering the
   method's prompt again and asking the call cache (exact token ids; no model call);
2. the text in a method record (``details.sample_answer``/``answer`` and
   ``details.reasoning_text``/``reasoning``), re-tokenised;
3. none: only prompt poolings exist for that sample.
Evidence quotes are collected from the records of the chosen methods (any ``evidence``/``quotes``
list in ``details``, strings or ``{"quote": ...}`` objects not marked unverified) and located in
the decoded answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from harness.backends.base import Generation, GenerationRequest
from harness.backends.replay import CacheMiss, replayed
from harness.core.errors import EvalAwareError
from harness.methods.base import MethodConfig, RunContext, answer_samples
from harness.core.sample import sample_view
from harness.methods.prompts import PromptLibrary
from harness.core.records import ModelCall, Record
from harness.core.render import Renderer
from harness.core.sample import Sample
from harness.runlog import RunLog

from probes.activations.pooling import SequenceSpans, char_spans_to_tokens, find_quote, token_char_offsets

PREFERRED_METHODS = ("reasoning", "motivation", "binary", "probability", "logprob")
_QUOTE_KEYS = ("evidence", "quotes", "evidence_quotes")


@dataclass
class CaptureItem:
    """One sequence to capture."""

    sample_id: str
    ids: tuple[int, ...]
    spans: SequenceSpans
    info: dict[str, Any] = field(default_factory=dict)


def method_settings(store: RunLog) -> dict[str, dict[str, Any]]:
    """{method: settings} recorded by the run."""
    return {k.split("/", 1)[1]: store.get_meta(k) for k in store.meta_keys("settings/")}


def answer_config(store: RunLog, method: str | None = None) -> tuple[str | None, MethodConfig]:
    """The MethodConfig the run's answers were generated with (from `method`, else the first of
    PREFERRED_METHODS the run has)."""
    settings = method_settings(store)
    if method is not None and method not in settings:
        raise EvalAwareError(f"{store.run_dir}: the run has no method {method!r}; it has "
                             f"{', '.join(sorted(settings)) or 'none'}")
    order = [method] if method else [m for m in PREFERRED_METHODS if m in settings] + sorted(settings)
    for m in order:
        cfg = (settings.get(m) or {}).get("config")
        if isinstance(cfg, dict):
            known = set(MethodConfig.__dataclass_fields__)
            return m, MethodConfig(**{k: v for k, v in cfg.items() if k in known})
    return None, MethodConfig()


def collect_quotes(obj: Any) -> list[str]:
    """Evidence quotes anywhere in a record's details: lists under ``evidence``/``quotes`` of
    strings or of ``{"quote": ...}`` objects; objects marked ``"verified": false`` (not found in
    the judged text by the judge module) are skipped."""
    out: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in _QUOTE_KEYS and isinstance(v, list):
                for q in v:
                    if isinstance(q, str):
                        out.append(q)
                    elif isinstance(q, dict) and q.get("verified", True) is not False:
                        t = q.get("quote", q.get("text"))
                        if isinstance(t, str):
                            out.append(t)
            elif k in _QUOTE_KEYS and isinstance(v, str) and v.strip():
                out.append(v)
            else:
                out.extend(collect_quotes(v))
    elif isinstance(obj, list):
        for v in obj:
            out.extend(collect_quotes(v))
    return list(dict.fromkeys(q for q in out if q.strip()))


def _record_texts(records: Iterable[Record]) -> tuple[str | None, str | None]:
    """(answer, reasoning) texts from method records (first found)."""
    answer = reasoning = None
    for r in records:
        d = r.details
        answer = answer or d.get("sample_answer") or d.get("answer")
        reasoning = reasoning or d.get("reasoning_text") or d.get("reasoning")
    return answer, reasoning


def _elicit_prompt(ctx: RunContext, sample: Sample) -> tuple[int, ...] | None:
    """The prompt the `reasoning` method used to elicit a trace (None if that method's module or
    prompt is not available)."""
    try:
        from harness.methods.reasoning import THINK_PREFIX, with_instruction  # type: ignore
        instruction = ctx.prompts.get("reasoning/elicit").text
    except (ImportError, EvalAwareError, KeyError, FileNotFoundError):
        return None
    msgs = with_instruction(sample_view(sample, ctx.config.view), instruction)
    return tuple(ctx.renderer.render(msgs, assistant_prefix=THINK_PREFIX))


def _replay(ctx: RunContext | None, prompt: tuple[int, ...]) -> Generation | None:
    """The cached generation for `prompt` under the run's answer settings, or None."""
    if ctx is None:
        return None
    req = GenerationRequest(prompt, ctx.config.params(ctx.config.answer_tokens))
    try:
        return ctx.backend.generate([req])[0]
    except CacheMiss:
        return None


SEQUENCES = ("auto", "answer", "reasoning")


def logged_calls(store: RunLog, method: str | None) -> dict[tuple[str, str], ModelCall]:
    """{(sample id, role): call}: the answers `method` logged (any method's when None) and the
    reasoning method's elicited traces."""
    out = {(c.sample_id, c.role): c for c in store.model_calls("reasoning", "elicited_reasoning")}
    for c in store.model_calls(method, "answer"):
        out.setdefault((c.sample_id, c.role), c)
    return out


def build_items(store: RunLog, samples: Sequence[Sample], tokenizer: Any,
                method: str | None = None, evidence_methods: Sequence[str] = ("reasoning",),
                include_answer: bool = True, sequence: str = "auto") -> list[CaptureItem]:
    """Capture items for `samples` from the run in `store` (no model calls).

    `sequence`: ``answer`` = prompt + the model's answer to the sample; ``reasoning`` = the
    sequence the `reasoning` method judged (the same answer for native reasoning; for an
    elicited trace, the elicitation prompt + its generation); ``auto`` = reasoning when the run
    has `reasoning` records, else answer."""
    if sequence not in SEQUENCES:
        raise EvalAwareError(f"--sequence {sequence!r}: use {', '.join(SEQUENCES)}")
    reasoning_recs = {r.sample_id: r for r in store.results("reasoning")}
    if sequence == "auto":
        sequence = "reasoning" if reasoning_recs and include_answer else "answer"
    if sequence == "reasoning" and not reasoning_recs:
        raise EvalAwareError(f"{store.run_dir}: --sequence reasoning needs `reasoning` records")
    manifest = store.get_meta("manifest") or {}
    template_kwargs = (manifest.get("renderer") or {}).get("template_kwargs") or {}
    renderer = Renderer(tokenizer, dict(template_kwargs))
    if sequence == "reasoning" and "reasoning" in method_settings(store):
        method = "reasoning"
    used_method, cfg = answer_config(store, method)
    logged = logged_calls(store, used_method)
    identity = store.get_meta("model_identity")
    ctx = None
    if identity is not None:
        ctx = RunContext(backend=replayed(store, identity, tokenizer),
                         renderer=renderer, config=cfg, prompts=PromptLibrary())
    by_sample: dict[str, list[Record]] = {}
    for r in store.results():
        by_sample.setdefault(r.sample_id, []).append(r)
    items = []
    for s in samples:
        prompt = tuple(renderer.render(sample_view(s, cfg.view)))
        recs = by_sample.get(s.id, [])
        rrec = reasoning_recs.get(s.id) if sequence == "reasoning" else None
        rdet = rrec.details if rrec else {}
        info: dict[str, Any] = {"answer_source": "none", "answer_method": used_method,
                                "view": cfg.view, "sequence": "prompt"}
        answer_ids: tuple[int, ...] = ()
        raw = reasoning = None
        if include_answer:
            gen, source = None, "cache"
            info["sequence"] = "answer"
            call = logged.get((s.id, "elicited_reasoning" if rdet.get("reasoning_source") == "elicited"
                               else "answer"))
            if call is not None:
                prompt, source = call.prompt_ids, "log"
                if call.role == "elicited_reasoning":
                    info["sequence"] = "elicited_reasoning"
                gen = Generation(text=call.text, reasoning=call.reasoning, raw_text="",
                                 token_ids=call.output_ids, finish_reason="")
            elif rdet.get("reasoning_source") == "elicited":
                elicited = _elicit_prompt(ctx, s) if ctx is not None else None
                if elicited is not None:
                    prompt, info["sequence"] = elicited, "elicited_reasoning"
                    gen = _replay(ctx, prompt)
            elif ctx is not None:
                try:
                    gen = answer_samples(ctx, [s])[0]
                except CacheMiss:
                    gen = None
            if gen is not None:
                answer_ids, raw = tuple(gen.token_ids), gen.raw_text
                reasoning = rdet.get("reasoning") or gen.reasoning
                info["answer_source"] = source
            else:
                text, reasoning = _record_texts(([rrec] if rrec else []) + recs)
                if text or reasoning:
                    raw = (reasoning + "\n\n" if reasoning else "") + (text or "")
                    answer_ids = tuple(tokenizer(raw, add_special_tokens=False)["input_ids"])
                    info["answer_source"] = "record"
        ids = prompt + answer_ids
        n_prompt = len(prompt)
        info["n_prompt"] = n_prompt
        reasoning_spans: list[tuple[int, int]] = []
        evidence_spans: list[tuple[int, int]] = []
        quotes = collect_quotes([r.to_dict()["details"] for r in recs if r.method in evidence_methods])
        if answer_ids:
            text, offsets = token_char_offsets(tokenizer, answer_ids)
            if reasoning:
                span = find_quote(text, reasoning)
                if span is not None:
                    reasoning_spans = [(a + n_prompt, b + n_prompt)
                                       for a, b in char_spans_to_tokens([span], offsets)]
            found = [sp for sp in (find_quote(text, q) for q in quotes) if sp is not None]
            evidence_spans = [(a + n_prompt, b + n_prompt)
                              for a, b in char_spans_to_tokens(found, offsets)]
            info["quotes_found"] = len(found)
        else:
            info["quotes_found"] = 0
        info.update(n_answer=len(answer_ids), quotes_total=len(quotes),
                    n_reasoning=sum(b - a for a, b in reasoning_spans),
                    n_evidence=sum(b - a for a, b in evidence_spans))
        items.append(CaptureItem(s.id, ids, SequenceSpans(n_prompt, len(ids), tuple(reasoning_spans),
                                                          tuple(evidence_spans)), info))
    return items
