"""lib.analysis.noise: split-half reliability and the noise ceiling on synthetic benchmarks whose true
rankings and noise are known, from standard errors and from per-item results."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lib import layout, store
from lib.analysis import agreement, noise


def _from_stderr(scores: dict[str, np.ndarray], se: dict[str, np.ndarray]) -> noise.Measurements:
    models = [f"m{i}" for i in range(len(next(iter(scores.values()))))]
    s, e = pd.DataFrame(scores, index=models), pd.DataFrame(se, index=models)
    return noise.Measurements("p", s, e, {b: noise.STDERR for b in scores})


def _from_items(items: dict[str, np.ndarray]) -> noise.Measurements:
    models = [f"m{i}" for i in range(len(next(iter(items.values()))))]
    s = pd.DataFrame({b: m.mean(axis=1) for b, m in items.items()}, index=models)
    return noise.Measurements("p", s, s * np.nan, {b: noise.ITEMS for b in items}, dict(items))


def _pair_stats(meas: noise.Measurements, seed: int) -> tuple[float, float]:
    rel = noise.reliabilities(meas, halvings=60, seed=seed)["reliability"]
    tau = stats.kendalltau(meas.scores["a"], meas.scores["b"]).statistic
    return float(tau), float(noise.ceiling(rel["a"], rel["b"]))


def test_identical_true_rankings_land_near_the_ceiling_from_standard_errors():
    """Two benchmarks measure the same ability through different monotone transforms and noise
    levels: their observed tau, averaged over replications, matches the estimated ceiling."""
    rng = np.random.default_rng(0)
    taus, ceilings = [], []
    for rep in range(40):
        t = rng.normal(size=40)
        true_a, true_b = 0.5 + 0.1 * t, np.exp(0.3 * t) / 5            # identical rankings
        se_a, se_b = np.full(40, 0.04), 0.06 * true_b                   # heteroscedastic noise on b
        tau, ceil = _pair_stats(_from_stderr({"a": true_a + se_a * rng.normal(size=40),
                                              "b": true_b + se_b * rng.normal(size=40)},
                                             {"a": se_a, "b": se_b}), rep)
        taus.append(tau)
        ceilings.append(ceil)
    assert 0.5 < np.mean(ceilings) < 0.95                               # noise matters here
    assert np.mean(taus) == pytest.approx(np.mean(ceilings), abs=0.04)


def test_identical_true_rankings_land_near_the_ceiling_from_items():
    rng = np.random.default_rng(1)
    taus, ceilings = [], []
    for rep in range(30):
        t = rng.normal(size=30)
        a = (rng.random((30, 120)) < stats.norm.cdf(0.5 * t + 0.3)[:, None]).astype(float)
        b = (rng.random((30, 200)) < stats.norm.cdf(0.4 * t)[:, None]).astype(float)
        tau, ceil = _pair_stats(_from_items({"a": a, "b": b}), rep)
        taus.append(tau)
        ceilings.append(ceil)
    assert 0.5 < np.mean(ceilings) < 0.95
    assert np.mean(taus) == pytest.approx(np.mean(ceilings), abs=0.04)


def test_independent_rankings_stay_near_zero_after_correction():
    rng = np.random.default_rng(2)
    corrected = []
    for rep in range(40):
        se = np.full(40, 0.03)
        meas = _from_stderr({"a": 0.5 + 0.1 * rng.normal(size=40) + se * rng.normal(size=40),
                             "b": 0.5 + 0.1 * rng.normal(size=40) + se * rng.normal(size=40)}, {"a": se, "b": se})
        tau, ceil = _pair_stats(meas, rep)
        corrected.append(tau / ceil)
    assert abs(np.mean(corrected)) < 0.05


def test_split_half_reliability_extremes_and_spearman_brown():
    rng = np.random.default_rng(3)
    strong = (rng.random((20, 400)) < np.linspace(0.1, 0.9, 20)[:, None]).astype(float)   # well separated
    chance = (rng.random((20, 400)) < 0.5).astype(float)                                  # no true differences
    rel = noise.reliabilities(_from_items({"strong": strong, "chance": chance}), halvings=50)
    assert rel.loc["strong", "reliability"] > 0.97
    assert rel.loc["chance", "reliability"] < 0.35
    assert float(noise.spearman_brown(0.5)) == pytest.approx(2 / 3)
    assert float(noise.spearman_brown(-0.2)) == 0.0
    assert float(noise.rho_to_tau(noise.tau_to_rho(0.4))) == pytest.approx(0.4)
    assert float(noise.ceiling(1.0, 1.0)) == pytest.approx(1.0)


def _store_with_missing_stderr(root):
    rng = np.random.default_rng(4)
    models = [f"m{i}" for i in range(10)]
    store.write_meta(root, "models", {m: {"family": "t"} for m in models})
    store.write_meta(root, "benchmarks", {"qa": {"category": "Question Answering", "metric": "acc", "chance": 0.25},
                                          "nli": {"category": "Language Understanding", "metric": "acc",
                                                  "chance": 0.5},
                                          "gen": {"category": "Math", "metric": "exact_match", "chance": 0.0}})
    ability = np.linspace(0, 1, 10)
    for p in store.PROTOCOLS:
        for m, a in zip(models, ability):
            store.write(root, store.Result(p, "qa", m, "acc", 0.3 + 0.5 * a + rng.normal(scale=0.02), stderr=0.02))
            store.write(root, store.Result(p, "nli", m, "acc", 0.52 + 0.02 * rng.normal(), stderr=0.03))
            store.write(root, store.Result(p, "gen", m, "exact_match", 0.2 + 0.6 * a, stderr=None))   # no noise known
    return store.load(root)


def test_missing_standard_errors_are_reported_once_and_left_out_of_the_ceiling(tmp_path):
    df = _store_with_missing_stderr(tmp_path)
    rep = agreement.agreement_report(df, tmp_path, n_boot=50)
    lines = [n for n in rep["notes"] if "no standard errors" in n]
    assert len(lines) == 1 and "gen" in lines[0] and "not treated as noise-free" in lines[0]
    pairs = rep["ceiling"]["pairs"].set_index(["a", "b"])
    gen_pairs = [k for k in pairs.index if "gen" in k]
    assert len(gen_pairs) == 2 and pairs.loc[gen_pairs, "ceiling_direct_eval"].isna().all()
    assert rep["summary"]["noise_ceiling"]["direct_eval"]["n_pairs"] == 1          # only qa-nli has a ceiling
    quality = rep["quality"].set_index(["benchmark", "protocol"])
    assert quality.loc[("gen", "direct_eval"), "source"] == noise.MISSING
    assert "noise unknown" in quality.loc[("gen", "direct_eval"), "reasons"]
    assert quality.loc[("gen", "direct_eval"), "cannot_rank"]
    # qa ranks well; nli sits at chance with no true differences: flagged on all three counts
    assert not quality.loc[("qa", "direct_eval"), "cannot_rank"]
    nli = quality.loc[("nli", "direct_eval"), "reasons"]
    assert "outside [chance" in nli and "se of a difference" in nli and "reliability" in nli
    assert rep["summary"]["cannot_rank"]["direct_eval"] == ["gen", "nli"]


def test_per_item_files_are_preferred_to_standard_errors(tmp_path):
    df = _store_with_missing_stderr(tmp_path / "store")
    rng = np.random.default_rng(5)
    models = sorted(df["model"].unique())
    for k, m in enumerate(models):
        correct = (rng.random(80) < 0.2 + 0.06 * k).astype(float).tolist()
        layout.write_items(tmp_path / "work", store.DIRECT, "gen", m, metric="exact_match", doc_ids=list(range(80)),
                           correct=correct)
    meas = noise.load_measurements(df, store.DIRECT, ["qa", "gen"], tmp_path / "work")
    assert meas.source == {"qa": noise.STDERR, "gen": noise.ITEMS} and meas.n_items("gen") == 80
    items = meas.items["gen"]
    assert meas.stderr.loc[models[3], "gen"] == pytest.approx(items[3].std(ddof=1) / np.sqrt(80))
    h1, h2 = noise.halves(meas, "gen", halvings=5, seed=0)
    assert h1.shape == (10, 5) and np.allclose((h1 + h2) / 2, items.mean(axis=1)[:, None])   # 40 + 40 items
    bad = layout.items_path(tmp_path / "work", store.DIRECT, "gen", models[0])
    bad.write_text('{"model": "m0", "benchmark": "gen", "doc_ids": [1, 2], "correct": [1.0, 2.0]}')
    with pytest.raises(layout.ItemFileError, match=r"m0\.json: values that are not numbers in \[0, 1\], e.g. 2.0"):
        noise.load_measurements(df, store.DIRECT, ["gen"], tmp_path / "work")
