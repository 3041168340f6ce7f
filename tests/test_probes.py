"""Probes: planted signal is found, shuffled labels give chance, grouped CV exposes source
leakage that random CV rewards, saved probes round-trip without pickle, records and CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from harness.core.errors import EvalAwareError
from harness.core.records import Record
from harness.runlog import RunLog
from probes.activations.store import ActivationStore, CapturedSample
from probes.activations.capture import capture
from harness.stats.metrics import bootstrap_auroc, roc_auc as auroc
from harness.stats.cv import make_splits, oof_scores
from probes.io import load_probe, save_probe
from probes.models import linear_params, make_probe
from tests.helpers.probe_runs import answer_run, random_samples
from probes.train import EvalConfig, evaluate

LAYERS = [0, 1, 2]


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, hf_tiny):
    """60 random-word prompts in 12 label-pure groups, real tiny-model activations (prompt only)."""
    run = tmp_path_factory.mktemp("probe") / "run"
    samples = random_samples(n_groups=12, per_group=5, seed=1)
    store = answer_run(run, samples, hf_tiny, answers=False)
    capture(store, hf_tiny, LAYERS, ["last_prompt", "mean_prompt"], include_answer=False,
            progress=False, batch_size=16)
    store.close()
    return run, samples


def _plant(run: Path, name: str, fn) -> RunLog:
    """Copy the `default` capture into `name`, transforming each layer's matrix with fn."""
    store = RunLog(run, create=False)
    src = ActivationStore(store, "default")
    dst = ActivationStore(store, name)
    if dst.settings is None:
        dst.begin({**src.settings, "planted": name})
        y = {s.id: int(s.label == "eval") for s in store.samples()}
        groups = {s.id: s.metadata.category for s in store.samples()}
        vecs: dict[str, dict[str, np.ndarray]] = {}
        for pooling in src.poolings():
            ids, X = src.load(pooling)
            for i, sid in enumerate(ids):
                vecs.setdefault(sid, {})[pooling] = np.stack(
                    [fn(X[l], np.array([y[s] for s in ids]), [groups[s] for s in ids], l)[i]
                     for l in LAYERS])
        dst.write_shard([CapturedSample(sid, v, {}) for sid, v in vecs.items()])
    return store


def _label_direction(X, y, groups, layer):
    u = np.random.default_rng(7).normal(size=X.shape[1])
    u /= np.linalg.norm(u)
    return X + 4.0 * X.std() * (2 * y[:, None] - 1) * u[None, :]


def _group_directions(X, y, groups, layer):
    rng = np.random.default_rng(11)
    dirs = {g: rng.normal(size=X.shape[1]) for g in sorted(set(groups))}
    return X + 3.0 * X.std() * np.stack([dirs[g] / np.linalg.norm(dirs[g]) for g in groups])


def _cfg(**kw) -> EvalConfig:
    base = dict(schemes=("grouped", "random"), baselines=(), n_boot=200, n_perm=5)
    base.update(kw)
    return EvalConfig(**base)


def test_planted_direction_is_found(base_run):
    run, _ = base_run
    store = _plant(run, "planted", _label_direction)
    res = evaluate(store, "planted", _cfg(baselines=("shuffled", "human")), progress=False)
    human = [r for r in res.rows if r["model"] == "human"]
    assert [r["pooling"] for r in human] == ["last_prompt", "mean_prompt"]  # one row per pooling
    assert 0.7 < human[0]["auroc"] < 1.0
    probe_rows = [r for r in res.rows if r["model"] in ("logreg", "diffmean")]
    assert len(probe_rows) == 2 * 2 * 2 * len(LAYERS)  # poolings x schemes x probes x layers
    assert min(r["auroc"] for r in probe_rows) > 0.97
    grouped = [r for r in probe_rows if r["scheme"] == "grouped"]
    assert all(r["ci_lo"] <= r["auroc"] <= r["ci_hi"] for r in grouped)
    null = [r for r in res.rows if r["model"] == "shuffled:logreg"]
    assert len(null) == 4
    # random CV: plain permutations, centred on chance
    assert all(0.35 < r["auroc"] < 0.65 for r in null if r["scheme"] == "random")
    # grouped CV: whole groups swap labels; on label-pure groups that null sits at or below chance
    assert all(r["auroc"] < 0.6 and r["ci_hi"] < 0.7 for r in null if r["scheme"] == "grouped")
    store.close()


