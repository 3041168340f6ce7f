"""Issue 45, unrelated-contrast steering controls: `steer build` stores norm-matched directions
from contrasts unrelated to being tested (>= 8 shipped sets, plus --control-pairs), `steer run`
steers along them as along the vector, and the report ranks the vector among them and the
Gaussian directions, on every method (a readout or a behaviour)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from harness.core.errors import EvalAwareError
from harness.methods import MethodConfig
from probes.activations.capture import capture
from probes.steering.build import build_from_run
from probes.steering.contrasts import contrast_sets, last_prompt_states, read_contrast, shipped
from probes.steering.direction import load_vector
from tests.helpers.probe_runs import answer_run, random_samples
from tests.helpers.tiny_model import tiny4_backend


@pytest.fixture(scope="module")
def hf_tiny4(tmp_path_factory, smollm2_dir):
    with tiny4_backend(tmp_path_factory, smollm2_dir, batch_size=8) as b:
        yield b


@pytest.fixture(scope="module")
def captured(tmp_path_factory, hf_tiny4):
    run = tmp_path_factory.mktemp("ctl") / "run"
    samples = random_samples(n_groups=8, per_group=3, seed=4)
    store = answer_run(run, samples, hf_tiny4, answers=False)
    capture(store, hf_tiny4, [1, 2, 3], ["last_prompt"], include_answer=False, progress=False, batch_size=16)
    store.close()
    return run, samples


def _pairs(path, rows):
    path.write_text("".join(json.dumps({"a": a, "b": b}) + "\n" for a, b in rows))
    return path


def test_at_least_eight_unrelated_contrasts_are_shipped_and_each_reads():
    sets = shipped()
    assert len(sets) >= 8 and {"shelf", "topic", "length", "formality", "system_prompt"} <= set(sets)
    for name, path in sets.items():
        pairs = read_contrast(path)
        assert len(pairs) >= 8, name
        for a, b in pairs:
            assert a != b, name
    sys_pairs = read_contrast(sets["system_prompt"])
    assert all(a[0].role == "system" and len(b) == 1 for a, b in sys_pairs)  # a system prompt vs none


def test_control_pairs_are_checked_before_a_model_loads(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": "one", "b": ""}\n{"a": "x", "b": "y"}\n')
    with pytest.raises(EvalAwareError, match=r"bad.jsonl:1: field 'b': must be a non-empty string"):
        contrast_sets([bad])
    clash = _pairs(tmp_path / "shelf.jsonl", [("a", "b"), ("c", "d")])
    with pytest.raises(EvalAwareError, match="a contrast named 'shelf' is already shipped"):
        contrast_sets([clash])
    one = _pairs(tmp_path / "one.jsonl", [("a", "b")])
    with pytest.raises(EvalAwareError, match="1 pair"):
        contrast_sets([one])
    ok = _pairs(tmp_path / "colour.jsonl", [("The car is red.", "The car is blue."), ("Red hat.", "Blue hat.")])
    assert set(contrast_sets([ok])) == set(shipped()) | {"colour"}
    assert list(contrast_sets([ok], with_shipped=False)) == ["colour"]


def test_every_contrast_direction_is_norm_matched_to_the_vector(captured, hf_tiny4, tmp_path):
    run, _ = captured
    colour = _pairs(tmp_path / "colour.jsonl", [("The car is red.", "The car is blue."),
                                                ("A red hat.", "A blue hat."), ("Red door", "Blue door")])
    sets = contrast_sets([colour])
    vec = build_from_run(run, tmp_path / "vec", capture="default", contrasts=sets, backend=hf_tiny4)
    assert set(vec.contrasts) == set(sets) and vec.meta["contrasts"]["colour"]["n_pairs"] == 3
    again = load_vector(tmp_path / "vec")
    assert again.sha256 == vec.sha256 and set(again.contrasts) == set(sets)
    for name in sets:
        for l in vec.layers:
            for alpha in (-0.5, 0.25):
                added = again.additions([l], alpha, f"contrast:{name}")[l]
                vector = again.additions([l], alpha, "vector")[l]
                assert np.linalg.norm(added) == pytest.approx(np.linalg.norm(vector), rel=1e-5), (name, l)
                assert np.linalg.norm(added) == pytest.approx(abs(alpha) * again.norms[l], rel=1e-5)
    # the direction is the contrast's own mean (a - b), not the vector's or a random one, turned to
    # the vector's side (which side of a contrast comes first is arbitrary): its cosine recorded
    pairs = read_contrast(colour)
    H = last_prompt_states(hf_tiny4, [c for p in pairs for c in p], vec.layers)
    want = (H[0::2] - H[1::2]).mean(0)
    for j, l in enumerate(vec.layers):
        raw = want[j] / np.linalg.norm(want[j])
        cos = float(raw @ again.unit(l))
        sign = 1.0 if cos >= 0 else -1.0
        assert float(again.unit(l, "contrast:colour") @ raw) == pytest.approx(sign, abs=1e-4)
        assert float(again.unit(l, "contrast:colour") @ again.unit(l)) >= 0 and abs(cos) < 0.99
        assert again.meta["contrasts"]["colour"]["cosine_with_vector"][str(l)] == pytest.approx(cos, abs=1e-5)
    with pytest.raises(EvalAwareError, match="no contrast 'nosuch'"):
        again.unit(1, "contrast:nosuch")


def test_a_contrast_direction_that_is_not_unit_length_is_refused(captured, hf_tiny4, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    run, _ = captured
    ok = _pairs(tmp_path / "colour.jsonl", [("red", "blue"), ("a red hat", "a blue hat")])
    build_from_run(run, tmp_path / "vec", capture="default", contrasts=contrast_sets([ok], with_shipped=False),
                   backend=hf_tiny4)
    f = tmp_path / "vec" / "vector.safetensors"
    t = load_file(f)
    t["contrast/colour/2"] = t["contrast/colour/2"] * torch.tensor(2.0)  # twice the vector's scale
    save_file(t, f, metadata={"format": "evalaware-steering-vector-1"})
    with pytest.raises(EvalAwareError, match=r"tensor 'contrast/colour/2': length 2, expected 1"):
        load_vector(tmp_path / "vec")


def test_steer_run_and_report_rank_the_vector_among_contrasts_and_random(captured, hf_tiny4, tmp_path):
    from probes.steering.report import dose_response, write_steer_report
    from probes.steering.run import steer_run

    run, samples = captured
    sets = contrast_sets([_pairs(tmp_path / "colour.jsonl", [("red", "blue"), ("a red hat", "a blue hat")]),
                          _pairs(tmp_path / "size.jsonl", [("a big dog", "a small dog"), ("big", "small")])],
                         with_shipped=False)
    vec = build_from_run(run, tmp_path / "vec", capture="default", contrasts=sets, backend=hf_tiny4)
    out = tmp_path / "steer"
    kw = dict(layers=[2], alphas=[0, 0.5], progress=False, config=MethodConfig(min_coverage=0.0), n_random=2)
    sub = samples[::3][:6]  # one sample of each of 6 categories: enough for a verdict
    plan = steer_run(vec, hf_tiny4, sub, ["logprob_question"], out, **kw)
    assert [c["name"] for c in plan["conditions"]] == [
        "unsteered_0", "contrast-colour_+0.5", "contrast-size_+0.5", "random_+0.5", "random1_+0.5", "vector_+0.5"]
    res = dose_response(out, n_boot=100)
    (c,) = res["controls"]["logprob_question"]
    rows = {r["condition"]: r for r in res["methods"]["logprob_question"]}
    cd = [rows["contrast-colour_+0.5"]["delta"], rows["contrast-size_+0.5"]["delta"]]
    assert c["contrast_deltas"] == cd and c["n_contrast"] == 2 and c["n_random"] == 2 and c["n_all"] == 4
    v = rows["vector_+0.5"]["delta"]
    assert c["contrast_rank"] == 1 + sum(abs(d) >= abs(v) for d in cd)
    assert c["strongest_contrast"]["name"] == ("colour" if abs(cd[0]) >= abs(cd[1]) else "size")
    assert c["rank_all"] == 1 + sum(abs(d) >= abs(v) for d in cd + c["random_deltas"])
    md = (write_steer_report(out, n_boot=100) / "steering.md").read_text()
    assert "unrelated-contrast controls: 2 directions" in md and "rank among all controls" in md
    assert f"{c['rank_all']} of 5" in md
    # one declared rule judges each (method, alpha) row, printed as a verdict line
    (v,) = res["verdicts"]
    assert (v["method"], v["alpha"], v["n_controls"]) == ("logprob_question", 0.5, 4)
    assert v["ci_level"] == pytest.approx(0.95) and f"- {v['sentence']}" in md and res["rule"] in md
    assert v["kind"] != "no verdict" and v["n_categories"] == 6 and v["n_planned"] == 4
    assert v["vector_delta"] == pytest.approx(rows["vector_+0.5"]["delta"])
    assert v["kind"] in ("moves it more than every control", "moves it, not shown more than every control")
    w = v["least_beaten_control"]  # the vector moved it: every control compared, the least beaten named
    assert w["delta"] == pytest.approx(rows[w["condition"]]["delta"])
    assert w["gap"] == pytest.approx(abs(v["vector_delta"]) + w["sign"] * w["delta"], abs=1e-9)
    # without them: the same directory's vector conditions, no contrast run
    plan2 = steer_run(vec, hf_tiny4, sub, ["logprob_question"], tmp_path / "plain",
                      contrast_controls=False, **kw)
    assert not any(x["control"] == "contrast" for x in plan2["conditions"])


def test_cli_build_with_control_pairs_and_without_controls(captured, hf_tiny4, tmp_path):
    from evalaware.main import cli

    run, _ = captured
    extra = _pairs(tmp_path / "colour.jsonl", [("red", "blue"), ("a red hat", "a blue hat")])
    r = CliRunner()
    res = r.invoke(cli, ["steer", "build", "--run", str(run), "--layers", "2", "--control-pairs", str(extra),
                         "--model", str(hf_tiny4.model_name), "--out", str(tmp_path / "v")], standalone_mode=False)
    assert res.exception is None, res.output
    assert f"contrast controls ({len(shipped()) + 1}, each scaled as the vector)" in res.output
    assert set(load_vector(tmp_path / "v").contrasts) == set(shipped()) | {"colour"}
    res = r.invoke(cli, ["steer", "build", "--run", str(run), "--layers", "2", "--no-contrast-controls",
                         "--out", str(tmp_path / "w")], standalone_mode=False)
    assert res.exception is None and load_vector(tmp_path / "w").contrasts == {}
    bad = r.invoke(cli, ["steer", "build", "--run", str(run), "--no-contrast-controls", "--control-pairs",
                         str(extra), "--out", str(tmp_path / "x")], standalone_mode=False)
    assert isinstance(bad.exception, EvalAwareError) and not (tmp_path / "x").exists()


def test_contrasts_are_turned_to_the_vectors_side_so_their_mean_cannot_cancel():
    """Two contrasts that point opposite ways along the vector (their sides written in opposite
    orders) both end on the vector's side; the cosine before turning is recorded."""
    from probes.steering.build import orient

    v = {1: np.array([1.0, 0.0, 0.0], dtype=np.float32)}
    up, down = np.array([0.6, 0.8, 0.0], dtype=np.float32), np.array([-0.6, 0.0, 0.8], dtype=np.float32)
    dirs, meta = orient({"up": {1: up}, "down": {1: down}}, {"up": {}, "down": {}}, v)
    assert dirs["up"][1] @ v[1] == pytest.approx(0.6) and dirs["down"][1] @ v[1] == pytest.approx(0.6)
    np.testing.assert_allclose(dirs["down"][1], -down)
    assert meta["down"]["cosine_with_vector"] == {"1": pytest.approx(-0.6)}
