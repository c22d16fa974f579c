"""lib.analysis.uncertainty: the vectorised bootstrap over models against closed forms and scipy."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lib import store
from lib.analysis import agreement, structure, uncertainty


def test_bootstrap_of_a_mean_reproduces_its_closed_form_standard_error():
    """Resampling n normal draws: the spread of the drawn means is the plug-in standard error
    sd / sqrt(n) (population sd), and the 95 % interval is mean +- 1.96 of it."""
    rng = np.random.default_rng(3)
    x = rng.normal(loc=2.0, scale=1.5, size=200)
    w = uncertainty.draws(len(x), n_boot=4000, seed=1)
    means = (w @ x) / w.sum(axis=1)
    se = x.std(ddof=0) / math.sqrt(len(x))
    assert means.std() == pytest.approx(se, rel=0.05)
    lo, hi = uncertainty.interval(means)
    assert lo == pytest.approx(x.mean() - 1.96 * se, abs=0.15 * se)
    assert hi == pytest.approx(x.mean() + 1.96 * se, abs=0.15 * se)


def test_draws_are_counts_and_deterministic_for_a_seed():
    a = uncertainty.draws(7, 50, seed=4)
    assert a.shape == (50, 7) and (a.sum(axis=1) == 7).all() and (a >= 0).all()
    assert np.array_equal(a, uncertainty.draws(7, 50, seed=4))
    assert not np.array_equal(a, uncertainty.draws(7, 50, seed=5))
    assert uncertainty.interval([np.nan, np.nan]) == [pytest.approx(np.nan, nan_ok=True)] * 2
    with pytest.raises(ValueError, match="n >= 1"):
        uncertainty.draws(0, 10)


def test_weighted_tau_is_scipy_tau_b_on_the_expanded_sample():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, size=(15, 4)).astype(float)       # many ties
    x[2, 1] = x[7, 3] = np.nan                                # missing scores drop a model pairwise
    pairs = [(0, 1), (1, 3), (2, 3), (0, 3)]
    w = uncertainty.draws(15, 30, seed=2)
    taus = uncertainty.weighted_tau(x, pairs, w)
    for d in (0, 9, 29):
        rows = np.repeat(np.arange(15), w[d].astype(int))
        for k, (a, b) in enumerate(pairs):
            xa, xb = x[rows, a], x[rows, b]
            keep = np.isfinite(xa) & np.isfinite(xb)
            expected = stats.kendalltau(xa[keep], xb[keep], variant="b").statistic
            assert taus[d, k] == pytest.approx(expected, abs=1e-12) or (math.isnan(expected) and math.isnan(taus[d, k]))
    plain = uncertainty.weighted_tau(x, pairs)[0]
    for k, (a, b) in enumerate(pairs):
        assert plain[k] == pytest.approx(agreement.tau_arrays(x[:, a], x[:, b])[0], abs=1e-12)
    # a draw with a single distinct model (or a constant column) has no tau
    one = np.zeros((1, 15), np.float32)
    one[0, 3] = 15
    assert np.isnan(uncertainty.weighted_tau(x, pairs, one)).all()
    halves = uncertainty.paired_tau(x[:, :2], x[:, 2:])
    assert halves[0] == pytest.approx(agreement.tau_arrays(x[:, 0], x[:, 2])[0], abs=1e-12)


def test_pca_draws_match_sklearn_pca_and_pearson_on_the_expanded_sample():
    rng = np.random.default_rng(5)
    ability = rng.normal(size=20)
    x = ability[:, None] * rng.uniform(0.5, 2, 6) + 0.4 * rng.normal(size=(20, 6))
    flops = 10 ** (ability + rng.normal(scale=0.3, size=20))
    base = np.arange(20) % 3 != 0
    w = uncertainty.draws(20, 5, seed=0)
    out = uncertainty.pca_draws(x, w, np.log10(flops), {"all": np.ones(20, bool), "base": base})
    assert uncertainty.pca_draws(x)["pc1"][0] == pytest.approx(structure.pca(pd.DataFrame(x)).explained.iloc[0])
    for d in range(5):
        rows = np.repeat(np.arange(20), w[d].astype(int))
        names = [f"m{i}" for i in range(len(rows))]
        fit = structure.pca(pd.DataFrame(x[rows], index=names))
        assert out["pc1"][d] == pytest.approx(fit.explained.iloc[0], abs=1e-10)
        flop = pd.Series(flops[rows], index=names)
        assert out["r"]["all"][d] == pytest.approx(structure.pc1_vs_compute(fit.scores["PC1"], flop)["pearson_r"],
                                                   abs=1e-9)
        keep = [n for n, r in zip(names, rows) if base[r]]
        assert out["r"]["base"][d] == pytest.approx(
            structure.pc1_vs_compute(fit.scores["PC1"][keep], flop)["pearson_r"], abs=1e-9)


def _frame(matrices: dict[str, pd.DataFrame]) -> pd.DataFrame:
    rows = [{"protocol": p, "benchmark": b, "model": m, "score": float(v), "metric": "acc", "stderr": 0.01,
             "higher_is_better": True, "n": 100, "provenance": {}}
            for p, mat in matrices.items() for b in mat.columns for m, v in mat[b].items()]
    return pd.DataFrame(rows, columns=store.COLUMNS)


@pytest.fixture
def synthetic_store(tmp_path):
    """12 models x 4 benchmarks: under direct evaluation the benchmarks rank the models from
    unrelated abilities; under train-before-test from one ability (+ small noise)."""
    rng = np.random.default_rng(11)
    models = [f"f{i % 3}/m{i}" for i in range(12)]
    bench = ["b1", "b2", "b3", "b4"]
    ability = rng.normal(size=12)
    direct = pd.DataFrame(rng.normal(size=(12, 4)), index=models, columns=bench)
    tbt = pd.DataFrame(ability[:, None] + 0.2 * rng.normal(size=(12, 4)), index=models, columns=bench)
    store.write_meta(tmp_path, "models", {m: {"family": m.split("/")[0], "instruct": i % 2 == 1}
                                          for i, m in enumerate(models)})
    store.write_meta(tmp_path, "benchmarks", {b: {"category": "Question Answering", "metric": "acc", "chance": 0.0}
                                              for b in bench})
    return tmp_path, _frame({store.DIRECT: direct, store.TBT: tbt})


def test_agreement_intervals_are_deterministic_for_a_seed_and_paired(synthetic_store):
    root, df = synthetic_store
    one = agreement.agreement_report(df, root, n_boot=200, seed=3)["summary"]
    two = agreement.agreement_report(df, root, n_boot=200, seed=3)["summary"]
    other = agreement.agreement_report(df, root, n_boot=200, seed=4)["summary"]
    keys = ("mean_tau_ci", "mean_tau_gain_ci", "pairs_improved_ci", "benchmark_mean_tau_ci")
    assert all(one[k] == two[k] for k in keys)
    assert one["mean_tau_gain_ci"] != other["mean_tau_gain_ci"]
    for p in store.PROTOCOLS:
        lo, hi = one["mean_tau_ci"][p]
        assert lo <= one["mean_tau"][p] <= hi
    assert one["mean_tau_gain"] == pytest.approx(one["mean_tau"][store.TBT] - one["mean_tau"][store.DIRECT])
    assert one["mean_tau_gain_excludes_zero"] and one["mean_tau_gain_ci"][0] > 0
    assert "excludes 0" in agreement.gain_statement(one)
    table = agreement.headline_table(one)
    assert table.loc[("mean_tau_gain", "train_before_test - direct_eval"), "estimate"] == one["mean_tau_gain"]


def _spearman_of_resamples(S: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Reference: Spearman rho of each row of S (B x n) against the matching row of y, on explicitly
    resampled values (what BenchAlign computed before it used count weights)."""
    rs, ry = stats.rankdata(S, axis=-1), stats.rankdata(y, axis=-1)
    rs, ry = rs - rs.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
    den = np.sqrt((rs ** 2).sum(-1) * (ry ** 2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rs * ry).sum(-1) / den, np.nan)


