"""The controlled comparison on a hand-made store whose answers are known."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lib import store
from lib.miniworld import analysis as mwa

MODELS = ["a", "b", "c", "p"]          # p is c's prepared twin, prepared for t1 only


@pytest.fixture()
def ctx(tmp_path):
    root = tmp_path / "store"
    scores = {   # protocol -> benchmark -> model -> score (higher is better; ppl lower is better)
        "direct_eval": {"t1": {"a": 0.5, "b": 0.4, "c": 0.3, "p": 0.9},
                        "t2": {"a": 0.5, "b": 0.4, "c": 0.3, "p": 0.2},
                        "ppl": {"a": 1.0, "b": 1.1, "c": 1.2, "p": 1.3}},
        "train_before_test": {"t1": {"a": 0.9, "b": 0.8, "c": 0.7, "p": 0.72},
                              "t2": {"a": 0.9, "b": 0.8, "c": 0.7, "p": 0.6},
                              "ppl": {"a": 0.8, "b": 0.9, "c": 1.0, "p": 1.1}}}
    for protocol, benches in scores.items():
        for bench, per_model in benches.items():
            for model, score in per_model.items():
                store.write(root, store.Result(protocol, bench, model, "bits_per_byte" if bench == "ppl" else "acc",
                                               score, higher_is_better=bench != "ppl"))
    store.write_meta(root, "benchmarks", {
        "t1": {"category": "Math", "metric": "acc"}, "t2": {"category": "Math", "metric": "acc"},
        "ppl": {"category": "Perplexity", "metric": "bits_per_byte", "higher_is_better": False}})
    store.write_meta(root, "models", {
        m: {"family": "f", "instruct": m == "p",
            "extra": {"prepared": {"t1": 7} if m == "p" else {}, **({"base_model": "c"} if m == "p" else {})}}
        for m in MODELS})
    out = tmp_path / "out"
    out.mkdir()
    return SimpleNamespace(store=root, out=out)


def test_perplexity_and_pca_views(ctx):
    df = store.load(ctx.store)
    ppl = mwa.perplexity_table(df, ctx.store).set_index("protocol")
    assert ppl.loc["direct_eval", "rank_perplexity"] == 4.0          # highest bits per byte = worst
    assert ppl.loc["direct_eval", "gap_prepared"] == -3.0             # rank 1 on t1 vs 4 on ppl
    assert ppl.loc["train_before_test", "gap_prepared"] == -1.0
    pca = mwa.pca_table(df, ctx.store)
    assert set(pca["models"]) == {"all models", "without prepared"}
    without = pca[(pca["models"] == "without prepared")]
    assert (without["n_models"] == 3).all()
    assert without["pc1_share"].tolist() == pytest.approx([1.0, 1.0])   # a, b, c agree on t1 and t2
    direct_all = pca[(pca["models"] == "all models") & (pca["protocol"] == "direct_eval")]["pc1_share"]
    assert float(direct_all.iloc[0]) < 0.9                                # p breaks the agreement


def test_notebook_section_writes_and_skips(ctx, tmp_path, capsys):
    summary = {"earlier": 1}
    table = mwa.notebook_section(ctx, "pca", summary)
    assert len(table) == 4 and summary["earlier"] == 1 and summary["preparation"]
    assert (ctx.out / "preparation_pca.csv").exists()
    assert (ctx.out / "figures" / "preparation_pca.png").exists()
    assert mwa.notebook_section(ctx, "ranks", {}) is None           # no kinds recorded: no causal analyses
    assert "no model records its kind" in capsys.readouterr().out
    bare = SimpleNamespace(store=tmp_path / "empty", out=tmp_path)
    assert mwa.notebook_section(bare, "pca", {}) is None
    assert "skipped" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown view"):
        mwa.notebook_section(ctx, "rank", {})


def test_mean_tau_of_resampled_models_equals_scipy():
    """The estimator the agreement intervals bootstrap (uncertainty.mean_pair_tau on draw counts),
    with a missing score, against scipy on the resampled arrays."""
    import numpy as np
    from scipy import stats

    from lib.analysis import uncertainty

    rng = np.random.default_rng(0)
    values = rng.normal(size=(12, 4))
    values[3, 2] = np.nan
    draws = rng.integers(0, 12, size=(5, 12))
    counts = np.array([np.bincount(d, minlength=12) for d in draws], float)
    for d, got in zip(draws, uncertainty.mean_pair_tau(values, counts)):
        x, taus = values[d], []
        for a in range(4):
            for b in range(a + 1, 4):
                ok = ~np.isnan(x[:, a]) & ~np.isnan(x[:, b])
                taus.append(stats.kendalltau(x[ok, a], x[ok, b], variant="b").statistic)
        assert got == pytest.approx(np.mean(taus), abs=1e-12)


def test_twin_health_flags_damage_beyond_the_noise(ctx):
    """p (c's twin, prepared for t1) leads on t1 by 0.6, trails on t2 by 0.1 (3.5 standard errors)
    and has 2**0.1 = 1.07x its base's byte perplexity; then 2**0.2 = 1.15x."""
    for model, bench, score in (("c", "t1", 0.3), ("p", "t1", 0.9), ("c", "t2", 0.3), ("p", "t2", 0.2)):
        store.write(ctx.store, store.Result("direct_eval", bench, model, "acc", score, stderr=0.02))
    table = mwa.twin_health(store.load(ctx.store), ctx.store).set_index("benchmark")
    assert list(table["kind"]) == ["prepared", "other", "perplexity"]
    assert bool(table.loc["t1", "ok"]) and table.loc["t1", "z"] > 20
    assert not bool(table.loc["t2", "ok"]) and table.loc["t2", "z"] == pytest.approx(-0.1 / (0.02 * 2 ** 0.5))
    assert bool(table.loc["ppl", "ok"]) and table.loc["ppl", "ratio"] == pytest.approx(2 ** 0.1)
    assert table.loc["ppl", "bpb_change"] == pytest.approx(1.3 / 1.2 - 1)          # 8.3 %: reported, not judged
    summary = mwa.twin_health_summary(table.reset_index())
    assert not summary["all_ok"] and summary["other"]["n_ok"] == 0 and summary["prepared"]["n_ok"] == 1
    assert summary["perplexity"]["n_bpb_change_over_tolerance"] == 0
    store.write(ctx.store, store.Result("direct_eval", "ppl", "p", "bits_per_byte", 1.4, higher_is_better=False))
    store.write(ctx.store, store.Result("direct_eval", "t2", "p", "acc", 0.27, stderr=0.02))
    table = mwa.twin_health(store.load(ctx.store), ctx.store).set_index("benchmark")
    assert not bool(table.loc["ppl", "ok"]) and bool(table.loc["t2", "ok"])     # -0.03 is within the noise
