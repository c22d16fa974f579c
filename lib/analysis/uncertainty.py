"""How sure are the headline numbers? A bootstrap over models, computed for all draws at once.

The unit of resampling is the model: a draw picks n models with replacement from the n models of
an analysis and every statistic is recomputed on the drawn models. Both protocols use the same
draws, so a difference between protocols (the gain in mean tau, in PC1 share) is a *paired*
difference. Intervals are percentile intervals (95 % by default) over the draws in which the
statistic is defined (a draw can hold too few distinct models, or a column that is constant on
them); :func:`interval` counts those draws.

A draw is stored as how often it picked each model (a count vector ``w``, :func:`draws`), so every
statistic becomes a weighted sum over models and one matrix product computes it for all draws:

- **Kendall tau-b** (:func:`weighted_tau`). With ``s_a(i, j) = sign(x_ai - x_aj)`` over the
  n (n - 1) / 2 pairs of distinct models, tau-b of a drawn sample is
  ``sum w_i w_j s_a s_b / sqrt(sum w_i w_j |s_a| v_b * sum w_i w_j |s_b| v_a)`` (``v``: both models
  scored on that column). A model drawn twice pairs with itself and is tied on both sides, which
  tau-b leaves out of the numerator and both denominators, so this equals scipy's tau-b on the
  expanded sample exactly. For all draws and all column pairs it is a product of the
  (draws x model pairs) weight matrix with a (model pairs x column pairs) sign matrix (two more for
  the denominators when scores are missing; with none missing they need one product per column),
  in float32 (the sums are small integers, so exact). The mean tau over all pairs
  (:func:`mean_pair_tau`) needs no per-pair product at all when no score is missing.
- **Spearman's rho and pairwise accuracy of a ranking against a target** (:func:`weighted_spearman`,
  :func:`weighted_pair_accuracy`): the expanded sample's average ranks are count-weighted sums,
  so rho needs no resampled copy of the data (BenchAlign's test models, notebook 07).
- **PCA of standardised columns** (:func:`pca_draws`). Each draw's weighted correlation matrix
  (the population correlation of the expanded sample, as scikit-learn's ``StandardScaler`` + ``PCA``
  compute it), its largest eigenvalue (PC1 share = eigenvalue / number of non-constant columns)
  and first eigenvector (PC1 scores, signed so the loadings sum to a positive number), batched
  over draws with ``numpy.linalg.eigh``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

N_BOOT = 1000         # draws
LEVEL = 0.95          # coverage of the percentile intervals


def one_blas_thread(func):
    """Run ``func`` with a single BLAS thread. The bootstrap's matrix products are small (1,000 x
    1,830 at most); two BLAS threads gain nothing on them and, on a machine whose cores are busy
    with other work, made the report functions 2.5 times slower (spinning threads)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            return func(*args, **kwargs)
    return wrapper


def draws(n: int, n_boot: int = N_BOOT, seed: int = 0) -> np.ndarray:
    """(n_boot, n) float32 counts: how often each of n models is picked in each draw (rows sum to n).

    Deterministic for a seed; the same (n, n_boot, seed) gives the same draws everywhere.
    """
    if n < 1 or n_boot < 1:
        raise ValueError(f"draws: need n >= 1 models and n_boot >= 1 draws, got n={n}, n_boot={n_boot}")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(n_boot, n)) + n * np.arange(n_boot)[:, None]
    return np.bincount(picks.ravel(), minlength=n_boot * n).reshape(n_boot, n).astype(np.float32)


def mean_draws(values, n_boot: int = N_BOOT, seed: int = 0) -> np.ndarray:
    """(n_boot,) means of ``values`` over draws of its entries with replacement (:func:`draws`): the
    bootstrap of a mean over the units it averages (a model's mean rank over benchmarks)."""
    v = np.asarray(values, float)
    return draws(len(v), n_boot, seed) @ v / len(v)


