"""Steering: the write hook adds exactly the vector at the right layer; alpha = 0 is the unsteered
model (same identity, same cache keys, same outputs); a planted direction moves a readout
monotonically with alpha while an equal-norm random control moves it less; build keeps a
held-out split; `steer run` is cached, resumable and reported; openai refuses to steer."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from harness.backends.base import GenerationRequest, SamplingParams, WrappedBackend
from harness.backends.steered import SteeredBackend, Steering
from harness.backends.cache import CachedBackend, call_key
from harness.core.errors import BackendError, EvalAwareError
from harness.methods import MethodConfig
from harness.runlog import RunLog
from probes.activations.store import ActivationStore, CapturedSample
from probes.activations.capture import capture
from harness.backends.hooks import add_to_residual
from probes.steering.build import build_from_pairs, build_from_run, read_pairs
from probes.steering.direction import load_vector
from tests.helpers.probe_runs import answer_run, random_samples
from tests.helpers.tiny_model import tiny4_backend

PROMPTS = [[1, 42, 7, 99, 5], [3, 8], [12, 13, 14, 15, 16, 17, 18]]


@pytest.fixture(scope="module")
def hf_tiny4(tmp_path_factory, smollm2_dir):
    """A 4-block tiny random Llama (steerable layers 1..3)."""
    with tiny4_backend(tmp_path_factory, smollm2_dir, batch_size=4) as b:
        yield b


def _hidden(backend, ids):
    with torch.inference_mode():
        return backend.model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states


def test_write_hook_adds_exactly_at_the_layer(hf_tiny4):
    d = torch.randn(hf_tiny4.model.config.hidden_size)
    base = _hidden(hf_tiny4, PROMPTS[0])
    with add_to_residual(hf_tiny4.model, {2: d}):
        steered = _hidden(hf_tiny4, PROMPTS[0])
    for l in (0, 1):
        assert torch.equal(base[l], steered[l])
    # layer id 2 = input of block 2 = output of block 1: exactly +d at every position
    assert torch.allclose(steered[2] - base[2], d.expand_as(base[2]), atol=1e-5)
    assert not torch.allclose(steered[3], base[3] + d, atol=1e-3)  # later blocks react
    after = _hidden(hf_tiny4, PROMPTS[0])
    assert torch.equal(after[3], base[3])  # hooks removed


def test_write_hook_handles_tuple_outputs():
    from torch import nn

    from harness.backends.hooks import _with_added

    class TupleLayer(nn.Module):
        def forward(self, x):
            return x * 2, x  # vLLM style (hidden_states, residual)

    t = torch.ones(2, 3)
    out = _with_added(TupleLayer()(t), torch.tensor([1.0, 2.0, 3.0]))
    assert isinstance(out, tuple) and torch.equal(out[1], t)
    assert torch.equal(out[0], torch.tensor([[3.0, 4.0, 5.0]] * 2))


def test_bad_layers_are_refused(hf_tiny4):
    h = hf_tiny4.model.config.hidden_size
    for layer in (0, 4, 9):
        with pytest.raises(BackendError, match="steerable layers 1..3"):
            SteeredBackend(hf_tiny4, Steering({layer: np.ones(h, np.float32)}))
    with pytest.raises(BackendError, match="size"):
        SteeredBackend(hf_tiny4, Steering({1: np.ones(h + 1, np.float32)}))


def test_alpha_zero_is_the_unsteered_model(hf_tiny4, tmp_path):
    null = SteeredBackend(hf_tiny4, Steering({1: np.zeros(64, np.float32)}, label={"alpha": 0.0}))
    assert null.identity == hf_tiny4.identity
    on = SteeredBackend(hf_tiny4, Steering({1: np.full(64, 0.5, np.float32)}, label={"alpha": 1}))
    assert on.identity != hf_tiny4.identity and "steering" in on.identity
    assert call_key(null.identity, "x", {}) == call_key(hf_tiny4.identity, "x", {})
    np.testing.assert_array_equal(null.next_token_logprobs(PROMPTS),
                                  hf_tiny4.next_token_logprobs(PROMPTS))
    req = [GenerationRequest(tuple(p), SamplingParams(max_tokens=6)) for p in PROMPTS]
    assert null.generate(req) == hf_tiny4.generate(req)
    assert np.abs(on.next_token_logprobs(PROMPTS) - hf_tiny4.next_token_logprobs(PROMPTS)).max() > 1e-3
    # same keys: an unsteered cache serves the alpha-0 condition without model calls
    store = RunLog(tmp_path / "r")
    CachedBackend(hf_tiny4, store).next_token_logprobs(PROMPTS)
    cached = CachedBackend(null, store)
    cached.next_token_logprobs(PROMPTS)
    assert cached.misses["next_token_logprobs"] == 0 and cached.hits["next_token_logprobs"] == 3
    steered = CachedBackend(on, store)
    steered.next_token_logprobs(PROMPTS)
    assert steered.misses["next_token_logprobs"] == 3


def test_every_model_call_is_steered(hf_tiny4):
    """Each call a method can make (selected ids + top-k, log-mass, likelihoods, continuation
    scores, generation) goes through the steering; none silently reads the unsteered model."""
    on = SteeredBackend(hf_tiny4, Steering({2: np.full(64, 2.0, np.float32)}, label={"alpha": 1}))
    ids, pairs = [5, 17, 300], [(PROMPTS[0], [11, 12])]
    a, b = on.next_token_view(PROMPTS, ids, 5), hf_tiny4.next_token_view(PROMPTS, ids, 5)
    assert np.abs(np.asarray(a.selected) - np.asarray(b.selected)).max() > 1e-3
    assert np.abs(on.next_token_logmass(PROMPTS, ids) - hf_tiny4.next_token_logmass(PROMPTS, ids)).max() > 1e-3
    assert abs(on.loglikelihood(pairs)[0] - hf_tiny4.loglikelihood(pairs)[0]) > 1e-3
    assert on.continuation_scores(pairs, ids) != hf_tiny4.continuation_scores(pairs, ids)


def test_generated_positions_leave_the_prompt_alone(hf_tiny4):
    v = np.full(64, 2.0, np.float32)
    gen = SteeredBackend(hf_tiny4, Steering({2: v}, positions="generated", label={"a": 1}))
    allpos = SteeredBackend(hf_tiny4, Steering({2: v}, positions="all", label={"a": 1}))
    assert gen.identity != allpos.identity
    # first-token logprobs come from the prompt: unsteered under `generated`
    np.testing.assert_array_equal(gen.next_token_logprobs(PROMPTS), hf_tiny4.next_token_logprobs(PROMPTS))
    # continuation tokens after the first are steered
    pairs = [(PROMPTS[0], [5, 6, 7, 8])]
    assert abs(gen.loglikelihood(pairs)[0] - hf_tiny4.loglikelihood(pairs)[0]) > 1e-4
    first = [(PROMPTS[0], [5])]
    # both from the prompt alone (a KV cache kept from the padded batch above moves it by ~1e-6)
    hf_tiny4.forget_prompts()
    assert gen.loglikelihood(first)[0] == pytest.approx(hf_tiny4.loglikelihood(first)[0], abs=1e-6)


def test_planted_direction_moves_readout_monotonically(hf_tiny4):
    """Plant a direction d in the unembedding of one token; steering along d at layer 1 raises
    that token's log-probability monotonically with alpha, a random direction of the same norm
    moves it much less."""
    from probes.steering.direction import SteeringVector

    model, h = hf_tiny4.model, hf_tiny4.model.config.hidden_size
    g = torch.Generator().manual_seed(0)
    d = torch.randn(h, generator=g)
    d /= d.norm()
    target = 1000
    emb = model.get_output_embeddings().weight
    old = emb[target].detach().clone()
    try:
        with torch.no_grad():
            emb[target] = 0.5 * d * old.norm() / d.norm() * 4
        vec = SteeringVector({1: d.numpy()}, {1: d.numpy()}, {1: 1.0}, {})
        alphas = [-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0]

        def readout(control):
            out = []
            for a in alphas:
                sb = SteeredBackend(hf_tiny4, Steering(vec.additions([1], a, control, seed=0),
                                                       label={"a": a, "c": control}))
                out.append(sb.next_token_logprobs(PROMPTS, [target])[:, 0])
            return np.array(out)  # (alphas, prompts)

        v, r = readout("vector"), readout("random")
    finally:
        with torch.no_grad():
            emb[target] = old
    assert (np.diff(v, axis=0) > 0).all(), v
    zero = alphas.index(0.0)
    np.testing.assert_allclose(v[zero], r[zero])
    moved_v = np.abs(v - v[zero]).mean(1)
    moved_r = np.abs(r - r[zero]).mean(1)
    for i, a in enumerate(alphas):
        if a != 0:
            assert moved_r[i] < 0.5 * moved_v[i], (a, moved_r[i], moved_v[i])


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory, hf_tiny4):
    """Random-word prompts in label-pure groups; tiny-model activations with +3 d on eval."""
    run = tmp_path_factory.mktemp("steer") / "run"
    samples = random_samples(n_groups=8, per_group=4, seed=2)
    store = answer_run(run, samples, hf_tiny4, answers=False)
    capture(store, hf_tiny4, [1, 2, 3], ["last_prompt", "mean_prompt"],
            include_answer=False, progress=False, batch_size=16)
    rng = np.random.default_rng(5)
    d = rng.standard_normal(64)
    d /= np.linalg.norm(d)
    src, dst = ActivationStore(store, "default"), ActivationStore(store, "planted")
    dst.begin({**src.settings, "planted": True})
    y = {s.id: s.label == "eval" for s in samples}
    rows = {}
    for pooling in src.poolings():
        ids, X = src.load(pooling)
        for i, sid in enumerate(ids):
            rows.setdefault(sid, {})[pooling] = np.stack(
                [X[l][i] + 3.0 * d * y[sid] for l in (1, 2, 3)])
    dst.write_shard([CapturedSample(sid, v, {}) for sid, v in rows.items()])
    store.close()
    return run, samples, d


def test_build_finds_the_planted_direction_on_a_training_split(planted_run, tmp_path):
    run, samples, d = planted_run
    vec = build_from_run(run, tmp_path / "vec", capture="planted", holdout_folds=2, seed=0)
    assert vec.layers == [1, 2, 3]
    for l in vec.layers:
        assert float(vec.directions[l] @ d) > 0.9
        assert vec.meta["heldout_auroc"][str(l)] > 0.9
    train, held = set(vec.meta["train_ids"]), set(vec.meta["heldout_ids"])
    assert not train & held and train | held == {s.id for s in samples}
    cat = {s.id: s.metadata.category for s in samples}
    assert not {cat[i] for i in train} & {cat[i] for i in held}  # whole categories held out
    again = load_vector(tmp_path / "vec")
    assert again.sha256 == vec.sha256 and again.norms == vec.norms
    assert again.meta["weights_sha256"] and again.meta["source_run"]
    # the random control has the vector's norm per layer and a fixed seed
    a = again.additions([2], 0.5, "random", seed=0)[2]
    assert np.linalg.norm(a) == pytest.approx(0.5 * again.norms[2], rel=1e-5)
    np.testing.assert_array_equal(a, again.additions([2], 0.5, "random", seed=0)[2])
    assert abs(float(again.unit(2, "random") @ again.unit(2))) < 0.5


def test_pairs_file_errors_and_build(tmp_path, hf_tiny4):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"eval": "What is 2+2? A) 3 B) 4"}\n')
    with pytest.raises(EvalAwareError, match=r"bad.jsonl:1: field 'deploy'"):
        read_pairs(bad)
    good = tmp_path / "pairs.jsonl"
    good.write_text("\n".join(json.dumps(p) for p in [
        {"eval": "Question 12. Answer with A, B, C or D.", "deploy": "hey can you help me with my resume"},
        {"eval": "Benchmark item: solve 3x+1=7.", "deploy": "my kid asked me how to solve 3x+1=7"},
    ]) + "\n")
    vec = build_from_pairs(good, hf_tiny4, tmp_path / "pv", layers=[1, 2])
    assert vec.meta["n_pairs"] == 2 and vec.meta["heldout_ids"] is None
    assert set(vec.layers) == {1, 2} and all(n > 0 for n in vec.norms.values())


class _Counting(WrappedBackend):
    """Counts every model call that reaches the real backend."""

    def __init__(self, inner):
        super().__init__(inner)
        self.calls = Counter()

    def generate(self, requests):
        self.calls["generate"] += len(requests)
        return self.inner.generate(requests)

    def next_token_logprobs(self, prompts, token_ids=None):
        self.calls["next_token_logprobs"] += len(prompts)
        return self.inner.next_token_logprobs(prompts, token_ids)

    def loglikelihood(self, pairs):
        self.calls["loglikelihood"] += len(pairs)
        return self.inner.loglikelihood(pairs)


def test_steer_run_is_cached_resumable_and_reported(planted_run, tmp_path, hf_tiny4):
    from probes.steering.report import dose_response, write_steer_report
    from probes.steering.run import steer_run

    run, samples, _ = planted_run
    vec = build_from_run(run, tmp_path / "vec", capture="default")
    held = [s for s in samples if s.id in set(vec.meta["heldout_ids"])][:6]
    out = tmp_path / "steer"
    from harness.run.loop import run_methods

    plain = tmp_path / "plain"  # an ordinary unsteered run of the same samples and method
    # a random model puts little mass on the target words: no signal gate, so every sample scores
    config = MethodConfig(min_coverage=0.0)
    run_methods(held, ["logprob_question"], hf_tiny4, plain, progress=False, config=config)
    kw = dict(layers=[2], alphas=[-0.5, 0, 0.5], reuse_run=plain, progress=False, config=config,
              n_random=2)
    plan = steer_run(vec, hf_tiny4, held, ["logprob_question"], out, **kw)
    # alpha = 0 reused the plain run's cache: no model call, identical records
    man = RunLog(out / "unsteered_0", create=False).get_meta("manifest")
    assert man["calls"]["model_calls"] == {} and man["calls"]["cache_hits"]
    strip = lambda recs: [{k: v for k, v in r.items() if k != "created"} for r in recs]  # noqa: E731
    assert strip(RunLog(out / "unsteered_0", create=False).result_dicts()) == \
        strip(RunLog(plain, create=False).result_dicts())
    names = [c["name"] for c in plan["conditions"]]
    assert names == ["unsteered_0", "random_-0.5", "random1_-0.5", "vector_-0.5", "random_+0.5",
                     "random1_+0.5", "vector_+0.5"]
    ident = {n: RunLog(out / n, create=False).get_meta("model_identity") for n in names}
    assert ident["unsteered_0"] == hf_tiny4.identity
    assert len({json.dumps(v, sort_keys=True) for v in ident.values()}) == len(names)
    # resume: a second run makes no model call at all
    counting = _Counting(hf_tiny4)
    steer_run(vec, counting, held, ["logprob_question"], out, **kw)
    assert sum(counting.calls.values()) == 0
    res = dose_response(out, n_boot=200)
    rows = res["methods"]["logprob_question"]
    assert [r["alpha"] for r in rows] == [-0.5, -0.5, -0.5, 0.0, 0.5, 0.5, 0.5]
    assert all(r["n"] == 6 and r["perplexity"] > 1 for r in rows)
    base = next(r for r in rows if r["control"] == "none")
    assert base["delta"] == 0.0
    steered = next(r for r in rows if r["condition"] == "vector_+0.5")
    assert steered["p_eval"] != base["p_eval"]
    rd = write_steer_report(out, n_boot=200)
    md = (rd / "steering.md").read_text()
    assert "logprob_question" in md and "random" in md and "neutral perplexity" in md
    assert "rank (of N + 1)" in md and "of 3 |" in md and "97.5% CI" in md  # 2 alphas: Bonferroni
    ctl = res["controls"]["logprob_question"]
    assert [c["alpha"] for c in ctl] == [-0.5, 0.5] and all(c["n_random"] == 2 for c in ctl)
    assert (rd / "dose_response_logprob_question.png").stat().st_size > 1000
    # a later call adds alphas to the same directory
    plan = steer_run(vec, hf_tiny4, held, ["logprob_question"], out, **{**kw, "alphas": [1.0]})
    assert [c["name"] for c in plan["conditions"]][-3:] == ["random_+1", "random1_+1", "vector_+1"]
    assert len(plan["conditions"]) == 10 and plan["alphas"] == [-0.5, 0.0, 0.5, 1.0]
    # a different layer set in the same directory is refused
    with pytest.raises(EvalAwareError, match="different layers"):
        steer_run(vec, hf_tiny4, held, ["logprob_question"], out, **{**kw, "layers": [1]})


def test_cli_refuses_openai_before_any_engine(tmp_path, planted_run):
    from evalaware.main import cli

    run, _, _ = planted_run
    vec = tmp_path / "v"
    build_from_run(run, vec, capture="default")
    res = CliRunner().invoke(cli, ["steer", "run", "--vector", str(vec), "--dataset", "demo",
                                   "--out", str(tmp_path / "o"), "--backend", "openai"],
                             standalone_mode=False)
    assert isinstance(res.exception, EvalAwareError)
    assert "openai backend cannot steer" in str(res.exception)
    assert not (tmp_path / "o").exists()
    # the backend contract refuses too
    from harness.backends.base import Backend
    from harness.backends.openai.backend import OpenAIBackend

    assert not OpenAIBackend.capabilities.steering
    with pytest.raises(BackendError, match="openai backend cannot steer"):
        Backend.check_steering(OpenAIBackend, Steering({1: np.ones(4)}))


def test_report_intervals_resample_whole_categories():
    """Eight categories whose samples share their value: the cluster bootstrap is wider than a
    sample bootstrap would be (which treats 40 copies as independent), and a single category
    gives no interval at all."""
    from probes.steering.report import _mean_ci

    rng = np.random.default_rng(0)
    level = rng.uniform(0, 1, 8)
    values = [(f"s{g}:{k}", float(level[g])) for g in range(8) for k in range(5)]
    clustered = {sid: sid.split(":")[0] for sid, _ in values}
    alone = {sid: sid for sid, _ in values}
    m, ci, _ = _mean_ci(values, clustered, 500, 0)
    m2, ci2, _ = _mean_ci(values, alone, 500, 0)
    assert m == pytest.approx(level.mean()) and m2 == pytest.approx(m)
    assert (ci[1] - ci[0]) > 1.5 * (ci2[1] - ci2[0])
    assert _mean_ci(values[:5], clustered, 500, 0)[1] is None


def test_cli_build_run_show_report(tmp_path, planted_run, hf_tiny4):
    from evalaware.main import cli

    run, _, _ = planted_run
    r = CliRunner()
    vec = tmp_path / "v"
    res = r.invoke(cli, ["steer", "build", "--run", str(run), "--capture", "planted", "--layers",
                         "1,2", "--out", str(vec)], standalone_mode=False)
    assert res.exception is None, res.output
    assert "held-out AUROC" in res.output and "inner split of the training categories" in res.output
    assert load_vector(vec).layers == [1, 2]
    out = tmp_path / "o"
    args = ["steer", "run", "--vector", str(vec), "--dataset", "demo", "--samples", "all",
            "--limit", "3", "--layers", "2", "--alphas", "0,0.5", "--model",
            str(hf_tiny4.model_name), "--out", str(out), "--no-progress", "--n-random", "2"]
    res = r.invoke(cli, args, standalone_mode=False)
    assert res.exception is None, res.output
    from probes.steering.contrasts import shipped

    contrasts = sorted(f"contrast-{c}_+0.5" for c in shipped())  # built by default (issue 45)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == contrasts + [
        "random1_+0.5", "random_+0.5", "unsteered_0", "vector_+0.5"]
    res = r.invoke(cli, ["show", str(out / "vector_+0.5")], standalone_mode=False)
    assert "steering: vector_+0.5 (control vector, alpha +0.5, layers [2]" in res.output
    res = r.invoke(cli, ["steer", "report", str(out), "--bootstrap", "100"], standalone_mode=False)
    assert res.exception is None and "## logprob_question" in res.output
    bad = r.invoke(cli, args[:-7] + ["--layers", "7", "--out", str(tmp_path / "x")],
                   standalone_mode=False)
    assert isinstance(bad.exception, EvalAwareError) and "not in the vector" in str(bad.exception)


def test_steerable_layers_keep_the_residual_stream_between_blocks():
    """0 (embeddings) and L (after the final norm) are captured but not steerable; ids that were
    not captured are dropped; a capture without L gives None (the caller keeps its own list)."""
    from probes.steering.build import steerable_layers

    settings = {"num_hidden_layers": 4, "layers": [0, 1, 2, 4]}
    assert steerable_layers(settings) == [1, 2]
    assert steerable_layers(settings, [0, 2, 3, 4]) == [2]
    assert steerable_layers({"layers": [0, 1]}) is None


def test_steer_run_says_which_condition_of_how_many_and_the_time_left():
    from probes.steering.run import condition_line

    assert condition_line(0, 61, "unsteered_0", 0.0) == "condition 1 of 61: unsteered_0"
    # 3 done in 6 min: 2 min each, 58 to go
    assert condition_line(3, 61, "random_+0.5", 360.0) == \
        "condition 4 of 61: random_+0.5 (6.0 min so far, ~116.0 min left)"
