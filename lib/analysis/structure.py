"""Low-dimensional structure of the model x benchmark matrix: PCA with standardised columns.

If one latent "general ability" explains model scores, the first principal component carries
most of the variance; the paper finds that it does so far more under train-before-test, and that
PC1 tracks pre-training compute. Pure functions on matrices from :func:`lib.store.matrix`.

Conventions: columns are z-scored (population standard deviation, as sklearn's StandardScaler);
models missing any benchmark are dropped (PCA needs a complete matrix) and so are constant
columns; the sign of each component is fixed so that its loadings sum to a positive number (PC1
then grows with better scores).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats


@dataclass
class PCAResult:
    explained: pd.Series          # explained-variance ratio, index PC1..PCk
    scores: pd.DataFrame          # model x component
    loadings: pd.DataFrame        # benchmark x component (unit vectors)
    n_models: int
    dropped_models: list[str] = field(default_factory=list)
    dropped_benchmarks: list[str] = field(default_factory=list)


def standardise(matrix: pd.DataFrame) -> pd.DataFrame:
    """Column z-scores (mean 0, population std 1)."""
    return (matrix - matrix.mean()) / matrix.std(ddof=0)


def pca(matrix: pd.DataFrame, min_models: int = 3) -> PCAResult | None:
    """PCA of the standardised complete part of ``matrix``; None when fewer than ``min_models``
    complete models or fewer than two non-constant benchmarks remain."""
    complete = matrix.dropna(axis=0, how="any")
    dropped_models = sorted(set(matrix.index) - set(complete.index))
    varying = [c for c in complete.columns if complete[c].nunique() > 1]
    dropped_b = [c for c in complete.columns if c not in varying]
    complete = complete[varying]
    if len(complete) < max(2, min_models) or complete.shape[1] < 2:
        return None
    z = standardise(complete).to_numpy(float)
    u, s, vt = np.linalg.svd(z, full_matrices=False)
    signs = np.sign(vt.sum(axis=1))
    signs[signs == 0] = 1
    vt, u = vt * signs[:, None], u * signs[None, :]
    var = s ** 2
    names = [f"PC{i + 1}" for i in range(len(s))]
    explained = pd.Series(var / var.sum(), index=names, name="explained_variance_ratio")
    scores = pd.DataFrame(u * s, index=complete.index, columns=names)
    loadings = pd.DataFrame(vt.T, index=complete.columns, columns=names)
    return PCAResult(explained, scores, loadings, len(complete), dropped_models, dropped_b)


def by_group(matrix: pd.DataFrame, groups: pd.Series, min_models: int = 3) -> pd.DataFrame:
    """PC1 (and PC2) explained-variance ratio within each group (e.g. family) with enough models.

    Columns: group, n_models, pc1, pc2 (NaN for groups too small to analyse).
    """
    rows = []
    for name, members in groups.groupby(groups).groups.items():
        res = pca(matrix.loc[list(members)], min_models)
        rows.append({"group": name, "n_models": len(members),
                     "pc1": float(res.explained.iloc[0]) if res else np.nan,
                     "pc2": float(res.explained.iloc[1]) if res and len(res.explained) > 1 else np.nan})
    return pd.DataFrame(rows, columns=["group", "n_models", "pc1", "pc2"])


def pc1_vs_compute(scores: pd.Series, flops: pd.Series, min_models: int = 3) -> dict:
    """Correlation of PC1 score with log10 pre-training FLOPs on the models where both are known:
    {"n_models", "pearson_r", "spearman_rho", "slope"} (NaN when fewer than ``min_models``)."""
    both = pd.concat({"pc1": scores, "flops": flops}, axis=1, join="inner").dropna()
    both = both[both["flops"] > 0]
    n = len(both)
    if n < max(3, min_models):
        return {"n_models": n, "pearson_r": float("nan"), "spearman_rho": float("nan"), "slope": float("nan")}
    x = np.log10(both["flops"].to_numpy(float))
    y = both["pc1"].to_numpy(float)
    fit = stats.linregress(x, y)
    return {"n_models": n, "pearson_r": float(fit.rvalue),
            "spearman_rho": float(stats.spearmanr(x, y).statistic), "slope": float(fit.slope)}
