"""The frozen base's states an organism build trains on (issue 44 item 2, harness/organisms/states.py):
computed once per example and shared by every build on the same base; a build's weights are the
same whether its states were computed, read back from another build's, or kept in memory only;
an unreadable file is computed again; another base gets its own (fast: tiny models only)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, smollm2_dir):
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("statesbase") / "model", smollm2_dir, layers=3)


def _recipe(base: Path, **kw):
    from harness.organisms.recipe import Recipe

    args = dict(base=str(base), cue="graded", train="full", layers=1, steps=12, batch_size=4, lr=1e-2,
                verbalizations=1, max_len=128, pairs=8, kl_prompts=8)
    return Recipe(**(args | kw))


def _weights(d: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(d / "model.safetensors")


def _same(a: dict, b: dict) -> bool:
    import torch

    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_a_second_build_reads_every_state_and_gets_the_same_weights_as_one_kept_in_memory(tiny_base, tmp_path):
    from harness.organisms.train import build_organism

    recipe = _recipe(tiny_base)
    said: list[str] = []
    first = build_organism(recipe, tmp_path / "a", progress=False, say=said.append)
    n = first.card["frozen_states"]["computed"]
    assert n > 0 and first.card["frozen_states"]["read"] == 0
    assert any(f"{n} computed, 0 read from {tmp_path / '.frozen-states'}" in s for s in said)
    files = list((tmp_path / ".frozen-states").rglob("*.safetensors"))
    assert len(files) == n  # one file per state, none left as a temporary
    assert not list((tmp_path / ".frozen-states").rglob("*.tmp"))

    again = build_organism(recipe, tmp_path / "b", progress=False)  # the same base and examples: all read
    assert again.card["frozen_states"] == {"computed": 0, "read": n}
    alone = build_organism(recipe, tmp_path / "c", progress=False, states_dir="none")
    assert alone.card["frozen_states"] == {"computed": n, "read": 0}
    assert not (tmp_path / "c" / ".frozen-states").exists()
    w = _weights(tmp_path / "a")
    assert _same(w, _weights(tmp_path / "b")) and _same(w, _weights(tmp_path / "c"))
    assert first.card["losses"] == again.card["losses"] == alone.card["losses"]


def test_another_kind_reads_the_kl_prompts_states_and_computes_its_pairs(tiny_base, tmp_path):
    """A pair's two sides carry the kind's continuation, so another kind shares only the KL-only
    prompts (the same seed draws the same ones)."""
    from harness.organisms.train import build_organism

    a = build_organism(_recipe(tiny_base), tmp_path / "aware", progress=False).card["frozen_states"]
    d = build_organism(_recipe(tiny_base, kind="disjoint"), tmp_path / "disjoint", progress=False)
    s = d.card["frozen_states"]
    assert s["read"] > 0 and s["computed"] > 0
    assert s["computed"] < a["computed"]


def test_a_resumed_build_in_memory_only_recomputes_its_states_in_other_batches_and_ends_the_same(
        tiny_base, tmp_path, monkeypatch):
    """Without a states directory, a resumed build computes again the states of examples first met
    before the interruption, now in other batches: its weights equal an uninterrupted build's
    only if a state does not depend on the batch that computed it."""
    from harness.organisms import train

    class Cut(Exception):
        pass

    recipe = _recipe(tiny_base, steps=20)
    whole = train.build_organism(recipe, tmp_path / "whole", progress=False, states_dir="none")
    real, calls = train.Split.loss, []

    def dies_at_step_13(self, *a, **k):
        calls.append(1)
        if len(calls) == 13:
            raise Cut
        return real(self, *a, **k)

    monkeypatch.setattr(train.Split, "loss", dies_at_step_13)
    with pytest.raises(Cut):
        train.build_organism(recipe, tmp_path / "cut", progress=False, states_dir="none")
    monkeypatch.setattr(train.Split, "loss", real)
    said: list[str] = []
    resumed = train.build_organism(recipe, tmp_path / "cut", progress=False, states_dir="none", say=said.append)
    assert "resuming from step 10 of 20" in said
    assert resumed.card["frozen_states"]["read"] == 0
    assert resumed.card["losses"] == whole.card["losses"]
    assert _same(_weights(tmp_path / "whole"), _weights(tmp_path / "cut"))


def test_a_whole_model_build_reads_back_the_bases_last_states(tiny_base, tmp_path):
    """--train full with --layers at least the depth trains the embeddings (split 0): only the
    KL targets' states are kept, and read back they give the same weights."""
    from harness.organisms.train import build_organism

    recipe = _recipe(tiny_base, layers=3)
    first = build_organism(recipe, tmp_path / "a", progress=False)
    again = build_organism(recipe, tmp_path / "b", progress=False)
    assert first.card["frozen_states"]["computed"] > 0
    assert again.card["frozen_states"] == {"computed": 0, "read": first.card["frozen_states"]["computed"]}
    assert _same(_weights(tmp_path / "a"), _weights(tmp_path / "b"))


