"""lib.analysis.agreement: Kendall tau-b with ties, missing models, orientation, tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lib import store
from lib.analysis import agreement


def test_tau_b_with_ties_hand_computed():
    x = pd.Series([1.0, 2.0, 3.0, 4.0], index=list("abcd"))
    y = pd.Series([1.0, 2.0, 2.0, 3.0], index=list("abcd"))
    # 6 pairs: 5 concordant, 0 discordant, 1 tied in y only -> 5 / sqrt(6 * 5)
    tau, n = agreement.kendall_tau(x, y)
    assert n == 4 and tau == pytest.approx(5 / math.sqrt(30))
    rev, _ = agreement.kendall_tau(x, -y)
    assert rev == pytest.approx(-5 / math.sqrt(30))


def test_tau_uses_only_common_models_and_nan_when_too_few():
    a = pd.Series({"m1": 0.1, "m2": 0.2, "m3": 0.3, "m4": 0.4, "m5": np.nan})
    b = pd.Series({"m2": 0.5, "m3": 0.4, "m4": 0.9, "m5": 0.1, "m6": 0.3})
    tau, n = agreement.kendall_tau(a, b)          # common and finite: m2, m3, m4
    assert n == 3 and tau == pytest.approx(stats.kendalltau([0.2, 0.3, 0.4], [0.5, 0.4, 0.9]).statistic)
    assert math.isnan(agreement.kendall_tau(a, b, min_models=4)[0])
    const = pd.Series({"m2": 1.0, "m3": 1.0, "m4": 1.0})
    assert math.isnan(agreement.kendall_tau(a, const)[0])


def _frame(rows):
    return pd.DataFrame([dict(zip(["protocol", "benchmark", "model", "score", "higher_is_better"], r),
                              metric="acc", stderr=None, n=None, provenance={}) for r in rows],
                        columns=store.COLUMNS)


def test_compare_protocols_orients_lower_is_better_and_counts_improvements():
    models = ["m1", "m2", "m3", "m4"]
    good = [0.1, 0.2, 0.3, 0.4]
    rows = []
    for p, other in (("direct_eval", [0.4, 0.1, 0.3, 0.2]), ("train_before_test", [0.1, 0.3, 0.2, 0.4])):
        rows += [(p, "x", m, s, True) for m, s in zip(models, good)]
        rows += [(p, "y", m, s, True) for m, s in zip(models, other)]
        rows += [(p, "ppl", m, -s, False) for m, s in zip(models, good)]   # lower is better, same order
    pairs = agreement.compare_protocols(_frame(rows), ["x", "y", "ppl"])
    by = {(r.a, r.b): r for r in pairs.itertuples()}
    assert by[("x", "ppl")].tau_direct_eval == pytest.approx(1.0)      # negated before ranking
    assert by[("x", "y")].tau_direct_eval == pytest.approx(stats.kendalltau(good, [0.4, 0.1, 0.3, 0.2]).statistic)
    assert by[("x", "y")].tau_train_before_test == pytest.approx(2 / 3)
    assert int(pairs["improved"].sum()) == 2                            # x-y and y-ppl improve, x-ppl stays 1


def test_tables_per_benchmark_category_and_rank_plot():
    pairs = pd.DataFrame({"a": ["p", "p", "q"], "b": ["q", "r", "r"], "tau": [0.2, 0.4, 0.9]})
    per = agreement.per_benchmark_mean(pairs)
    assert per.to_dict() == pytest.approx({"p": 0.3, "q": 0.55, "r": 0.65})
    cats = agreement.category_matrix(pairs, {"p": "A", "q": "A", "r": "B"})
    assert cats.loc["A", "A"] == pytest.approx(0.2)
    assert cats.loc["A", "B"] == cats.loc["B", "A"] == pytest.approx(0.65)
    assert math.isnan(cats.loc["B", "B"])                               # one benchmark: no pair
    mat = agreement.tau_matrix(pairs)
    assert mat.loc["r", "p"] == 0.4 and mat.loc["q", "q"] == 1.0
    m = pd.DataFrame({"p": [0.9, 0.5, 0.1, np.nan], "q": [0.2, 0.8, 0.5, 0.4]}, index=["a", "b", "c", "d"])
    data = agreement.rank_plot_data(m, "p", "q")
    assert data.set_index("model")[["rank_a", "rank_b"]].to_dict("index") == {
        "a": {"rank_a": 1.0, "rank_b": 3.0}, "b": {"rank_a": 2.0, "rank_b": 1.0}, "c": {"rank_a": 3.0, "rank_b": 2.0}}
    assert agreement.most_improved_pair(pairs.assign(delta=[0.1, 0.5, -0.2])) == ("p", "r")
    counts = agreement.category_counts(pairs, {"p": "A", "q": "A", "r": "B"})
    assert counts.to_dict("index") == {"A": {"A": 1, "B": 2}, "B": {"A": 2, "B": 0}}
    cells = agreement.category_cells({"x": cats}, counts)
    assert cells["cells"] == [["A", "A"], ["B", "B"], ["A", "B"]] and cells["n_pairs"] == [1, 0, 2]
    assert cells["tau"]["x"][0] == pytest.approx(0.2) and math.isnan(cells["tau"]["x"][1])


def test_the_rank_plot_is_the_papers_figure_1_where_its_benchmarks_are():
    pairs = pd.DataFrame({"a": ["arc_challenge", "nq_open"], "b": ["nq_open", "wic"], "delta": [0.3, 0.6]})
    names = ["arc_challenge", "nq_open", "wic"]
    models = ["google/gemma-2-9b", "openai-community/gpt2"]
    assert agreement.choose_rank_pair([], pairs, names, models=models) == (("nq_open", "arc_challenge"),
                                                                           ["google/gemma-2-9b"])
    assert agreement.choose_rank_pair(["most_improved"], pairs, names, models=models) == (("nq_open", "wic"), [])
    assert agreement.choose_rank_pair([], pairs, ["nq_open", "wic"], models=models) == (("nq_open", "wic"), [])
    assert agreement.choose_rank_pair(["wic", "nq_open"], pairs, names, ["openai-community/gpt2"], models) == (
        ("wic", "nq_open"), ["openai-community/gpt2"])
    with pytest.raises(ValueError, match=r"rank_plot_pair: 'wik' is not a downstream benchmark here \(did you mean"):
        agreement.choose_rank_pair(["wik", "nq_open"], pairs, names, models=models)
    with pytest.raises(ValueError, match=r"rank_plot_highlight: 'gpt3' is not a model here"):
        agreement.choose_rank_pair([], pairs, names, ["gpt3"], models)


def test_within_checks_compute_a_category_other_ways():
    rng = np.random.default_rng(0)
    base = rng.normal(size=12)
    mat = pd.DataFrame({b: base + rng.normal(scale=s, size=12) for b, s in (("p", 0.3), ("q", 0.5), ("r", 2.0),
                                                                             ("s", 0.1))},
                       index=[f"m{i}" for i in range(12)])
    mat["q"] = mat["q"].round(0)                                         # ties: tau-a, -b and -c differ
    checks = agreement.within_checks({"d": mat, "t": mat}, {"p": "A", "q": "A", "r": "A", "s": "B"},
                                     {"first half": list(mat.index[:6])}, protocols=("d", "t"))
    assert list(checks) == ["A"]                                         # B has one benchmark
    rows = {r["check"]: r["d"] for r in checks["A"]}
    taus = [stats.kendalltau(mat[a], mat[b]).statistic for a, b in (("p", "q"), ("p", "r"), ("q", "r"))]
    assert rows["tau-b, mean over its pairs (the tables')"] == pytest.approx(np.mean(taus))
    assert rows["median over its pairs"] == pytest.approx(np.median(taus))
    assert rows["tau-a"] < rows["tau-b, mean over its pairs (the tables')"]          # ties count as neither
    assert rows["without r (highest)"] == pytest.approx(taus[0])         # the noisy benchmark left out
    assert rows["first half (6 models) (lowest)"] == rows["first half (6 models) (highest)"]
