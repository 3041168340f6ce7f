"""The cue detectors: which surface cues a prompt shows, and where in its text.

One set, read by `evalaware data audit` (an indicator per cue, :func:`cue_present`) and by
`evalaware cues` (each built-in factor's detector and the spans its removal may delete,
``harness/cues/factors.py``), so the two never disagree on a prompt. A detector is a function of
one message's text; :data:`DETECTORS` names each one, what it looks for and whose messages it
reads (the user turns, or the system message).

Sentences end at ``.`` ``!`` ``?`` (closing quotes and brackets included) before whitespace or
the end, and at line ends (:func:`sentences`). A sentence-level cue (a grading mention, an
answer-format instruction) is found as a :class:`Mention`: its sentence, or, where the cue
follows the task without punctuation ("... the 4-week average This will be graded."), the
sentence's closing part from the capitalised word where the cue starts. A mention is *clean*
when every word of it is one of the cue's own words (its lexicon, below); an unclean one ("what
should i check first your answer will be graded": the cue shares its sentence with the task) is
detected all the same, but no removal deletes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

from harness.core.sample import Message

# --- sentences and mentions ----------------------------------------------------------------------

_END = re.compile(r"[.!?]+[\"'\u2019\u201d)\]]*(?=\s|\Z)|\n")
_CAPITAL = re.compile(r"(?<=\s)[A-Z]")  # where a run-on's next sentence may start
_WORD = re.compile(r"[^\W_]")


def sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence, leading and trailing whitespace excluded."""
    spans, start = [], 0
    for m in _END.finditer(text):
        end = m.start() if m.group() == "\n" else m.end()
        spans.append((start, end))
        start = m.end()
    spans.append((start, len(text)))
    out = []
    for s, e in spans:
        seg = text[s:e]
        if seg.strip():
            out.append((s + len(seg) - len(seg.lstrip()), s + len(seg.rstrip())))
    return out


class Mention(NamedTuple):
    """Where a sentence-level cue is: [start, end) of its text; `clean`: every word of it is the
    cue's own (deleting it deletes nothing else)."""

    start: int
    end: int
    clean: bool


def only_lexicon(span: str, lexicon: re.Pattern[str]) -> bool:
    """True when no word of `span` is left once the `lexicon`'s matches are taken out."""
    return not _WORD.search(lexicon.sub(" ", span))


def mentions(text: str, match: Callable[[str], bool], lexicon: re.Pattern[str]) -> list[Mention]:
    """The mentions of a sentence-level cue: each sentence `match` accepts, or its shortest
    closing part from a capitalised word that `match` still accepts where the whole sentence
    holds words outside the `lexicon` (a cue run on after an unpunctuated task)."""
    out = []
    for s, e in sentences(text):
        seg = text[s:e]
        if not match(seg):
            continue
        if only_lexicon(seg, lexicon):
            out.append(Mention(s, e, True))
            continue
        tail = next((c.start() for c in reversed(list(_CAPITAL.finditer(seg))) if match(seg[c.start():])), 0)
        out.append(Mention(s + tail, e, only_lexicon(seg[tail:], lexicon)))
    return out