def test_shuffled_labels_give_chance(base_run):
    run, _ = base_run
    store = _plant(run, "planted", _label_direction)
    ids, X = ActivationStore(store, "planted").load("mean_prompt", [2])
    y = np.array([int(i.startswith(tuple(f"g{g:02d}" for g in range(0, 12, 2)))) for i in ids])
    groups = [i.split(":")[0] for i in ids]
    aucs = []
    for seed in range(5):
        yp = np.random.default_rng(seed).permutation(y)
        sp = make_splits("random", yp, groups, groups, seed=seed)
        s, _ = oof_scores(lambda: make_probe("logreg"), X[2], yp, sp)
        aucs.append(auroc(yp, s))
    assert 0.35 < float(np.mean(aucs)) < 0.65
    # and the real labels are found on the same matrix
    s, _ = oof_scores(lambda: make_probe("logreg"), X[2], y, make_splits("grouped", y, groups, groups))
    assert auroc(y, s) > 0.97
    store.close()


def test_grouped_cv_exposes_source_leakage(base_run):
    """Only group identity is planted and groups are label-pure: random CV rewards recognising
    the group, grouped CV (unseen groups) stays near chance."""
    run, _ = base_run
    store = _plant(run, "groups", _group_directions)
    res = evaluate(store, "groups", _cfg(probes=("logreg",), poolings=["mean_prompt"]),
                   progress=False)
    rand = res.best("mean_prompt", "logreg", "random")["auroc"]
    grouped = [r["auroc"] for r in res.rows if r["scheme"] == "grouped"]
    assert rand > 0.9
    assert max(grouped) < 0.8 and rand - max(grouped) > 0.2
    store.close()


def test_auroc_and_bootstrap():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    s = np.round(y + rng.normal(size=200), 1)  # with ties
    assert auroc(y, s) == pytest.approx(roc_auc_score(y, s))
    lo, hi = bootstrap_auroc(y, s, 500)
    assert lo < auroc(y, s) < hi and hi - lo < 0.2
    glo, ghi = bootstrap_auroc(y, s, 200, groups=[str(i % 10) for i in range(200)])
    assert glo < ghi
    assert auroc(np.ones(5), np.arange(5)) is None


def test_splits_respect_groups_and_families():
    y = np.array([1] * 12 + [0] * 12)
    groups = [f"c{i // 3}" for i in range(24)]
    for tr, te in make_splits("grouped", y, groups, groups, n_splits=4):
        assert not {groups[i] for i in tr} & {groups[i] for i in te}
    fam = [f"f{i // 6}" for i in range(24)]
    splits = make_splits("lofo", y, groups, fam)
    assert len(splits) == 4 and all(len({fam[i] for i in te}) == 1 for _, te in splits)
    with pytest.raises(EvalAwareError, match="one class"):
        make_splits("grouped", np.ones(10, dtype=int), groups[:10], groups[:10])
    with pytest.raises(EvalAwareError, match="leaves one class"):
        make_splits("lofo", y, groups, ["a"] * 12 + ["b"] * 12)


