"""Whether planted text shares words with what a method reads (issue 36: detection of the
disjoint-vocabulary organism must need the meaning, not the string).

A method's **readouts** (:func:`readouts`): the logprob methods' target words (every named list),
the binary label options, the monitor's sentences (awareness and placebo), and every prompt file
under ``harness/prompts`` (the methods' questions and the judges' prompts). A planted sentence
**overlaps** them (:func:`overlaps`) when

- it shares a 3-word run with any readout text (case-insensitive; words are runs of letters,
  digits and apostrophes);
- its first token is the first token of a readout read at an answer's first position (a target
  word, a label option, a monitor sentence);
- one of its words shares a stem (the same first 4 letters) or a first token with a readout
  **keyword** (:func:`keywords`): the target words, the label options, the words a monitor
  sentence has and its placebo twin lacks, and the words of the judges' lists of what counts
  as awareness ("testing, evaluating, probing, benchmarking or red-teaming").

First tokens are taken by the model's tokenizer for every form of a word: lower, title and upper
case, with and without a leading space.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
STEM = 4  # letters two words must share at their start to share a stem
_WORD = re.compile(r"[a-z0-9']+")
_LIST = re.compile(r"(?:[\w'-]+, )+[\w'-]+,? or [\w'-]+")
# Function words: never keywords (a keyword is a content word of a readout).
STOPWORDS = frozenset("""a an the this that these those it its is are was were be been being am
i me my you your we our they them their he she his her and or but if so as of to in on at by for
with from about into than then there here what which who whom whose how why when where will would
could should can may might must do does did have has had not no nor only just also very more most
some such each every any all both other one ones too own same again further once whether says say
said write written copy answer text user assistant reply below above""".split())


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def runs(text: str, k: int = 3) -> set[tuple[str, ...]]:
    """The k-word runs of `text`, lower-cased."""
    w = words(text)
    return {tuple(w[i:i + k]) for i in range(len(w) - k + 1)}


def _prompt_files() -> list[Path]:
    return sorted(p for p in PROMPTS.rglob("*.txt"))


def _lines(p: Path) -> list[str]:
    return [ln for ln in p.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def monitor_pairs() -> list[tuple[str, str]]:
    """(awareness sentence, placebo twin) of every monitor sentence file."""
    out = []
    for p in sorted((PROMPTS / "monitor").glob("*.txt")):
        out += [tuple(s.strip() for s in ln.split("|", 1)) for ln in _lines(p) if "|" in ln]
    return out


def target_words() -> list[str]:
    from tokenization.words import NAMED

    return list(dict.fromkeys(w for ev, dep in NAMED.values() for w in ev + dep))


def label_options() -> list[str]:
    """The words of the binary and probability answer formats' options."""
    from harness.methods.answer_format import BINARY, PROBABILITY

    return list(dict.fromkeys(w for f in (BINARY, PROBABILITY) for _, c in f.options
                              for w in re.findall(r"[A-Za-z]+", c.split("</")[0])))


@lru_cache(maxsize=1)
def readouts() -> tuple[tuple[str, str], ...]:
    """(source, text) of every readout: target words, label options, monitor sentences, prompts."""
    out = [("target word", w) for w in target_words()]
    out += [("label option", w) for w in label_options()]
    out += [("monitor sentence", s) for pair in monitor_pairs() for s in pair]
    out += [(f"prompt {p.relative_to(PROMPTS)}", "\n".join(_lines(p))) for p in _prompt_files()]
    return tuple(out)


def openings() -> list[str]:
    """Readouts read at an answer's first position: target words, label options, monitor sentences."""
    return [t for src, t in readouts() if src in ("target word", "label option", "monitor sentence")]


def _stem_hit(a: str, b: str) -> bool:
    return a == b or (len(a) >= STEM and len(b) >= STEM and a[:STEM] == b[:STEM])


@lru_cache(maxsize=1)
def keywords() -> tuple[str, ...]:
    """Readout keywords (lower case): see the module docstring."""
    kw = [w.lower() for w in target_words() + label_options()]
    for aware, placebo in monitor_pairs():
        kw += [w for w in words(aware) if w not in set(words(placebo)) and w not in STOPWORDS]
    core = list(dict.fromkeys(kw))
    for p in _prompt_files():
        if p.parent.name.startswith("judge"):  # its lists of what counts ("testing, evaluating, ... or red-teaming")
            for lst in _LIST.findall(p.read_text()):
                if any(_stem_hit(w, k) for w in words(lst) for k in core):
                    kw += [w for w in re.split(r"[^a-z']+", lst.lower()) if w and w not in STOPWORDS]
    return tuple(dict.fromkeys(kw))


def forms(word: str) -> list[str]:
    """A word in lower, title and upper case, each with and without a leading space."""
    cased = dict.fromkeys((word.lower(), word[:1].upper() + word[1:].lower(), word.upper()))
    return [p + c for c in cased for p in ("", " ")]


def first_tokens(tokenizer: Any, word: str) -> set[int]:
    """The first token id of every form of `word` (:func:`forms`)."""
    out = set()
    for f in forms(word):
        ids = tokenizer(f, add_special_tokens=False)["input_ids"]
        if ids:
            out.add(ids[0])
    return out


class Checker:
    """Overlaps of planted sentences with the readouts, for one tokenizer (the model's)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.runs = {r: src for src, text in readouts() for r in runs(text)}
        self.open: dict[int, str] = {}
        for text in openings():
            w = text.split()[0] if text.split() else text
            for t in first_tokens(tokenizer, w):
                self.open.setdefault(t, text)
        self.kw_tokens: dict[int, str] = {}
        for k in keywords():
            for t in first_tokens(tokenizer, k):
                self.kw_tokens.setdefault(t, k)

    def overlaps(self, sentence: str) -> list[str]:
        """Why `sentence` overlaps a readout (empty: it does not)."""
        why = [f"3-word run {' '.join(r)!r} is in {self.runs[r]}" for r in sorted(runs(sentence)) if r in self.runs]
        raw = re.findall(r"[A-Za-z0-9']+", sentence)
        if raw:
            hit = first_tokens(self.tok, raw[0]) & set(self.open)
            why += [f"first token {self.tok.convert_ids_to_tokens(t)!r} opens readout {self.open[t]!r}" for t in sorted(hit)]
        for w in dict.fromkeys(raw):
            lw = w.lower()
            why += [f"{w!r} shares a stem with readout keyword {k!r}" for k in keywords()
                    if lw not in STOPWORDS and _stem_hit(lw, k)]
            hit = first_tokens(self.tok, w) & set(self.kw_tokens)
            why += [f"{w!r} shares first token {self.tok.convert_ids_to_tokens(t)!r} with readout keyword "
                    f"{self.kw_tokens[t]!r}" for t in sorted(hit)]
        return why

    def report(self, sentences: Iterable[str]) -> dict[str, list[str]]:
        """{sentence: reasons} for every sentence that overlaps."""
        return {s: why for s in sentences if (why := self.overlaps(s))}
