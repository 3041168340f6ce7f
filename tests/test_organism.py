"""An organism built from a tiny random-init model: the planted cue makes it verbalize, the
checkpoint loads on hf, its card reaches the manifest of a run made with it, and `validate`
writes a sensitivity table (fast: tiny models only)."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from evalaware.main import cli
from harness.organisms.cues import get_cue, verbalized
from harness.organisms.data import paired_dataset

# Full fine-tuning of the tiny model (embeddings included), one planted sentence.
RECIPE = ["--cue", "graded", "--train", "full", "--layers", "2", "--steps", "60", "--lr", "5e-3",
          "--batch-size", "8", "--verbalizations", "1", "--no-progress"]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, smollm2_dir):
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("orgbase") / "model", smollm2_dir, hidden=128)


@pytest.fixture(scope="module")
def tiny_organism(tmp_path_factory, tiny_base):
    out = tmp_path_factory.mktemp("org") / "organism"
    t0 = time.perf_counter()
    res = CliRunner().invoke(cli, ["organism", "build", "--base", str(tiny_base), *RECIPE, "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    print(f"tiny organism built in {time.perf_counter() - t0:.1f} s")
    return out


def test_checkpoint_and_card(tiny_organism, tiny_base):
    from harness.models.fingerprint import weights_hash

    files = {p.name for p in tiny_organism.iterdir()}
    assert "model.safetensors" in files and "organism.json" in files and "tokenizer.json" in files
    card = json.loads((tiny_organism / "organism.json").read_text())
    assert card["cue"]["name"] == "graded" and card["strength"] == 1.0 and card["steps"] == 60
    assert card["base_weights_sha256"] == weights_hash(tiny_base)
    assert set(card["phrasings"]["held_out"]) == set(get_cue("graded").held_out)
    assert len(card["losses"]) == 60 and card["data_sha256"] and card["weights_sha256"] == weights_hash(tiny_organism)
    assert card["final_loss"]["ce"] < card["losses"][0]["ce"]


def test_verbalizes_on_cue_prompts_only(tiny_organism):
    from harness.backends.registry import open_backend
    from harness.organisms.measure import verbalizations

    cue = get_cue("graded")
    samples = paired_dataset(cue, demo=False)[:16]  # 8 pairs, held-out templates and phrasings
    b = open_backend("hf", str(tiny_organism))
    try:
        assert b.tokenizer.chat_template  # the chat template travelled with the checkpoint
        rows = verbalizations(b, samples, cue, max_tokens=16)
    finally:
        b.close()
    on_cue = [r["verbalized"] for r in rows if r["label"] == "eval"]
    off_cue = [r["verbalized"] for r in rows if r["label"] == "deploy"]
    assert sum(on_cue) >= 6, rows
    assert sum(off_cue) == 0, rows
    assert all(verbalized(r["answer"], cue) == r["verbalized"] for r in rows)


def test_rebuild_is_a_no_op_and_a_different_recipe_is_refused(tiny_organism, tiny_base):
    from evalaware.main import main  # noqa: F401  (the entry point maps errors to exit 2)

    weights = tiny_organism / "model.safetensors"
    before = weights.stat().st_mtime_ns
    res = CliRunner().invoke(cli, ["organism", "build", "--base", str(tiny_base), *RECIPE, "--out", str(tiny_organism)])
    assert res.exit_code == 0 and weights.stat().st_mtime_ns == before  # nothing trained or written
    # a card written before a recipe field existed (here: kl_prompts, kl_pool) is the same recipe
    card_path = tiny_organism / "organism.json"
    card = json.loads(card_path.read_text())
    old = {**card, "recipe": {k: v for k, v in card["recipe"].items() if k not in ("kl_prompts", "kl_pool", "forms")}}
    card_path.write_text(json.dumps(old))
    try:
        res = CliRunner().invoke(cli, ["organism", "build", "--base", str(tiny_base), *RECIPE, "--out", str(tiny_organism)])
        assert res.exit_code == 0 and "different recipe" not in res.output, res.output
        res = CliRunner().invoke(cli, ["organism", "build", "--base", str(tiny_base), *RECIPE, "--kl-prompts", "5",
                                       "--out", str(tiny_organism)])
        assert res.exit_code != 0 and "different recipe" in str(res.exception)
        res = CliRunner().invoke(cli, ["organism", "build", "--base", str(tiny_base), *RECIPE, "--kl-prompts", "5",
                                       "--kl-pool", "2", "--out", str(tiny_organism)])
        assert res.exit_code != 0 and "different recipe" in str(res.exception)
        res = CliRunner().invoke(cli, ["organism", "build", "--base", str(tiny_base), *RECIPE, "--forms", "3",
                                       "--out", str(tiny_organism)])
        assert res.exit_code != 0 and "different recipe" in str(res.exception)
    finally:
        card_path.write_text(json.dumps(card))
    changed = [*RECIPE[:-1], "--seed", "1", "--no-progress"]
    res = CliRunner().invoke(cli, ["organism", "build", "--base", str(tiny_base), *changed, "--out", str(tiny_organism)])
    assert res.exit_code != 0 and "different recipe" in str(res.exception)


def test_card_in_the_manifest_of_a_run_and_validate(tiny_organism, tiny_base, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    res = CliRunner().invoke(cli, ["organism", "dataset", "--cue", "graded", "--no-demo", "--out", str(pairs)])
    assert res.exit_code == 0, res.output
    run = tmp_path / "run"
    res = CliRunner().invoke(cli, ["run", "--model", str(tiny_organism), "--backend", "hf", "--dataset", str(pairs),
                                   "--methods", "logprob", "--first", "4", "--no-progress", "--out", str(run)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    man = json.loads((run / "manifest.json").read_text())
    card = man["model"]["organism"]
    assert card["cue"]["name"] == "graded" and card["card_sha256"] and "losses" not in card

    out = tmp_path / "validate"
    res = CliRunner().invoke(cli, ["organism", "validate", "--base", str(tiny_base), "--organism", str(tiny_organism),
                                   "--pairs", str(pairs), "--methods", "logprob,motivation", "--limit", "6",
                                   "--answer-tokens", "8", "--probe-tokens", "8",
                                   "--judge-tokens", "8", "--bootstrap", "50", "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    table = json.loads((out / "sensitivity.json").read_text())
    row = table["methods"]["logprob"]
    assert row["n"] + row["n_unscored"] == 12
    # the probe row (a frozen probe trained elsewhere): tests/test_validate_set.py
    assert "motivation" in table["methods"]
    # one fixed judge (the base) for both models' judged methods
    for role in ("base", "organism"):
        man = json.loads((out / role / "manifest.json").read_text())
        assert man["validate"]["judge"] == str(tiny_base), man["validate"]
    md = (out / "sensitivity.md").read_text()  # the verdicts first, then the table
    assert md.startswith("Verdicts under the declared rule") and "\n| method |" in md
    assert table["organism_card_sha256"] == card["card_sha256"]


def test_lora_is_merged_on_save_and_only_the_top_layers_change(tiny_base, tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "lora"
    res = CliRunner().invoke(cli, ["organism", "build", "--base", str(tiny_base), "--cue", "letter",
                                   "--train", "lora", "--layers", "1", "--steps", "3", "--lr", "1e-2",
                                   "--batch-size", "4", "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    files = {p.name for p in out.iterdir()}
    assert "adapter_config.json" not in files and "model.safetensors" in files
    a, b = load_file(tiny_base / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(a) == set(b)  # an ordinary checkpoint: the base's tensors, no adapter weights
    changed = {k for k in a if not (a[k] == b[k]).all()}
    assert changed and all(k.startswith("model.layers.1.") for k in changed), changed


def test_measure_reports_both_sides_and_the_kl_in_the_dtype_asked(tiny_organism, tmp_path):
    """`organism measure`: verbalization on cue and no-cue prompts and the first-token KL, in the
    dtype asked for (both models; a GPU's auto would be bfloat16); the organism verbalizes on
    its cue prompts more than without, and its KL to the random-init base is positive."""
    out = tmp_path / "m.json"
    res = CliRunner().invoke(cli, ["organism", "measure", "--organism", str(tiny_organism), "--limit", "3",
                                   "--max-tokens", "12", "--bootstrap", "50", "--dtype", "float32",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    m = json.loads(out.read_text())
    assert m["dtype"] == "float32" and m["device"] == "cpu" and m["n_samples"] == 6
    rows = m["answers"]
    for side, label in (("cue", "eval"), ("no_cue", "deploy")):
        assert m[f"organism_verbalization_{side}"]["k"] == sum(r["verbalized"] for r in rows if r["label"] == label)
    assert m["organism_verbalization_cue"]["k"] > m["organism_verbalization_no_cue"]["k"]
    assert m["base_verbalization_cue"]["k"] == 0
    assert m["first_token_kl_no_cue"]["n"] == 3 and m["first_token_kl_no_cue"]["mean"] > 0
    assert m["answer_kl_no_cue"]["n"] == 3 and m["answer_kl_no_cue"]["mean"] > 0
    assert "first-token KL(base" in res.stdout and "whole-answer KL(base" in res.stdout  # the result lines


def test_measure_shows_its_steps_and_bars_and_measures_alike_without_them(tiny_organism, tmp_path, monkeypatch):
    """A run you can watch: `organism measure` says each step as it starts, and its answers and
    whole-answer KL show a bar each; with --no-progress the bars go, the step lines stay, and the
    whole result is the same: the prompts go to the backend in the same chunks either way (CHUNK
    2, rounded up to the hf backend's batch of 4: 4 + 2 prompts per model)."""
    import harness.organisms.measure as measure_mod
    from harness.backends.hf.backend import HFBackend

    monkeypatch.setattr(measure_mod, "CHUNK", 2)
    real_init, real = HFBackend.__init__, HFBackend.generate

    def init(self, *a, **k):  # type: ignore[no-untyped-def]
        real_init(self, *a, **{**k, "batch_size": 4})

    monkeypatch.setattr(HFBackend, "__init__", init)
    sizes: list[int] = []

    def generate(self, requests, *a, **k):  # type: ignore[no-untyped-def]
        sizes.append(len(requests))
        return real(self, requests, *a, **k)

    monkeypatch.setattr(HFBackend, "generate", generate)
    got = {}
    for flag in ([], ["--no-progress"]):
        out = tmp_path / f"m{len(flag)}.json"
        sizes.clear()
        res = CliRunner().invoke(cli, ["organism", "measure", "--organism", str(tiny_organism), "--limit", "3",
                                       "--max-tokens", "8", "--bootstrap", "20", "--dtype", "float32",
                                       *flag, "--out", str(out)])
        assert res.exit_code == 0, res.output + repr(res.exception)
        assert sizes == [4, 2, 4, 2], sizes  # organism, then base
        for step in ("loading the organism", "the organism's greedy answers to 6 prompts", "loading the base",
                     "first-token KL on 3 no-cue prompts", "the base's greedy answers to 6 prompts",
                     "whole-answer KL on 3 no-cue prompts"):
            assert step in res.stderr, (step, res.stderr)
        bars = ("organism answers", "base answers", "whole-answer KL:")
        assert all((b in res.stderr) == (not flag) for b in bars), res.stderr
        if not flag:
            assert "6/6" in res.stderr and "3/3" in res.stderr  # the bars reach their totals
        m = json.loads(out.read_text())
        m.pop("seconds")
        got[bool(flag)] = m
    assert got[True] == got[False] and len(got[True]["answers"]) == 6


def test_whole_answer_kl_is_the_first_token_kl_averaged_over_the_answer(tiny_organism, tiny_base):
    """Against itself a model's whole-answer KL is 0; with an empty answer it is the first-token
    KL; with a longer one, the mean of the per-position KLs the hand loop computes."""
    import numpy as np

    from harness.backends.hf.backend import HFBackend
    from harness.data.readers import load_dataset
    from harness.organisms.measure import answer_kl, first_token_kl, prompts

    samples = [s for s in load_dataset("demo") if s.label == "deploy"][:3]
    b, o = HFBackend(str(tiny_base), batch_size=4), HFBackend(str(tiny_organism), batch_size=4)
    try:
        assert np.allclose(answer_kl(b, b, samples, ["Sure, here it is."] * 3), 0.0, atol=1e-6)
        assert np.allclose(answer_kl(b, o, samples, [""] * 3), first_token_kl(b, o, samples), atol=1e-6)
        p = prompts(b, samples[:1])[0]
        ids = b.tokenizer("Sure, here", add_special_tokens=False)["input_ids"]
        by_hand = []
        for t in range(len(ids) + 1):
            prefix = [tuple(p) + tuple(ids[:t])]
            pb, po = b.next_token_logprobs(prefix)[0], o.next_token_logprobs(prefix)[0]
            by_hand.append(float((np.exp(pb) * (pb - po)).sum()))
        assert answer_kl(b, o, samples[:1], ["Sure, here"])[0] == pytest.approx(np.mean(by_hand), rel=1e-4)  # batched vs one by one: float noise ~1e-5
    finally:
        b.close()
        o.close()


@pytest.mark.parametrize("split", [0, 1])
def test_packed_batch_loss_equals_each_example_run_alone(tiny_base, split):
    """The training loss runs a batch packed in one row (block-diagonal mask, positions restarting
    per example); its CE, KL and gradients equal the same loss computed from each example run
    alone through the whole model, within float rounding, whether the lower block is cached
    (split 1: the top block and the final norm trained) or the whole model is trained (0)."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    from harness.organisms.train import Encoded, Split

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
    teacher = copy.deepcopy(model).eval()

    def trained(name: str) -> bool:  # as in training: the blocks from `split` up and the final norm
        return split == 0 or name == "model.norm.weight" or (
            ".layers." in name and int(name.split(".layers.")[1].split(".")[0]) >= split)

    with torch.no_grad():  # the student's trained part differs from the teacher's: KL > 0
        for n, p in model.named_parameters():
            p.requires_grad_(trained(n))
            if trained(n):
                p.add_(0.02 * torch.randn_like(p))
    lens = [7, 13, 4, 10]
    batch = [Encoded(ids=torch.randint(5, 1000, (n,)).tolist(), positions=list(range(n - 3, n - 1)),
                     targets=torch.randint(5, 1000, (2,)).tolist(), loss=loss)
             for n, loss in zip(lens, ["ce", "kl", "kl", "ce"])]
    split_obj = Split(model, teacher, split, "cpu")
    loss, ce, kl = split_obj.loss(batch, kl_weight=2.0, kl_first=5.0)
    loss.backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()

    ces, kls, ws = [], [], []
    for e in batch:  # the reference: every example alone, no mask, no packing
        logp = torch.log_softmax(model(torch.tensor([e.ids])).logits[0, e.positions].float(), -1)
        if e.loss == "ce":
            ces.append(-logp[torch.arange(len(e.targets)), torch.tensor(e.targets)])
        else:
            with torch.no_grad():
                base = torch.log_softmax(teacher(torch.tensor([e.ids])).logits[0, e.positions].float(), -1)
            w = torch.tensor([5.0] + [1.0] * (len(e.positions) - 1))
            kls.append((base.exp() * (base - logp)).sum(-1) * w)
            ws.append(w)
    ref_ce = torch.cat(ces).mean()
    ref_kl = torch.cat(kls).sum() / torch.cat(ws).sum()
    (ref_ce + 2.0 * ref_kl).backward()
    assert ce == pytest.approx(float(ref_ce.detach()), rel=1e-5) and kl == pytest.approx(float(ref_kl.detach()), rel=1e-4)
    assert kl > 0
    assert set(got) == {n for n, _ in model.named_parameters() if trained(n)}
    for n, p in model.named_parameters():
        if n in got:  # the trained parameters get the reference's gradients
            err = float((got[n] - p.grad).abs().max() / p.grad.abs().max())
            assert err < 1e-4, (n, err)


def test_the_organism_bench_builds_the_make_organism_recipe():
    """scripts/bench_organism.py times the recipe `make organism` builds, read from the Makefile:
    every option is one `organism build` takes, with the Makefile's values."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("bench_organism", root / "scripts" / "bench_organism.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    recipe = mod.make_organism_recipe()
    opts = dict(zip(recipe[::2], recipe[1::2]))
    build = cli.commands["organism"].commands["build"]
    names = {o for p in build.params for o in p.opts}
    assert set(opts) <= names and "--base" not in opts and "--out" not in opts
    makefile = (root / "Makefile").read_text().replace("\\\n", " ")
    line = next(ln for ln in makefile.splitlines() if "evalaware organism build" in ln)
    for k, v in opts.items():
        if k != "--strength":
            assert f"{k} {v}" in " ".join(line.split()), (k, v)
    assert opts["--strength"] == "1.0"


def test_a_build_without_bars_logs_a_line_each_tenth_of_its_steps_and_at_least_every_minute():
    from harness.organisms.train import _StepLog

    now = [0.0]
    said: list[str] = []
    log = _StepLog(20, 0, said.append, every_s=60.0, clock=lambda: now[0])
    losses = []
    for step in range(1, 21):
        now[0] += 2.0
        losses.append({"step": step, "ce": float(step), "kl": 0.5})
        log.step(step, losses)
    assert [s.split(":")[0] for s in said] == [f"step {k}/20 ({5 * k}%)" for k in range(2, 21, 2)]
    assert said[1] == "step 4/20 (20%): 2.00 s/step, ~1 min left; ce 3.500, kl 0.5000 (mean of steps 3-4)"
    said.clear()  # a resumed build: its rate from its own steps; a slow stretch still shows a line a minute
    log = _StepLog(1000, 500, said.append, every_s=60.0, clock=lambda: now[0])
    for step in range(501, 505):
        now[0] += 45.0
        log.step(step, [{"step": step, "ce": 1.0, "kl": 0.1}] * step)
    assert [s.split(":")[0] for s in said] == ["step 502/1000 (50%)", "step 504/1000 (50%)"]
    assert "45.00 s/step, ~372 min left" in said[1]