@pytest.mark.parametrize("kind", ["logreg", "diffmean"])
def test_saved_probe_round_trip(tmp_path, kind):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 16)) * rng.uniform(0.5, 3, 16) + 2.0
    y = (X[:, 0] + 0.3 * rng.normal(size=40) > 2.0).astype(int)
    pipe = make_probe(kind).fit(X, y)
    save_probe(tmp_path / "p", linear_params(pipe), {"kind": kind, "layer": 3, "pooling": "last_prompt"})
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["probe.json", "probe.safetensors"]
    probe = load_probe(tmp_path / "p")
    np.testing.assert_allclose(probe.decision(X), pipe.decision_function(X), rtol=1e-4, atol=1e-4)
    assert probe.layer == 3 and probe.pooling == "last_prompt"
    with pytest.raises(EvalAwareError, match="expects vectors of size 16"):
        probe.decision(X[:, :5])
    meta = json.loads((tmp_path / "p" / "probe.json").read_text())
    (tmp_path / "p" / "probe.json").write_text(json.dumps({**meta, "format": "pickle"}))
    with pytest.raises(EvalAwareError, match="format"):
        load_probe(tmp_path / "p")


def test_probes_train_reads_the_activations_once_and_fits_what_the_sweep_chose(base_run, tmp_path,
                                                                               monkeypatch):
    """`probes train --layer best` reads the capture once (the sweep, the CV and the fit share one
    load); its layer is the one `probes eval`'s sweep ranks first, its weights those fitted alone."""
    from dataclasses import asdict

    from probes.activations.store import ActivationStore
    from probes.apply import train_and_save
    from probes.models import linear_params
    from probes.train import EvalConfig, evaluate, fit_probe

    run, _ = base_run
    store = _plant(run, "planted", _label_direction)
    reads = []
    load = ActivationStore.load
    monkeypatch.setattr(ActivationStore, "load", lambda self, *a, **k: reads.append(a) or load(self, *a, **k))
    path, meta = train_and_save(store, "planted", "mean_prompt", "best", tmp_path / "probe", cfg=_cfg(),
                                progress=False)
    assert len(reads) == 1
    monkeypatch.setattr(ActivationStore, "load", load)
    sweep = evaluate(store, "planted", EvalConfig(**{**asdict(_cfg()), "poolings": ["mean_prompt"],
                                                     "probes": ("logreg",), "schemes": ("grouped",),
                                                     "baselines": (), "n_boot": 0}), progress=False)
    assert meta["layer"] == sweep.best("mean_prompt")["layer"]
    pipe, _ = fit_probe(store, "planted", "mean_prompt", meta["layer"], C=_cfg().C, seed=_cfg().seed)
    np.testing.assert_allclose(load_probe(path).weight, linear_params(pipe)["weight"], rtol=1e-6)


