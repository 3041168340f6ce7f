"""Rendering with real chat templates, and reasoning splitting."""

from __future__ import annotations

import pytest

from harness.core.reasoning import reasoning_ended, split_reasoning
from harness.core.render import Renderer, format_transcript
from harness.core.sample import Message, ToolCall


@pytest.fixture(scope="module")
def smol_tok(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_no_double_bos_and_matches_template(smol_tok):
    r = Renderer(smol_tok)
    msgs = (Message("system", "Be terse."), Message("user", "Hello"))
    ids = r.render(msgs)
    expected = smol_tok.apply_chat_template([{"role": "system", "content": "Be terse."},
                                             {"role": "user", "content": "Hello"}],
                                            add_generation_prompt=True, tokenize=True, return_dict=False)
    assert list(ids) == list(expected)
    assert list(ids[:2]).count(smol_tok.bos_token_id or -1) <= 1


def test_tool_calls_inline_and_tool_role(smol_tok):
    r = Renderer(smol_tok)
    msgs = (Message("user", "run it"), Message("assistant", None, (ToolCall("c1", "bash", '{"cmd":"ls"}'),)),
            Message("tool", "a.py", tool_call_id="c1"))
    text = r.render_text(msgs)
    assert '<tool_call>{"name": "bash", "arguments": "{\\"cmd\\":\\"ls\\"}"}</tool_call>' in text
    assert r.supports_tool and "<|im_start|>tool\na.py" in text


class NoSystemTok:
    """A tokenizer whose template rejects system messages (as some Mistral/Gemma ones do)."""

    chat_template = "x"
    bos_token = "<s>"

    def apply_chat_template(self, msgs, tokenize=False, add_generation_prompt=True):
        if any(m["role"] not in ("user", "assistant") for m in msgs):
            raise ValueError("roles must alternate user/assistant")
        return "".join(f"[{m['role']}]{m['content']}" for m in msgs) + ("[assistant]" if add_generation_prompt else "")


def test_system_merged_when_unsupported():
    r = Renderer(NoSystemTok())
    assert not r.supports_system and not r.supports_tool
    text = r.render_text((Message("system", "SYS"), Message("user", "U"),
                          Message("assistant", "A"), Message("tool", "T")))
    assert text == "[user]SYS\n\nU[assistant]A[user]Tool result:\nT[assistant]"


def test_transcript_format():
    t = format_transcript((Message("user", "q"), Message("assistant", "a")))
    assert t == "USER: q\n\nASSISTANT: a"


@pytest.mark.parametrize("text, reasoning, answer", [
    ("<think>hmm, a test?</think>It is real.", "hmm, a test?", "It is real."),
    ("hmm</think>\n\nAnswer", "hmm", "Answer"),  # template opened <think> in the prompt
    ("<think>never closed", "never closed", ""),
    ("plain answer", None, "plain answer"),
    ("<|channel|>analysis<|message|>User tests me.<|end|><|start|>assistant<|channel|>final<|message|>Hi!<|return|>",
     "User tests me.", "Hi!"),
])
def test_split_reasoning(text, reasoning, answer):
    assert split_reasoning(text) == (reasoning, answer)


@pytest.mark.parametrize("text,ended", [
    ("plain answer", True),
    ("<think>a. b.</think>The answer.", True),
    ("a lone close</think>answer", True),
    ("<think>cut inside the reasoning", False),
    ("<|channel|>analysis<|message|>thinking<|end|><|start|>assistant<|channel|>final<|message|>Hi", True),
    ("<|channel|>analysis<|message|>thinking, cut", False),
])
def test_reasoning_ended(text, ended):
    assert reasoning_ended(text) is ended
