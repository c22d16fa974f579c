"""lib.analysis.robustness (gains on subsets of models) and lib.analysis.budget (agreement along the
validation curves)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lib import store
from lib.analysis import agreement, budget, robustness, structure


def _models() -> pd.DataFrame:
    names = [f"{fam}/m{i}" for fam in ("a", "b", "c") for i in range(4)] + ["d/x", "d/y"]
    return pd.DataFrame({"family": [n.split("/")[0] for n in names],
                         "instruct": [i % 2 == 1 for i in range(len(names))]}, index=names)


def test_subsets_leave_out_each_family_and_skip_small_ones():
    models = _models()
    subsets, notes = robustness.model_subsets(models, complete=list(models.index[:10]), min_models=3)
    assert subsets[robustness.ALL] == list(models.index)
    assert subsets["without a"] == [m for m in models.index if not m.startswith("a/")]
    assert len(subsets["base models only"]) == 7 and len(subsets["instruct models only"]) == 7
    assert subsets[robustness.COMPLETE] == list(models.index[:10])
    small, _ = robustness.model_subsets(models.iloc[:4], complete=[], min_models=3)
    assert set(small) == {robustness.ALL}                      # one family only: nothing else has 3 models
    assert notes == []
    _, small_notes = robustness.model_subsets(models.iloc[:4], complete=[], min_models=3)
    assert "without a (0)" in small_notes[0] and "base models only (2)" in small_notes[0]


def test_gains_on_a_subset_equal_the_analyses_run_on_that_subset():
    rng = np.random.default_rng(0)
    models = _models()
    ability = rng.normal(size=len(models))
    cols = ["q1", "q2", "q3", "q4"]
    direct = pd.DataFrame(rng.normal(size=(len(models), 4)), index=models.index, columns=cols)
    tbt = pd.DataFrame(ability[:, None] + 0.3 * rng.normal(size=(len(models), 4)), index=models.index, columns=cols)
    mats = {store.DIRECT: direct, store.TBT: tbt}
    subsets, _ = robustness.model_subsets(models, complete=list(models.index), min_models=3)
    tau = robustness.gain(mats, subsets, "tau", n_boot=100, seed=1).set_index("subset")
    pc1 = robustness.gain(mats, subsets, "pc1", n_boot=100, seed=1).set_index("subset")
    keep = subsets["without b"]
    for p, m in mats.items():
        expected = agreement.mean_tau(agreement.pair_table(m.loc[keep]))
        assert tau.loc["without b", p] == pytest.approx(expected, abs=1e-12)
        assert pc1.loc["without b", p] == pytest.approx(structure.pca(m.loc[keep]).explained.iloc[0], abs=1e-12)
    row = tau.loc[robustness.ALL]
    assert row["gain"] == pytest.approx(row[store.TBT] - row[store.DIRECT])
    assert row["gain_lo"] < row["gain"] < row["gain_hi"] and row["gain_lo"] > 0    # agreement clearly rises
    assert robustness.summary(tau.reset_index())[robustness.ALL]["gain_ci"] == [row["gain_lo"], row["gain_hi"]]


def _curves() -> pd.DataFrame:
    """6 models x 3 benchmarks x 2 learning rates x 3 epochs: validation scores that converge to one
    ranking (the model index) as epochs pass; lr 0.2 converges faster."""
    rng = np.random.default_rng(2)
    rows = []
    for m in range(6):
        for b in ("b1", "b2", "b3"):
            start = rng.random()
            for lr, speed in ((0.1, 0.3), (0.2, 0.6)):
                for epoch in (1, 2, 3):
                    mix = min(1.0, speed * epoch)
                    rows.append({"model": f"m{m}", "benchmark": b, "lr": lr, "epoch": epoch,
                                 "val_score": (1 - mix) * start + mix * m / 5, "train_loss": 1.0,
                                 "best_of_unit": False})
    return pd.DataFrame(rows)


def test_budget_follows_the_curves_and_best_so_far_is_the_running_maximum():
    curves = _curves()
    mats = budget.curve_matrices(curves, ["b1", "b2", "b3"])
    assert set(mats) == {(f"lr={lr:g}", e) for lr in (0.1, 0.2) for e in (1, 2, 3)} | \
        {(budget.BEST, e) for e in (1, 2, 3)}
    best2 = curves[curves["epoch"] <= 2].groupby(["model", "benchmark"])["val_score"].max().unstack()
    assert np.allclose(mats[(budget.BEST, 2)].to_numpy(), best2[["b1", "b2", "b3"]].to_numpy())
    table = budget.budget_table(curves, ["b1", "b2", "b3"], n_boot=100, seed=0).set_index(["curve", "epoch"])
    for key, mat in mats.items():
        assert table.loc[key, "mean_tau"] == pytest.approx(agreement.mean_tau(agreement.pair_table(mat)), abs=1e-12)
    assert table.loc[("lr=0.2", 2), "mean_tau"] == pytest.approx(1.0)      # converged: one ranking
    assert table.loc[("lr=0.1", 1), "mean_tau"] < table.loc[("lr=0.1", 3), "mean_tau"]
    assert budget.summary(table.reset_index())["lr=0.2"]["2"]["mean_tau"] == pytest.approx(1.0)
    assert budget.budget_table(curves.iloc[:0], ["b1"]).empty