def interval(values, level: float = LEVEL) -> list[float]:
    """``[low, high]`` percentile interval of the finite ``values`` (NaN, NaN when none is finite)."""
    v = np.asarray(values, float).ravel()
    v = v[np.isfinite(v)]
    if not len(v):
        return [float("nan"), float("nan")]
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(v, [tail, 100 - tail])
    return [float(lo), float(hi)]


def intervals(values: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """Column-wise :func:`interval` of a (draws x statistics) array: a (statistics x 2) array."""
    values = np.asarray(values, float)
    return np.array([interval(values[:, j], level) for j in range(values.shape[1])]).reshape(-1, 2)


def nanmean_rows(values: np.ndarray) -> np.ndarray:
    """Row means over the finite entries of a 2-D array (NaN for a row without any), silently."""
    v = np.asarray(values, float)
    ok = np.isfinite(v)
    count = ok.sum(axis=1)
    return np.where(count > 0, np.where(ok, v, 0.0).sum(axis=1) / np.maximum(count, 1), np.nan)


# --------------------------------------------------------------------------- Kendall tau
def weighted_tau(matrix: np.ndarray, pairs: Sequence[tuple[int, int]], weights: np.ndarray | None = None,
                 min_models: int = 3, chunk: int | None = None) -> np.ndarray:
    """Kendall tau-b of column pairs of a (models x columns) ``matrix`` under model ``weights``.

    ``pairs``: (column a, column b) index pairs; ``weights``: (draws x models) counts from
    :func:`draws`, or None for the plain sample (all ones). Returns (draws x pairs) taus, NaN where
    fewer than ``min_models`` (counted with their weights) are scored on both columns or a column
    is constant on them. Missing scores (NaN) drop a model from the pairs that need it, as
    :func:`lib.analysis.agreement.tau_arrays` does.
    """
    x = np.asarray(matrix, float)
    n = x.shape[0]
    w = np.ones((1, n), np.float32) if weights is None else np.asarray(weights, np.float32)
    if w.shape[1] != n:
        raise ValueError(f"weighted_tau: weights for {w.shape[1]} models, matrix has {n}")
    a = np.array([p[0] for p in pairs], int)
    b = np.array([p[1] for p in pairs], int)
    if not len(a) or n < 2:
        return np.full((len(w), len(a)), np.nan)
    i, j = np.triu_indices(n, 1)
    diff = (x[i] - x[j]).T                                 # columns x model pairs
    complete = bool(np.isfinite(x).all())
    sign = np.ascontiguousarray(np.nan_to_num(np.sign(diff)), dtype=np.float32)
    untied_q = np.abs(sign)
    num_q = sign[a] * sign[b]                              # column pairs x model pairs (rows gathered)
    if not complete:                                       # a pair's denominators depend on both columns
        valid = np.isfinite(diff).astype(np.float32)
        den_a_q = untied_q[a] * valid[b]
        den_b_q = untied_q[b] * valid[a]
        finite = np.isfinite(x).astype(np.float32)
        both = finite[:, a] * finite[:, b]                 # models x column pairs
    out = np.empty((len(w), len(a)))
    step = chunk or max(1, int(4e6 // max(1, len(i))))
    for start in range(0, len(w), step):
        ws = w[start:start + step]
        wt = np.ascontiguousarray(ws.T)
        wp = wt[i] * wt[j]                                  # model pairs x draws (rows gathered: fast)
        num = (num_q @ wp).T.astype(float)
        if complete:                                       # untied pairs per column: one small product
            untied = (untied_q @ wp).T.astype(float)
            den = untied[:, a] * untied[:, b]
            n_eff = np.broadcast_to(ws.sum(axis=1, dtype=float)[:, None], den.shape)
        else:
            den = (den_a_q @ wp).T.astype(float) * (den_b_q @ wp).T.astype(float)
            n_eff = (ws @ both).astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            tau = num / np.sqrt(den)
        tau[(den <= 0) | (n_eff < max(2, min_models))] = np.nan
        out[start:start + step] = tau
    return out


def mean_pair_tau(matrix: np.ndarray, weights: np.ndarray | None = None, min_models: int = 3) -> np.ndarray:
    """Mean Kendall tau-b over all column pairs of a (models x columns) ``matrix``, per draw: equal to
    the row-wise mean of :func:`weighted_tau` over every pair where tau is defined, without
    computing each pair.

    With no score missing a pair's denominator factorises, sqrt(U_a U_b) with U_a the weighted number
    of model pairs untied on column a, so with r_a = 1 / sqrt(U_a) the sum over column pairs is
    ``sum_p w_p ((sum_a s_pa r_a)^2 - sum_a s_pa^2 r_a^2) / 2``: two (model pairs x columns) x
    (columns x draws) products instead of one with every column pair. Columns constant in a draw
    (U_a = 0) drop out of it, as their taus are undefined. A matrix with missing scores takes the
    pairwise route.
    """
    x = np.asarray(matrix, float)
    n, k = x.shape
    w = np.ones((1, n)) if weights is None else np.asarray(weights, float)
    if not np.isfinite(x).all():
        pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
        return nanmean_rows(weighted_tau(x, pairs, w, min_models))
    i, j = np.triu_indices(n, 1)
    sign = np.sign(x[i] - x[j])                                        # model pairs x columns
    wt = np.ascontiguousarray(w.T)
    wp = wt[i] * wt[j]                                                 # model pairs x draws
    untied = (np.abs(sign).T @ wp).T                                   # draws x columns
    r = np.where(untied > 0, 1 / np.sqrt(np.where(untied > 0, untied, 1.0)), 0.0)
    spread = sign @ r.T                                                # model pairs x draws
    total = 0.5 * np.einsum("pd,pd->d", wp, spread * spread - np.abs(sign) @ (r * r).T)
    varying = (untied > 0).sum(axis=1)
    n_pairs = varying * (varying - 1) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / n_pairs
    return np.where((n_pairs > 0) & (w.sum(axis=1) >= max(2, min_models)), mean, np.nan)


def paired_tau(x: np.ndarray, y: np.ndarray, min_models: int = 3) -> np.ndarray:
    """Kendall tau-b between column ``c`` of ``x`` and column ``c`` of ``y`` (both models x columns),
    for every column at once; NaN as in :func:`weighted_tau` (used for the halves of a test)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    n = x.shape[0]
    if n < 2:
        return np.full(x.shape[1], np.nan)
    finite = np.isfinite(x) & np.isfinite(y)
    i, j = np.triu_indices(n, 1)
    sx, sy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])   # model pairs x columns
    if not finite.all():
        valid = finite[i] & finite[j]
        sx, sy = np.where(valid, sx, 0.0), np.where(valid, sy, 0.0)
    num = np.einsum("pc,pc->c", sx, sy)
    den = np.einsum("pc,pc->c", sx, sx) * np.einsum("pc,pc->c", sy, sy)
    n_eff = finite.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = num / np.sqrt(den)
    tau[(den <= 0) | (n_eff < max(2, min_models))] = np.nan
    return tau


# --------------------------------------------------------------------------- a ranking against a target
def weighted_ranks(x, weights: np.ndarray) -> np.ndarray:
    """(draws x n) average ranks (1 = lowest; tied values share the mean of their ranks) of the n
    values ``x`` in each draw's expanded sample: a model drawn ``w`` times is ``w`` tied entries.
    With count weights the ranks are whole or half numbers, exactly as ``scipy.stats.rankdata``
    gives them on the expanded sample."""
    x = np.asarray(x, float)
    w = np.asarray(weights, float)
    below = (x[None, :] < x[:, None]).astype(float)           # [i, j]: x_j < x_i
    tied = (x[None, :] == x[:, None]).astype(float)
    return w @ below.T + (w @ tied.T + 1) / 2


def weighted_spearman(x, y, weights: np.ndarray) -> np.ndarray:
    """Spearman's rho of ``x`` against ``y`` (n values each) on every draw of (draws x n) count
    ``weights``: the Pearson correlation of the expanded sample's average ranks; NaN where a side
    is constant. Bit for bit what rho of the explicitly resampled values gives (every sum here is
    a sum of whole or quarter numbers, so exact), without building the resamples."""
    w = np.asarray(weights, float)
    total = w.sum(axis=1, keepdims=True)
    rx, ry = weighted_ranks(x, w), weighted_ranks(y, w)
    rx = rx - (w * rx).sum(axis=1, keepdims=True) / total
    ry = ry - (w * ry).sum(axis=1, keepdims=True) / total
    den = np.sqrt((w * rx ** 2).sum(axis=1) * (w * ry ** 2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (w * rx * ry).sum(axis=1) / den, np.nan)


def weighted_pair_accuracy(x, y, weights: np.ndarray) -> np.ndarray:
    """Share of the pairs ordered by ``y`` that ``x`` orders the same way (a tie in ``x`` counts
    half), on every draw of (draws x n) count ``weights``: ``c^T H c / c^T P c`` with
    ``P_ij = [y_i > y_j]`` and ``H_ij = P_ij ([x_i > x_j] + [x_i = x_j] / 2)``; NaN without an
    ordered pair."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    c = np.asarray(weights, float)
    P = (y[:, None] > y[None, :]).astype(np.float64)
    H = P * ((x[:, None] > x[None, :]) + 0.5 * (x[:, None] == x[None, :]))
    num = ((c @ H) * c).sum(1)
    den = ((c @ P) * c).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


# --------------------------------------------------------------------------- PCA
def pca_draws(matrix: np.ndarray, weights: np.ndarray | None = None, covariate: np.ndarray | None = None,
              covariate_rows: dict[str, np.ndarray] | None = None, min_models: int = 3) -> dict[str, np.ndarray]:
    """PC1 share of variance (standardised columns) per draw, and optionally Pearson r of the PC1
    scores with ``covariate``.

    ``matrix``: (models x columns); rows with a NaN get weight 0 (as :func:`lib.analysis.structure.pca`
    drops incomplete models). ``weights``: (draws x models) counts or None (the plain sample).
    ``covariate``: one value per model (NaN: unknown, left out of r); ``covariate_rows``: {name:
    boolean mask of the models r is computed on} (default ``{"all": every model}``). Returns
    ``{"pc1": (draws,), "r": {name: (draws,)}}``; NaN where fewer than ``min_models`` distinct models
    or fewer than two non-constant columns.
    """
    x = np.asarray(matrix, float)
    n, k = x.shape
    w = np.ones((1, n)) if weights is None else np.asarray(weights, float)
    complete = np.isfinite(x).all(axis=1)
    w = w * complete[None, :]
    x = np.where(complete[:, None], x, 0.0)
    if complete.any():
        x = x - x[complete].mean(axis=0)                    # shifts cancel below; keeps the sums well scaled
    total = w.sum(axis=1)
    distinct = (w > 0).sum(axis=1)
    safe_total = np.where(total > 0, total, 1.0)
    mu = (w @ x) / safe_total[:, None]                                 # draws x k
    second = np.matmul((w[:, :, None] * x[None, :, :]).transpose(0, 2, 1), x) / safe_total[:, None, None]
    cov = second - mu[:, :, None] * mu[:, None, :]
    var = np.einsum("dkk->dk", cov).copy()
    varying = var > 1e-10 * np.maximum(np.einsum("dkk->dk", second), 1e-300)   # rounding, not spread
    sd = np.where(varying, np.sqrt(np.where(varying, var, 1.0)), np.inf)
    corr = cov / (sd[:, :, None] * sd[:, None, :])
    n_varying = varying.sum(axis=1)
    top, v = top_eigenpairs(corr, n_varying)
    ok = (distinct >= max(2, min_models)) & (n_varying >= 2)
    pc1 = np.where(ok, top / np.maximum(n_varying, 1), np.nan)
    out = {"pc1": pc1}
    if covariate is not None:
        v = v * np.where(v.sum(axis=1) < 0, -1.0, 1.0)[:, None]
        scaled = v / sd                                                # draws x k (0 for constant columns)
        scores = scaled @ x.T - (mu * scaled).sum(axis=1)[:, None]     # draws x models
        cov_known = np.asarray(covariate, float)
        out["r"] = {}
        for name, mask in (covariate_rows or {"all": np.ones(n, bool)}).items():
            rows = np.isfinite(cov_known) & complete & np.asarray(mask, bool)
            c = np.where(rows, cov_known, 0.0)
            out["r"][name] = np.where(ok, weighted_pearson(scores, c[None, :], w * rows[None, :], min_models), np.nan)
    return out


def top_eigenpairs(mats: np.ndarray, trace: np.ndarray, iterations: int = 100,
                   tol: float = 1e-11) -> tuple[np.ndarray, np.ndarray]:
    """Largest eigenvalue and its unit eigenvector of each symmetric positive semi-definite matrix
    in a (batch x k x k) stack whose trace is ``trace``.

    Power iteration, batched, from the all-ones direction; a pair counts as found when its residual
    ``|C v - l v|`` is below ``tol * l`` *and* ``l > trace / 2`` (the other eigenvalues are >= 0 and
    sum to ``trace - l``, so none can exceed it). Matrices without such a pair after
    ``iterations`` steps (PC1 under half the variance, or slow convergence) go to
    ``numpy.linalg.eigh``. Several times faster than ``eigh`` on the whole stack.
    """
    b, k, _ = mats.shape
    trace = np.broadcast_to(np.asarray(trace, float), (b,))
    v = np.full((b, k), 1 / np.sqrt(k))
    lam = np.zeros(b)
    active = np.arange(b)                                  # matrices still iterating
    for step in range(1, iterations + 1):
        cv = np.matmul(mats[active], v[active][:, :, None])[:, :, 0]
        if step % 4 == 0 or step == iterations:            # check every few steps: checks cost a step
            lam[active] = (v[active] * cv).sum(axis=1)
            resid = np.linalg.norm(cv - lam[active][:, None] * v[active], axis=1)
            done = (resid <= tol * np.maximum(lam[active], 1e-300)) & (lam[active] > trace[active] / 2)
            keep = ~done
            active, cv = active[keep], cv[keep]
            if not len(active):
                break
        norm = np.linalg.norm(cv, axis=1)
        v[active] = cv / np.where(norm > 0, norm, 1.0)[:, None]
    if len(active):
        vals, vecs = np.linalg.eigh(mats[active])
        lam[active], v[active] = vals[:, -1], vecs[:, :, -1]
    return lam, v


def weighted_pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray, min_models: int = 3) -> np.ndarray:
    """Row-wise Pearson r of (draws x models) ``x`` and ``y`` (broadcast) under count weights ``w``;
    NaN where fewer than ``min_models`` distinct models carry weight or a side is constant."""
    x, y = np.broadcast_arrays(np.asarray(x, float), np.asarray(y, float))
    total = w.sum(axis=1)
    safe = np.where(total > 0, total, 1.0)
    mx = (w * x).sum(axis=1) / safe
    my = (w * y).sum(axis=1) / safe
    dx, dy = x - mx[:, None], y - my[:, None]
    sxy = (w * dx * dy).sum(axis=1)
    sxx = (w * dx * dx).sum(axis=1)
    syy = (w * dy * dy).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = sxy / np.sqrt(sxx * syy)
    bad = ((w > 0).sum(axis=1) < max(3, min_models)) | (sxx <= 1e-24) | (syy <= 1e-24)
    return np.where(bad, np.nan, r)
