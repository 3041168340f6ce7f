"""``evalaware tokens``: inspect how tokenizers spell the target words (:mod:`tokenization`)."""

from __future__ import annotations

import json
import sys

import click

from evalaware.help import SectionedGroup
from tokenization.errors import EvalAwareError
from tokenization.load import load
from tokenization.variants import CASES, CONTEXTS, variants
from tokenization.words import TargetWords

_SHORT = {"whole_word": "whole", "ambiguous_prefix": "ambig", "missing": "MISSING"}


@click.group("tokens", cls=SectionedGroup)
def tokens() -> None:
    """Target words vs tokenizers (naive first token vs full word)."""


def _words(spec: str) -> list[str]:
    """The words of --words (one line, exit 2, for a spec that does not parse or text that is not UTF-8)."""
    try:
        spec.encode("utf-8")
        if "=" in spec or spec in ("paper", "extended", "default"):
            return list(TargetWords.parse(spec).all)
    except (ValueError, UnicodeError) as e:
        raise EvalAwareError(f"--words: {e}") from None
    return [w.strip() for w in spec.split(",") if w.strip()]


def _printable(text: str) -> str:
    """`text` with its control characters escaped (a word cannot drive the terminal)."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def _among(flag: str, given: str, known: tuple[str, ...]) -> list[str]:
    """The comma list `given` of `flag`, each one of `known` (else one line, exit 2)."""
    got = [c for c in given.split(",") if c]
    bad = [c for c in got if c not in known]
    if bad or not got:
        raise EvalAwareError(f"{flag} {given!r}: expected a comma list of {', '.join(known)}")
    return got


@tokens.command("inspect")
@click.option("--tokenizer", "tokenizers", multiple=True, required=True,
              help="family name (qwen3, deepseek-r1, llama3, gpt-oss, gpt2, mistral-v3, mistral-tekken, "
                   "gemma3, smollm2) or path; repeat for a side-by-side table")
@click.option("--words", default="evaluation,test,real,deployment", show_default=True,
              help="comma-separated words, or 'paper' / 'extended' / 'eval=..;deploy=..'")
@click.option("--cases", default=",".join(CASES), show_default=True)
@click.option("--contexts", default=",".join(CONTEXTS), show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
def inspect(tokenizers: tuple[str, ...], words: str, cases: str, contexts: str, as_json: bool) -> None:
    """Per word and variant: text, token ids and strings, first token and its class.

    \b
    Examples:
      evalaware tokens inspect --tokenizer deepseek-r1 --tokenizer qwen3
      evalaware tokens inspect --tokenizer gpt2 --words evaluation,deployment --json
      evalaware tokens inspect --tokenizer /models/Llama-3-8B --words paper
    """
    ws = _words(words)
    cs, xs = _among("--cases", cases, CASES), _among("--contexts", contexts, CONTEXTS)
    result: dict[str, dict[str, list[dict]]] = {}
    for name in tokenizers:
        tok = load(name)
        result[name] = {w: [v.to_dict() for v in variants(tok, w, cs, xs)] for w in ws}
    if as_json:
        json.dump(result, sys.stdout, indent=1, ensure_ascii=False)
        sys.stdout.write("\n")
        return
    click.echo(render_table(result))


def _cell(v: dict) -> str:
    toks = "|".join(repr(t)[1:-1].replace(" ", "\u2423") if t is not None else "<special>"
                    for t in v["tokens"])
    extra = f" v{v['n_vocab_sharing']}/w{v['n_words_sharing']}" if v["first_class"] == "ambiguous_prefix" else ""
    return f"{toks} [{_SHORT[v['first_class']]}{extra}]"


def render_table(result: dict[str, dict[str, list[dict]]]) -> str:
    """One row per (word, case, context), one column per tokenizer. Cells: the tokens joined by
    '|' (a space shown as '␣'), then the class of the first token; for ambiguous prefixes vN/wM = N vocabulary tokens and
    M common words also start with that token."""
    names = list(result)
    rows: dict[tuple[str, str, str], dict[str, str]] = {}
    for name in names:
        for w, vs in result[name].items():
            for v in vs:
                rows.setdefault((w, v["case"], v["context"]), {})[name] = _cell(v)
    head = [_printable(h) for h in ["word", "case", "context"] + names]
    body = [[_printable(t) for t in [w, c, x] + [cells.get(n, "-") for n in names]]
            for (w, c, x), cells in rows.items()]
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    fmt = lambda r: "  ".join(s.ljust(widths[i]) for i, s in enumerate(r)).rstrip()  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in body])