def test_one_load_and_align():
    """Labels meet activations in one place: `probe_data` is called only by `load_aligned`."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    calls = [f"{f.relative_to(root)}:{n.lineno}" for pkg in ("evalaware", "harness", "probes") for f in (root / pkg).rglob("*.py")
             for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.Call)
             and ast.unparse(n.func).split(".")[-1] == "probe_data"]
    assert len(calls) == 1 and calls[0].startswith("probes/data.py:"), calls


def test_train_apply_and_records(base_run, tmp_path):
    from probes.apply import apply_probe, train_and_save, write_oof_records

    run, samples = base_run
    store = _plant(run, "planted", _label_direction)
    path, meta = train_and_save(store, "planted", "mean_prompt", "best", tmp_path / "probe",
                                cfg=_cfg(), progress=False)
    assert meta["cv"]["grouped"]["auroc"] > 0.97 and meta["cv"]["random"]["leaky"]
    probe = load_probe(path)
    with pytest.raises(EvalAwareError, match="used to train"):
        apply_probe(probe, store, "planted", write=True)
    res = apply_probe(probe, store, "planted", write=True, allow_train_overlap=True)
    assert res["written"] == 60 and res["auroc_truth"] > 0.99
    with pytest.raises(EvalAwareError, match="holds the records of a saved probe"):  # the name is the probe's
        write_oof_records(store, "planted", "mean_prompt", [probe.layer], cfg=_cfg())
    got = write_oof_records(store, "planted", "mean_prompt", [probe.layer], cfg=_cfg(), method="probe_oof")
    recs = store.result_dicts("probe_oof")
    assert got["written"] == len(recs) == 60 and got["oof_scheme"] == "crossed"  # one layer: given, not chosen
    keys = {"sample_id", "method", "label", "prediction", "score", "n_valid", "n_invalid",
            "category", "agentic", "eval_type", "n_turns", "details"}
    assert all(keys <= set(r) for r in recs)
    assert all(0.0 <= r["score"] <= 1.0 and r["prediction"] in ("eval", "deploy") for r in recs)
    assert recs[0]["details"]["scores"].startswith("out-of-fold")
    assert {(r["details"]["layer"], r["details"]["layer_selection"]) for r in recs} == {(probe.layer, "given")}
    y = [int(r["label"] == "eval") for r in recs]
    assert roc_auc_score(y, [r["score"] for r in recs]) > 0.97
    # a probe from other weights is refused
    probe.meta["model"] = {"weights_sha256": "0" * 64}
    with pytest.raises(EvalAwareError, match="trained on weights"):
        apply_probe(probe, store, "planted")
    store.close()


def test_judge_labels(base_run):
    from probes.data import probe_data

    run, samples = base_run
    store = RunLog(run, create=False)
    with pytest.raises(EvalAwareError, match="no records of method 'reasoning'"):
        probe_data(store, [s.id for s in samples], "reasoning")
    preds = ["eval", "deploy", None]
    store.put_results("reasoning", [Record.for_sample(s, "reasoning", preds[i % 3], None, 1, 0)
                                    for i, s in enumerate(samples)])
    data = probe_data(store, [s.id for s in samples], "reasoning")
    assert len(data.ids) == 40 and data.dropped["no_label"] == 20
    assert data.y.tolist() == [1, 0] * 20
    store.replace_results("reasoning", [])
    store.close()


def test_cli_end_to_end(tmp_path, tiny_model_dir, hf_tiny):
    from click.testing import CliRunner

    from evalaware.main import cli

    run = tmp_path / "run"
    answer_run(run, random_samples(n_groups=6, per_group=4, seed=2), hf_tiny, answers=False).close()
    r = CliRunner()
    out = r.invoke(cli, ["activations", "capture", "--run", str(run), "--model", str(tiny_model_dir),
                         "--pooling", "last_prompt,mean_prompt", "--no-progress"])
    assert out.exit_code == 0, out.output + repr(out.exception)
    assert "bytes/sample" in out.output and "captured 24 samples" in out.output
    out = r.invoke(cli, ["probes", "eval", "--run", str(run), "--n-boot", "50", "--n-perm", "2",
                         "--cv", "grouped,crossed,lofo,random", "--no-progress", "--write-records"])
    assert out.exit_code == 0, out.output + repr(out.exception)
    d = run / "probes" / "default"
    assert (d / "auroc_by_layer.png").stat().st_size > 1000 and (d / "eval.csv").exists()
    assert "LEAKY" in out.output and "tfidf" in out.output
    recs = RunLog(run, create=False).result_dicts("probe")
    assert len(recs) == 24 and "tfidf_char" in out.output and "best-layer null p=" in out.output
    det = recs[0]["details"]
    assert det["oof_scheme"] == "nested-crossed" and "chosen again inside each training fold" in det["layer_selection"]
    assert det["sweep_n_perm"] == 2 and "nested-crossed CV, layer per fold" in out.output
    assert 0 < det["sweep_selection_p"] <= 1 and isinstance(det["sweep_best_layer"], int)
    assert det["scores_comparable_across_folds"] is False and "not comparable across folds" in out.output
    out = r.invoke(cli, ["probes", "train", "--run", str(run), "--pooling", "mean_prompt",
                         "--layer", "1", "--out", str(tmp_path / "p"), "--n-boot", "50"])
    assert out.exit_code == 0, out.output + repr(out.exception)
    out = r.invoke(cli, ["probes", "apply", "--probe", str(tmp_path / "p"), "--run", str(run),
                         "--out", str(tmp_path / "s.jsonl")])
    assert out.exit_code == 0, out.output + repr(out.exception)
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 24
    # bad input: one line on stderr, exit code 2, store untouched
    p = subprocess.run([sys.executable, "-m", "evalaware.main", "probes", "eval", "--run", str(run),
                        "--name", "nope"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.strip().startswith("error:") and \
        len(p.stderr.strip().splitlines()) == 1 and "no capture named 'nope'" in p.stderr


def test_pooling_with_too_few_samples_is_skipped(base_run):
    run, _ = base_run
    store = RunLog(run, create=False)
    src, dst = ActivationStore(store, "default"), ActivationStore(store, "partial")
    if dst.settings is None:
        dst.begin(src.settings)
        ids, lp = src.load("last_prompt")
        _, mp = src.load("mean_prompt")
        dst.write_shard([CapturedSample(sid, {"last_prompt": np.stack([lp[l][i] for l in LAYERS]),
                                              **({"mean_prompt": np.stack([mp[l][i] for l in LAYERS])}
                                                 if i < 3 else {})}, {})
                         for i, sid in enumerate(ids)])
    res = evaluate(store, "partial", _cfg(probes=("diffmean",)), progress=False)
    assert list(res.samples) == ["last_prompt"] and "mean_prompt" in res.skipped
    assert {r["pooling"] for r in res.rows} == {"last_prompt"}
    with pytest.raises(EvalAwareError):
        evaluate(store, "partial", _cfg(poolings=["mean_prompt"]), progress=False)
    store.close()


def test_label_pure_folds_do_not_bias_uninformative_features():
    """Leaving out a label-pure group shifts the training prior; without class balancing the
    intercept alone drives pooled out-of-fold AUROC of a useless feature towards 0."""
    from harness.stats.baselines import length_model

    rng = np.random.default_rng(5)
    groups = [f"c{i // 5}" for i in range(60)]
    y = np.array([int((i // 5) % 2 == 0) for i in range(60)])
    X = rng.normal(size=(60, 1))
    for scheme in ("lofo", "grouped"):
        sp = make_splits(scheme, y, groups, groups)
        for make in (length_model, lambda: make_probe("logreg"), lambda: make_probe("diffmean")):
            s, _ = oof_scores(make, np.abs(X) + 1 if make is length_model else X, y, sp)
            assert 0.2 < auroc(y, s) < 0.8, (scheme, make)


def test_group_level_permutation_keeps_groups_pure():
    from probes.selection import permute_labels

    groups = [f"c{i // 4}" for i in range(40)]
    y = np.array([int((i // 4) % 2 == 0) for i in range(40)])
    rng = np.random.default_rng(0)
    for _ in range(5):
        yp = permute_labels(y, rng, groups)
        assert all(len({yp[i] for i in range(40) if groups[i] == g}) == 1 for g in set(groups))
        assert yp.sum() == y.sum()
    mixed = permute_labels(y, rng, ["a"] * 40)  # a mixed group: shuffled within itself
    assert sorted(mixed.tolist()) == sorted(y.tolist())


def test_train_intervals_resample_categories_as_probes_eval_does(base_run, tmp_path):
    """`probes train` saved sample-resampled intervals beside the category ones of `probes eval`."""
    from probes.apply import train_and_save

    run, _ = base_run
    store = _plant(run, "noisy", _group_directions)
    _, by_cat = train_and_save(store, "noisy", "mean_prompt", 1, tmp_path / "a", progress=False,
                               cfg=_cfg(schemes=("grouped",), n_boot=300))
    _, by_sample = train_and_save(store, "noisy", "mean_prompt", 1, tmp_path / "b", progress=False,
                                  cfg=_cfg(schemes=("grouped",), n_boot=300, ci_by="sample"))
    a, b = by_cat["cv"]["grouped"], by_sample["cv"]["grouped"]
    assert a["ci_by"] == "category" and b["ci_by"] == "sample" and a["auroc"] == b["auroc"]
    # 60 samples in a handful of categories: resampling whole categories gives a wider interval
    assert (a["ci_hi"] - a["ci_lo"]) > (b["ci_hi"] - b["ci_lo"])
    store.close()
