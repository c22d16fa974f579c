"""lib.analysis.structure: PCA of standardised columns, per group, PC1 against compute."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lib.analysis import structure


def _matrix(seed=0, n=12, k=5):
    rng = np.random.default_rng(seed)
    ability = rng.normal(size=n)
    data = ability[:, None] * rng.uniform(0.5, 2, size=k)[None, :] + 0.3 * rng.normal(size=(n, k))
    return pd.DataFrame(data * rng.uniform(0.1, 10, size=k) + 5, index=[f"m{i}" for i in range(n)],
                        columns=[f"b{j}" for j in range(k)]), ability


def test_pca_matches_correlation_matrix_eigenvalues():
    m, ability = _matrix()
    res = structure.pca(m)
    eig = np.sort(np.linalg.eigvalsh(np.corrcoef(m.to_numpy().T)))[::-1]     # standardised = correlation
    assert res.explained.to_numpy() == pytest.approx(eig / eig.sum())
    assert res.explained.sum() == pytest.approx(1.0)
    assert res.loadings["PC1"].sum() > 0                                        # sign convention
    assert np.corrcoef(res.scores["PC1"], ability)[0, 1] > 0.9                  # PC1 = the shared ability


def test_rank_one_matrix_has_one_component_and_incomplete_rows_are_dropped():
    base = np.arange(1.0, 7.0)
    m = pd.DataFrame({"a": base, "b": 2 * base + 1, "c": 10 - base, "const": 1.0}, index=list("uvwxyz"))
    m.loc["z", "a"] = np.nan
    res = structure.pca(m)
    assert res.explained.iloc[0] == pytest.approx(1.0)
    assert res.dropped_models == ["z"] and res.dropped_benchmarks == ["const"] and res.n_models == 5
    assert structure.pca(m.iloc[:2]) is None                                    # too few models


def test_by_group_and_compute():
    m, _ = _matrix(n=10)
    groups = pd.Series(["A"] * 6 + ["B"] * 2 + ["C"] * 2, index=m.index)
    table = structure.by_group(m, groups, min_models=3).set_index("group")
    assert table.loc["A", "pc1"] == pytest.approx(structure.pca(m.iloc[:6]).explained.iloc[0])
    assert math.isnan(table.loc["B", "pc1"]) and table.loc["B", "n_models"] == 2
    scores = pd.Series([1.0, 2.0, 3.0, 4.0, 5.0], index=list("abcde"))
    flops = pd.Series({"a": 10.0, "b": 100.0, "c": 1000.0, "d": 1e4, "e": np.nan, "f": 5.0})
    out = structure.pc1_vs_compute(scores, flops)
    assert out["n_models"] == 4 and out["pearson_r"] == pytest.approx(1.0) and out["slope"] == pytest.approx(1.0)
    assert math.isnan(structure.pc1_vs_compute(scores[:2], flops)["pearson_r"])