def _any_sentence(match: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda text: any(match(text[s:e]) for s, e in sentences(text))


# --- "Answer:" at the end --------------------------------------------------------------------------

_ANSWER_TAIL = re.compile(r"(?:\n[ \t]*|[ \t]+|^)(?:Answer|A|Final answer)[ \t]*:[ \t]*\Z")


def split_tail(text: str) -> tuple[str, str]:
    """(body, tail): a trailing ``Answer:`` prefix (with its separator) kept apart (``A:`` only
    on a line of its own, or alone)."""
    m = _ANSWER_TAIL.search(text)
    if not m or (m.group().strip().startswith("A:") and "\n" not in m.group() and m.start() > 0):
        return text, ""
    return text[:m.start()], text[m.start():]


def has_answer_prefix(text: str) -> bool:
    return bool(split_tail(text)[1])


# --- lettered answer options --------------------------------------------------------------------

_OPT_LINE = re.compile(r"^[ \t]*\(?([A-Ha-h])[).:][ \t]+\S.*$")
INLINE_OPTIONS = re.compile(r"[ \t]*\(A\)[ \t]*[^()\n.?!]+?[ \t]*\(B\)[^()\n.?!]*(?:\([C-H]\)[^()\n.?!]*)*")


def option_runs(lines: list[str]) -> list[tuple[int, int]]:
    """[first, last] line indices of each run of >= 2 consecutive lines lettered A, B, C, ..."""
    runs, i = [], 0
    while i < len(lines):
        m = _OPT_LINE.match(lines[i])
        if m and m.group(1).upper() == "A":
            j = i
            while j + 1 < len(lines) and (n := _OPT_LINE.match(lines[j + 1])) and \
                    n.group(1).upper() == chr(ord("A") + j + 1 - i):
                j += 1
            if j > i:
                runs.append((i, j))
                i = j + 1
                continue
        i += 1
    return runs


def has_options(text: str) -> bool:
    return bool(option_runs(text.split("\n"))) or bool(INLINE_OPTIONS.search(text))


# --- an answer-format instruction --------------------------------------------------------------------

FORMAT = re.compile(
    r"\b(answer|respond|reply|write|give|output|state|return|pick)\b[^.!?\n]{0,40}?"
    r"\b(only|just|solely|nothing else|alone|single (letter|word|number)|one (letter|word|number))\b"
    r"|\b(only|just)\b[^.!?\n]{0,12}\bthe (letter|number|final answer|option letter)\b"
    r"|\b(your|the) (final )?answer (should|must) be (a |one |only |just )?(single )?(letter|word|number)\b"
    r"|\b(final answer|answer) in \\boxed|\bput your final answer\b|\bin the (format|form)\b[^.!?\n]*[:=<]"
    r"|\bformat your (answer|response)\b|\bfinish with a line\b|\blast line of your (answer|response)\b"
    r"|\b(final answer|the letter|the number) only\b", re.I)
# The words an answer-format instruction is made of; a sentence with any other word holds more.
FORMAT_LEXICON = re.compile(
    r"\b(?:answers?|answering|respond|reply|write|give|output|state|return|pick|put|finish|provide|format"
    r"|with|only|just|solely|nothing else|nothing more|alone|single|one|letters?|words?|numbers?|digits?"
    r"|final|the|a|an|your|of|in|and|it|correct|best|options?|choices?|please|as|form|line|last|boxed"
    r"|should|must|be|is|no explanations?|without explanations?|yes or no|following|responses?)\b", re.I)


def is_format_instruction(sentence: str) -> bool:
    return bool(FORMAT.search(sentence))


has_answer_format = _any_sentence(is_format_instruction)

# --- a grading or scoring mention ---------------------------------------------------------------------

_GRADE_RX = re.compile(r"\bgrad(ed|es|ing|ers?)\b|\b(a|the|your|my) grade\b(?![ \t]*\d)"
                       r"|\bgrade (your|the|this|these|every|each|what|all)\b|\bscor(e|ed|es|ing)\b"
                       r"|\bmarked\b|\brubric\b|\bexaminer\b|\bpoints (will be|are) (awarded|given)\b"
                       r"|\baward(ed)? points\b", re.I)
_OBJECT_RX = re.compile(r"\b(answers?|responses?|repl(y|ies)|outputs?|submissions?|what you write|you write"
                        r"|this (will|is going to|gets|is being)|everything you|your work)\b", re.I)
_GRADERS = re.compile(r"\bgraders?\b.{0,40}\b(score|grade|mark)|\bpoints will be awarded\b", re.I)
# The words a grading mention is made of (the organism's 24 phrasings among them).
GRADING_LEXICON = re.compile(
    r"\b(?:what you write|whatever you write|everything you write|so do your best|do your best"
    r"|be aware that|know that|heads up|note|fyi|please|out of \d+|based on|counts? towards?|you give"
    r"|to this (?:question|response|answer)|going to|to be|expect|i['\u2019]m|i|we|it|you"
    r"|your|this|the|a|an|my|our|each|every|all|here"
    r"|answers?|responses?|repl(?:y|ies)|outputs?|submissions?|work"
    r"|will|is|are|be|been|being|gets?|grad(?:e|es|ed|ing|ers?)|scor(?:e|es|ed|ing)|marked|rubric"
    r"|examiner|points?|awarded|award|assign(?:s|ed)?|receive(?:s|d)?|given|for|on|by|against|and"
    r"|afterwards|later|accuracy|correctness|strictly|carefully)\b", re.I)


def is_grading(sentence: str) -> bool:
    """A grading term and what it grades (the answer, the response, ...), or graders scoring."""
    return bool(_GRADE_RX.search(sentence) and _OBJECT_RX.search(sentence)) or bool(_GRADERS.search(sentence))


has_grading = _any_sentence(is_grading)

# --- placeholder identities ---------------------------------------------------------------------------

# (placeholder pattern, its realistic stand-in, the placeholder that stands for the stand-in or
# None). An abbreviation's full stop belongs to it only inside a sentence (", " or a lower-case
# word next), so a sentence's own full stop is never part of a placeholder.
_STOP = r"(?:\.(?=[,;:]|[ \t]+[a-z]))?"
PLACEHOLDERS: tuple[tuple[str, str, str | None], ...] = (
    (r"\bexample\.(?:com|org|net)\b", "harbourline.io", "example.com"),
    (r"\bJohn Doe\b", "Martin Keller", "John Doe"), (r"\bJane Doe\b", "Ines Alvarez", "Jane Doe"),
    (r"\bJohn Smith\b", "Tomas Berglund", "John Smith"), (r"\bJane Smith\b", "Ruth Okonkwo", "Jane Smith"),
    (r"\bAcme(?: (?:Corp(?:oration)?|Industries)\b| (?:Inc|Co|Ltd)\b" + _STOP + r")?(?=\W|$)",
     "Dunmore Freight", "Acme Corp"),
    (r"\bFoo(?:bar)? (?:Inc|Corp|Ltd)\b" + _STOP, "Dunmore Freight", None),
    (r"\b123 Main St(?:reet\b|\b" + _STOP + ")", "48 Larkfield Road", "123 Main St"),
    (r"\b555-\d{4}\b", "214-8830", "555-0100"),
)
PLACEHOLDER_RX: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), r) for p, r, _ in PLACEHOLDERS)
STAND_IN_RX: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(r"\b" + re.escape(r) + r"\b"), p) for _, r, p in PLACEHOLDERS if p is not None)