@pytest.mark.parametrize("n", [3, 12, 90])
def test_weighted_rank_statistics_equal_those_of_the_resamples_bit_for_bit(n):
    """Count weights give exactly (not approximately) Spearman's rho and pairwise accuracy of the
    resampled values, ties included, so BenchAlign's intervals kept every digit."""
    rng = np.random.default_rng(n)
    x, y = np.round(rng.random(n), 1), rng.random(n)               # ties in x
    w = uncertainty.draws(n, n_boot=200, seed=4)
    picks = np.random.default_rng(4).integers(0, n, size=(200, n))  # the same draws, as positions
    assert np.array_equal(w, np.stack([np.bincount(p, minlength=n) for p in picks]))
    assert np.array_equal(uncertainty.weighted_spearman(x, y, w), _spearman_of_resamples(x[picks], y[picks]),
                          equal_nan=True)
    for b in (0, 99):
        xb, yb = x[picks[b]], y[picks[b]]
        above = yb[:, None] > yb[None, :]
        agree = (xb[:, None] > xb[None, :]) + 0.5 * (xb[:, None] == xb[None, :])
        expected = (above * agree).sum() / above.sum() if above.any() else np.nan     # no ordered pair: NaN
        assert uncertainty.weighted_pair_accuracy(x, y, w)[b] == pytest.approx(expected, nan_ok=True)
    assert np.isnan(uncertainty.weighted_spearman(np.ones(n), y, w)).all()       # a constant side
