"""BenchAlign experiments: size splits, no test model in training, the summary format, notebook 07."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_benchalign_data import make_pipeline_world

from lib import params, paths
from lib.benchalign import baselines, data, rank
from lib.benchalign import experiments as ex

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _world(K=60, M=40, seed=0):
    """Random item data: K models (sizes 0.5B..120B); items of benchmark "a" follow the models'
    skill (2PL-like), items of "b" are coin flips; the target is the skill."""
    rng = np.random.default_rng(seed)
    skill = rng.normal(size=K)
    Xa = (rng.random((K, M // 2)) < 1 / (1 + np.exp(-(skill[:, None] - rng.normal(size=M // 2))))).astype(float)
    Xb = (rng.random((K, M - M // 2)) < 0.5).astype(float)
    sizes = np.geomspace(0.5, 120, K)
    return data.ItemData(np.hstack([Xa, Xb]), [f"m{k}" for k in range(K)],
                         np.array(["a"] * (M // 2) + ["b"] * (M - M // 2)), np.arange(M), skill, sizes)


def test_split_by_size_is_disjoint_and_notes_small_groups():
    d = _world()
    sp = ex.split_by_size(d, 13, {"30B+": 30, "70B+": 70, "500B+": 500})
    assert set(sp.source).isdisjoint(sp.groups["30B+"]) and set(sp.groups["70B+"]) <= set(sp.groups["30B+"])
    assert (d.size_b[sp.source] < 13).all() and (d.size_b[sp.groups["70B+"]] >= 70).all()
    assert "500B+" not in sp.groups and any("500B+ has 0 model(s)" in n for n in sp.notes)
    with pytest.raises(ex.ExperimentError, match="below the source limit"):
        ex.split_by_size(d, 13, {"bad": 7})
    rel = ex.split_by_size(d, 0.5, {"top half": 0.5}, relative=True)
    assert len(rel.source) == 30 and len(rel.groups["top half"]) == 30
    train, val = ex.train_val(sp.source, 0.2, seed=1)
    assert set(train) | set(val) == set(sp.source) and not set(train) & set(val) and len(val) >= 2


def test_training_never_reads_a_test_model(monkeypatch):
    d = _world()
    d.X[:, 0] = np.arange(len(d.models)) / 100                 # every row unique, so rows are traceable
    sp = ex.split_by_size(d, 13, {"30B+": 30})
    test = sp.groups["30B+"]
    d.target[test] = np.nan                                     # any read of a test target would fail a fit
    source_rows = {tuple(r) for r in d.X[sp.source]}
    test_rows = {tuple(r) for r in d.X[test]}
    calls = []

    def fit_rows_spy(data_, train, val, *args, **kwargs):      # every BenchAlign fit goes through here
        assert set(train) | set(val) <= set(sp.source) and not (set(train) | set(val)) & set(test)
        calls.append("fit")
        return real_fit_rows(data_, train, val, *args, **kwargs)

    def baseline_spy(fn):
        def wrapper(X_src, *args, **kwargs):
            rows = {tuple(r) for r in np.asarray(X_src)}
            assert rows <= source_rows and not rows & test_rows
            calls.append(fn.__name__)
            return fn(X_src, *args, **kwargs)
        return wrapper

    real_fit_rows = ex._fit_rows
    monkeypatch.setattr(ex, "_fit_rows", fit_rows_spy)
    for name in ("best_single", "metabench_like", "tinybenchmarks_like"):
        monkeypatch.setattr(baselines, name, baseline_spy(getattr(baselines, name)))
    comp = ex.compare(d, sp, ex.METHODS, seeds=2, cfg=ex.Config(max_steps=20, patience=20, subset_items=8))
    assert set(comp.preds) == set(ex.METHODS)
    assert calls.count("fit") == 2 * 4 and calls.count("metabench_like") == 2 * 2
    assert np.isfinite(comp.preds["benchalign"][:, test]).all()   # test models are scored, never trained on


def test_compare_summary_has_the_documented_format():
    d = _world(K=80, M=60)
    sp = ex.split_by_size(d, 13, {"30B+": 30, "70B+": 70})
    cfg = ex.Config(lr=1e-3, max_steps=200, patience=100, subset_items=10)
    comp = ex.compare(d, sp, ("benchalign", "no_alignment", "random", "best_single"), seeds=2, cfg=cfg)
    main = ex.summarise(comp, d.target, n_boot=200)
    assert set(main) == {"30B+", "70B+"}
    rec = main["70B+"]["benchalign"]
    for key in ("spearman", "spearman_std", "pair_acc", "pair_acc_std", "spearman_ci", "pair_acc_ci"):
        assert rec[key] is not None, key
    assert rec["spearman_ci"][0] <= rec["spearman"] <= rec["spearman_ci"][1]
    assert 0 < rec["pair_acc_std"] < 0.5 and rec["n_models"] == len(sp.groups["70B+"])
    assert main["30B+"]["best_single"]["spearman_seed_std"] == 0.0        # deterministic on source models
    # the target is the skill behind benchmark "a": the best single benchmark and BenchAlign find it
    assert baselines.best_single(d.X[sp.source], d.target[sp.source], d.item_benchmark).info["benchmark"] == "a"
    assert main["30B+"]["best_single"]["spearman"] > main["30B+"]["no_alignment"]["spearman"]
    by_bench = ex.weights_by_benchmark(d, comp.weights["benchalign"])
    assert by_bench.loc["a", "weight_sum"] > by_bench.loc["b", "weight_sum"]
    json.dumps(main)                                                       # plain JSON types


def test_bootstrap_matches_direct_metrics_without_resampling():
    y = np.arange(10.0)
    preds = np.vstack([y, y[::-1]])
    boot = ex.bootstrap(preds, y, np.arange(10), n_boot=4)
    assert np.all((boot["spearman"][::2] > 0.5) | np.isnan(boot["spearman"][::2]))   # seed 0: agrees
    assert np.all((boot["spearman"][1::2] < -0.5) | np.isnan(boot["spearman"][1::2]))  # seed 1: reversed
    S = np.random.default_rng(0).random((3, 10))
    np.testing.assert_allclose(ex._batched_spearman(S, np.tile(y, (3, 1))), [rank.spearman(s, y) for s in S])
    np.testing.assert_allclose(ex._batched_pair_acc(S, np.tile(y, (3, 1))), [rank.pair_accuracy(s, y) for s in S])


def test_too_few_models_degrade_to_notes():
    d = _world(K=4)
    sp = ex.split_by_size(d, 13, {"30B+": 30})
    assert not sp.groups and any("not evaluated" in n for n in sp.notes)
    comp = ex.compare(d, sp, ex.METHODS, seeds=1, cfg=ex.Config(max_steps=5))
    assert ex.summarise(comp, d.target) == {}
    one = ex.split_by_size(d, 1.0, {"1B+": 1.0})                # a single source model: nothing to learn
    assert any("only 1 source model" in n for n in one.notes)
    comp = ex.compare(d, one, ex.METHODS, seeds=1, cfg=ex.Config(max_steps=5))
    assert set(comp.preds) == {"no_alignment", "random"} and set(ex.summarise(comp, d.target)) == {"1B+"}


# --------------------------------------------------------------------------- notebook 07
def _run_notebook(tmp_path, monkeypatch, parameters):
    import papermill as pm

    monkeypatch.setenv("TBT_OUTPUTS", str(tmp_path))
    out = tmp_path / "07.ipynb"
    pm.execute_notebook(str(params.notebook_path("07_benchalign")), str(out), parameters=parameters,
                        cwd=str(paths.NOTEBOOKS), progress_bar=False, kernel_name="python3")
    return json.loads((tmp_path / parameters["profile"] / "07_benchalign" / "summary.json").read_text())


FAST = dict(seeds=1, max_steps=40, patience=40, subset_items=10, source_counts=[4], item_counts=[5],
            spread_models=4, need_seeds=1, n_boot=50, threads=1)


def test_notebook_runs_on_pipeline_items_and_degrades(tmp_path, monkeypatch):
    """Pipeline mode (smoke/mini): our direct-eval items as features, train-before-test as target."""
    profile = "smoke" if "07_benchalign" in _stages("smoke") else "published"
    make_pipeline_world(tmp_path / profile, n_models=8)
    summary = _run_notebook(tmp_path, monkeypatch, dict(
        profile=profile, data_source="pipeline", feature_benchmarks=[], relative_sizes=True, source_max_b=0.5,
        test_groups={"larger half": 0.5, "largest": 0.9}, cross_paper=False, **FAST))
    assert summary["data"]["data_source"] == "pipeline" and summary["data"]["items"] == 21
    assert set(summary["main"]) == {"larger half"}                 # "largest" has 1 model: noted, skipped
    assert set(summary["main"]["larger half"]) == set(ex.METHODS)
    assert any("largest has 1 model" in n for n in summary["notes"])
    assert summary["cross_paper"]["skipped"]


def test_notebook_runs_on_leaderboard_items(tmp_path, monkeypatch, harmony_data):
    from lib import published

    monkeypatch.setenv("TBT_OUTPUTS", str(tmp_path))
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path)
    published.import_store("published")
    summary = _run_notebook(tmp_path, monkeypatch, dict(profile="published", data_source="oll_items", **FAST))
    assert summary["data"]["models"] == 428 and summary["data"]["data_source"] == "oll_items"
    for group in ("30B+", "70B+"):
        for method in ex.METHODS:
            rec = summary["main"][group][method]
            assert {"spearman", "spearman_std", "pair_acc", "pair_acc_std"} <= set(rec)
    assert summary["cross_paper"]["counts"]["source"] == 32
    figs = tmp_path / "published" / "07_benchalign" / "figures"
    assert {p.name for p in figs.iterdir()} >= {"methods.pdf", "methods.png", "weights.png", "cross_paper_weights.png"}


def _stages(profile):
    try:
        return params.load_profile(profile, validate=False).stages
    except params.ParamsError:
        return {}