def has_placeholder(text: str) -> bool:
    return any(rx.search(text) for rx, _ in PLACEHOLDER_RX)


# --- a system prompt that introduces an assistant ------------------------------------------------------

_INTRO = re.compile(r"^(you are|you're|you act as|act as)\b|\byou(?: are|'re)\b[^.!?\n]{0,80}?\b(assistant|AI|"
                    r"chatbot|language model|agent|ChatGPT|Claude|bot)\b", re.I)


def is_introduction(sentence: str) -> bool:
    return bool(_INTRO.search(sentence))


introduces = _any_sentence(is_introduction)

# --- benchmark-style numbering and headers -------------------------------------------------------------

HEADER = re.compile(
    r"^(?P<indent>[ \t]*)(?:#{1,6}[ \t]*)?(?:(?:Question|Problem|Exercise|Item|Task|Q)[ \t]*#?\d+[ \t]*"
    r"(?:[:.)]|(?=\n|$))|(?:Question|Problem|Q)[ \t]*:)[ \t]*", re.M)


def has_header(text: str) -> bool:
    return bool(HEADER.search(text))


# --- LaTeX / markdown formatting ----------------------------------------------------------------------

MATH = r"\$(?=[^\s$])[^$\n]*?(?<=[^\s\\])\$(?!\d)"  # pandoc's rule: not "$3 and $4"
_LATEX = re.compile(MATH + r"|\\\(|\\\[|\\[a-zA-Z]+\{|\\(frac|sqrt|times|cdot|alpha|beta|pi|sum|int|le|"
                    r"ge|neq|infty|boxed|text|mathrm|mathbf|left|right)\b")
_MARKDOWN = re.compile(r"^#{1,6}[ \t]+\S|\*\*[^*\n]+\*\*|__[^_\n]+__|^```|`[^`\n]+`", re.M)


def has_formatting(text: str) -> bool:
    return bool(_LATEX.search(text) or _MARKDOWN.search(text))


# --- a choice directive (the audit's; no factor: removing it would delete the question) ---------------

_CHOOSE = re.compile(r"\b(?:choose|select|pick|which of the following)\b", re.I)


def has_choose_directive(text: str) -> bool:
    return bool(_CHOOSE.search(text))


# --- the registry -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Detector:
    """One cue: `test` on one message's text; `role`: whose messages it reads."""

    name: str
    description: str
    test: Callable[[str], bool]
    role: str = "user"


DETECTORS: dict[str, Detector] = {d.name: d for d in (
    Detector("lettered_options", ">= 2 consecutive lines lettered A, B, ... (A) / (A) / A.), or inline "
             "(A) ... (B) ...", has_options),
    Detector("answer_format", "an instruction on the answer's format ('Answer with the letter only', "
             "'respond with only ...', 'put your final answer in \\boxed{}')", has_answer_format),
    Detector("answer_prefix", "the prompt ends with an answer cue ('Answer:', 'Final answer:', 'A:' on its "
             "own line)", has_answer_prefix),
    Detector("grading", "a sentence saying the answer will be graded or scored", has_grading),
    Detector("placeholders", "placeholder identities (example.com, John Doe, Acme Corp, 123 Main St, 555- "
             "numbers)", has_placeholder),
    Detector("system_prompt", "a system message with a sentence introducing the assistant ('You are ...')",
             introduces, role="system"),
    Detector("benchmark_header", "benchmark-style numbering or headers ('Question 12:', 'Q:', '### Problem 3')",
             has_header),
    Detector("formatting", "LaTeX or markdown formatting ($x$, \\frac, **bold**, # headings, `code`)",
             has_formatting),
    Detector("choose_directive", "'choose', 'select', 'pick' or 'which of the following'", has_choose_directive),
)}


def cue_present(name: str, messages: Sequence[Message]) -> bool:
    """Whether any of `messages` of the detector's role shows cue `name`."""
    d = DETECTORS[name]
    return any(d.test(m.content) for m in messages if m.role == d.role and m.content is not None)
