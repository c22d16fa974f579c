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


def test_rank_table_and_summary(ctx):
    table = mwa.rank_table(store.load(ctx.store), ctx.store)
    assert list(table["benchmark"]) == ["t1", "t2"]          # perplexity corpora excluded
    t1 = table.set_index("benchmark").loc["t1"]
    assert bool(t1["prepared_for"]) and t1["dose"] == 7
    assert (t1["rank_direct_eval"], t1["rank_train_before_test"], t1["shift"]) == (1.0, 3.0, 2.0)
    assert t1["twin_gap_direct_eval"] == pytest.approx(0.6)
    assert t1["twin_gap_train_before_test"] == pytest.approx(0.02)
    t2 = table.set_index("benchmark").loc["t2"]
    assert (t2["rank_direct_eval"], t2["rank_train_before_test"], t2["shift"]) == (4.0, 4.0, 0.0)
    s = mwa.rank_summary(table)
    assert s["prepared_tasks"]["mean_shift"] == 2.0 and s["other_tasks"]["mean_shift"] == 0.0


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
    table = mwa.notebook_section(ctx, "ranks", summary)
    assert len(table) == 2
    assert summary["earlier"] == 1 and summary["preparation"]["prepared_tasks"]["mean_shift"] == 2.0
    assert (ctx.out / "preparation_ranks.csv").exists()
    assert (ctx.out / "figures" / "preparation_ranks.png").exists()
    bare = SimpleNamespace(store=tmp_path / "empty", out=tmp_path)
    assert mwa.notebook_section(bare, "pca", {}) is None
    assert "skipped" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown view"):
        mwa.notebook_section(ctx, "rank", {})


def _dose_store(root):
    """Six base models that every benchmark ranks alike (by skill) under both protocols, and four
    twins: prepared at a low (10) or high (40) dose for t1 and t2, which lifts them under direct
    evaluation in proportion to the dose and not after fine-tuning."""
    skill = {f"b{i}": 0.1 * i for i in range(6)}
    twins = {"b1-low": ("b1", 10), "b2-low": ("b2", 10), "b1-high": ("b1", 40), "b2-high": ("b2", 40)}
    benches = ["t1", "t2", "t3", "t4"]
    meta = {m: {"family": "f", "extra": {"prepared": {}}} for m in skill}
    for twin, (base, dose) in twins.items():
        meta[twin] = {"family": "f", "instruct": True,
                      "extra": {"prepared": {"t1": dose, "t2": dose}, "base_model": base}}
    store.write_meta(root, "models", meta)
    store.write_meta(root, "benchmarks", {b: {"category": "Math", "metric": "acc"} for b in benches})
    for k, b in enumerate(benches):
        for m, s in skill.items():
            for p in store.PROTOCOLS:
                store.write(root, store.Result(p, b, m, "acc", 0.2 + s + 0.001 * k))
        for twin, (base, dose) in twins.items():
            lift = dose / 80 if b in ("t1", "t2") else 0.0
            score = 0.2 + skill[base] + 0.001 * k + 0.0005
            store.write(root, store.Result("direct_eval", b, twin, "acc", score + lift))
            store.write(root, store.Result("train_before_test", b, twin, "acc", score))


def test_agreement_falls_with_dose_under_direct_evaluation_only(tmp_path):
    root = tmp_path / "store"
    _dose_store(root)
    df = store.load(root)
    table = mwa.agreement_by_dose(df, root, n_boot=200).set_index("models")
    assert list(table.index) == ["base models", "base + dose 10 twins", "base + dose 40 twins", "all models"]
    assert table.loc["base models", "mean_tau_direct_eval"] == pytest.approx(1.0)     # identical rankings
    direct = table["mean_tau_direct_eval"]
    assert direct["base + dose 40 twins"] < direct["base + dose 10 twins"] < direct["base models"]
    assert (table["mean_tau_train_before_test"] > 0.99).all()                       # fine-tuning: no effect
    assert (table["gain_ci_low"] <= table["gain"]).all() and (table["gain"] <= table["gain_ci_high"]).all()
    response = mwa.dose_response(mwa.rank_table(df, root), n_boot=200).set_index("dose")
    assert list(response.index) == [0, 10, 40]
    assert response.loc[0, "twin_gap_direct_eval"] == pytest.approx(0.0005)        # the control: no lead
    assert response.loc[40, "twin_gap_direct_eval"] == pytest.approx(0.5005)
    assert response.loc[10, "twin_gap_direct_eval"] == pytest.approx(0.1255)
    assert response["twin_gap_train_before_test"].tolist() == pytest.approx([0.0005] * 3)
    assert response.loc[40, "shift"] > 0 and response.loc[10, "shift"] >= 0 and response.loc[0, "shift"] == 0


def test_mean_tau_of_resampled_models_equals_scipy():
    """The estimator agreement_by_dose bootstraps (uncertainty.mean_pair_tau on draw counts),
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