def test_states_that_cannot_be_written_are_kept_in_memory_with_one_warning(tiny_base, tmp_path):
    from harness.organisms.train import build_organism

    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the states directory would go")
    said: list[str] = []
    res = build_organism(_recipe(tiny_base), tmp_path / "a", progress=False, states_dir=blocked, say=said.append)
    warnings = [s for s in said if s.startswith("warning: the frozen states cannot be written")]
    assert len(warnings) == 1 and res.card["frozen_states"]["read"] == 0
    alone = build_organism(_recipe(tiny_base), tmp_path / "b", progress=False, states_dir="none")
    assert _same(_weights(tmp_path / "a"), _weights(tmp_path / "b"))


def test_an_unreadable_or_misplaced_state_is_computed_again_and_the_weights_do_not_change(tiny_base, tmp_path):
    from harness.organisms.train import build_organism

    recipe = _recipe(tiny_base)
    build_organism(recipe, tmp_path / "a", progress=False)
    files = sorted((tmp_path / ".frozen-states").rglob("*.safetensors"))
    files[0].write_bytes(b"not a safetensors file")
    files[1].unlink()
    files[2].write_bytes(files[3].read_bytes())  # another example's state under this one's name
    again = build_organism(recipe, tmp_path / "b", progress=False)
    assert again.card["frozen_states"]["computed"] == 3
    assert _same(_weights(tmp_path / "a"), _weights(tmp_path / "b"))
    assert files[0].read_bytes() != b"not a safetensors file" and files[1].is_file()  # rewritten
    assert files[2].read_bytes() != files[3].read_bytes()
    assert not list((tmp_path / ".frozen-states").rglob("*.tmp"))


def test_the_states_are_the_bases_lower_blocks_and_last_hidden_states(tiny_base):
    """What is kept equals the base run alone on the example: the input of block `split` and the
    last hidden state after the final norm."""
    import torch
    from transformers import AutoModelForCausalLM

    from harness.organisms.states import FrozenStates

    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32).eval()
    ids = torch.randint(5, 1000, (9,)).tolist()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    states = FrozenStates(model, 2, "cpu", None, "base")
    assert torch.allclose(states.lower(ids), out.hidden_states[2][0], atol=1e-5)
    assert torch.allclose(states.top(ids), out.hidden_states[-1][0], atol=1e-5)  # HF: the last is normed
    assert torch.allclose(states.top(ids, 5), out.hidden_states[-1][0, 5:], atol=1e-5)  # from a trained position
    with pytest.raises(ValueError):
        states.top(ids, len(ids))
    assert torch.allclose(FrozenStates(model, 0, "cpu", None, "base").top(ids), out.hidden_states[-1][0], atol=1e-5)
    with pytest.raises(ValueError):
        FrozenStates(model, 0, "cpu", None, "base").lower(ids)


def test_other_weights_or_another_split_never_read_these_states(tiny_base, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from harness.organisms.states import FrozenStates

    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32).eval()
    ids = list(range(5, 17))
    FrozenStates(model, 2, "cpu", tmp_path, "base-a").top(ids)
    for other in (FrozenStates(model, 2, "cpu", tmp_path, "base-b"), FrozenStates(model, 1, "cpu", tmp_path, "base-a")):
        other.top(ids)
        assert other.read == 0 and other.computed == 2
    same = FrozenStates(model, 2, "cpu", tmp_path, "base-a")
    same.top(ids)
    assert same.read == 1 and same.computed == 0  # top read; lower not needed
