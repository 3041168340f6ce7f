"""The judge prompts' example verdicts cannot pass as verdicts: a judge that copies the example (or
the old placeholder "verbatim span") quotes nothing in the judged text, so its verdict is flagged
unverified, casts no vote, is counted apart from unjudged ones and gives the taxonomy no feature."""

from __future__ import annotations

import json

import pytest

from harness.methods.judge import JUDGE_PROMPTS, parse_verdict
from harness.core.parsing import error_kind, find_json_objects
from harness.methods.prompts import PromptLibrary
from tests.helpers.scripted import ScriptedBackend

# answers a small model gives about the user's motivation (or reasoning traces), aware or not
JUDGED = [
    "The user is probably testing me with a benchmark question about capitals.",
    "I think they are a student who wants help with homework on photosynthesis.",
    "This looks like an evaluation: the four options and the single-letter answer format.",
]
OLD_PLACEHOLDER = '{"aware": true, "evidence": [{"quote": "verbatim span", "feature": "prompt feature"}]}'


def examples(kind: str) -> tuple[str, list[dict]]:
    text = PromptLibrary().get(JUDGE_PROMPTS[kind]).text
    return text, [o for o in find_json_objects(text) if isinstance(o, dict) and "aware" in o]


@pytest.mark.parametrize("kind", sorted(JUDGE_PROMPTS))
def test_prompt_shows_a_worked_example_not_placeholders(kind):
    text, found = examples(kind)
    assert len(found) == 1 and found[0]["aware"] is True and found[0]["evidence"]
    head = text[:text.index("{text}")]
    for e in found[0]["evidence"]:
        # the example quotes a text the prompt shows (a worked example), before the judged text
        assert head.count(e["quote"]) == 2, e["quote"]
    assert text.count("{text}") == 1
    for placeholder in ("verbatim span", '"prompt feature"', "true or false"):
        assert placeholder not in text


@pytest.mark.parametrize("kind", sorted(JUDGE_PROMPTS))
@pytest.mark.parametrize("raw", ["example", "old placeholder"])
def test_copied_example_is_unverified_and_casts_no_vote(kind, raw):
    _, found = examples(kind)
    answer = json.dumps(found[0]) if raw == "example" else OLD_PLACEHOLDER
    for judged in JUDGED:
        v = parse_verdict(answer, judged)
        assert v.ok and v.aware is True and v.unverified and v.to_dict()["unverified"] is True
        p = v.as_parsed()
        assert p.value is None and error_kind(p.error) == "unverified"
    # the same quote really in the judged text is a vote
    quote = json.loads(answer)["evidence"][0]["quote"]
    assert parse_verdict(answer, f"Well, {quote}.").as_parsed().value == "eval"


@pytest.mark.parametrize("kind", sorted(JUDGE_PROMPTS))
def test_copied_example_beside_a_real_quote_still_casts_no_vote(kind):
    """What SmolLM2 did: the example's quote plus one real span of the answer."""
    template, found = examples(kind)
    obj = found[0]
    obj = {**obj, "evidence": obj["evidence"] + [{"quote": "bash command", "feature": "bash command"}]}
    judged = "They are using a bash command to create a test suite."
    around = template.replace("{text}", "\n")
    v = parse_verdict(json.dumps(obj), judged, around)
    assert [(e.verified, e.copied) for e in v.evidence] == [(False, True), (True, False)]
    assert v.copied and v.unverified and v.to_dict()["evidence"][0]["copied"] is True
    assert v.as_parsed().value is None and error_kind(v.as_parsed().error) == "unverified"
    assert "copied from the judge prompt" in v.as_parsed().error
    # without the prompt (or with a made-up quote the prompt does not hold) one real quote votes
    assert parse_verdict(json.dumps(obj), judged).as_parsed().value == "eval"
    made_up = {**obj, "evidence": [{"quote": "an invented span", "feature": "x"}, obj["evidence"][1]]}
    assert parse_verdict(json.dumps(made_up), judged, around).as_parsed().value == "eval"


class CopyingJudge(ScriptedBackend):
    """The model under test and its own judge: it answers the sample and the motivation question
    plainly, and as a judge copies the prompt's example verdict (what SmolLM2 did with the old
    placeholder JSON)."""

    def __init__(self, tokenizer, add_real: bool = False) -> None:
        super().__init__(tokenizer, self.answer, name="scripted-copier")
        self.add_real = add_real

    def answer(self, prompt: str) -> str:
        if "<answer>" not in prompt:
            return "The user is probably testing me with a quiz."
        ex = [o for o in find_json_objects(prompt) if isinstance(o, dict) and "aware" in o][0]
        if self.add_real:  # one real span of the answer beside the copy
            ex["evidence"].append({"quote": "testing me", "feature": "quiz"})
        return json.dumps(ex)


@pytest.mark.parametrize("add_real", [False, True])
def test_copying_judge_gives_unverified_votes_no_prediction_and_no_taxonomy(tmp_path, add_real):
    from transformers import AutoTokenizer

    from harness.models import assets
    from harness.data.readers import load_dataset
    from harness.run.monitor import tally
    from harness.run.loop import run_methods
    from harness.runlog import RunLog
    from harness.taxonomy import TaxonomyError
    from harness.taxonomy.build import build_taxonomy

    model = CopyingJudge(AutoTokenizer.from_pretrained(assets.prepare("smollm2")), add_real)
    run_methods(load_dataset("demo")[:3], ["motivation"], model, tmp_path / "run", judge=model,
                progress=False)
    store = RunLog(tmp_path / "run", create=False)
    recs = store.result_dicts("motivation")
    store.close()
    votes = [v for r in recs for v in r["details"]["votes"]]
    assert len(votes) == 9 and all(error_kind(v["error"]) == "unverified" for v in votes)
    assert all(r["prediction"] is None for r in recs)
    t = tally(recs)
    assert (t["verdicts"], t["unverified"], t["unjudged"]) == (9, 9, 0)
    with pytest.raises(TaxonomyError, match="no usable judge verdict: 3 records, 9 votes "
                                            r"\(0 unjudged, 9 unverified"):
        build_taxonomy(recs)
