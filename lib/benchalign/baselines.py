"""Baselines for BenchAlign: ways to weight or subset items without learning from preferences.

Every baseline returns an :class:`ItemWeighting` (the items it uses, their weights, a ``score`` of a
models x items matrix), fitted on source models only. The MetaBench- and tinyBenchmarks-like subsets
follow those papers' ideas (a 2PL IRT model's most informative items; k-means anchor points), not
their code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from . import rank


@dataclass
class ItemWeighting:
    """A baseline's item selection and weights; ``score(X)`` scores models from all M items."""
    name: str
    items: np.ndarray            # indices of the items used (into the full item list)
    weights: np.ndarray          # one weight per used item (sum 1 for the weighted-accuracy ones)
    scorer: Callable[[np.ndarray], np.ndarray] | None = None
    info: dict = field(default_factory=dict)

    def score(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if self.scorer is not None:
            return self.scorer(X[:, self.items])
        if len(self.weights) and (self.weights == self.weights[0]).all():
            # uniform weights: count, then scale once, so models with the same number of correct items
            # tie exactly (a weighted sum of 1/M terms breaks such ties by rounding, in an order that
            # depends on the BLAS library and the machine)
            return X[:, self.items].sum(axis=1) * self.weights[0]
        return X[:, self.items] @ self.weights


def no_alignment(M: int) -> ItemWeighting:
    return ItemWeighting("no_alignment", np.arange(M), np.full(M, 1.0 / M))


def random_weights(M: int, seed: int) -> ItemWeighting:
    """i.i.d. standard-normal item weights normalised like BenchAlign's: the space it searches, unlearned."""
    w = np.random.default_rng(seed).standard_normal(M)
    return ItemWeighting("random", np.arange(M), rank.normalise(w))


def best_single(X_src, y_src, item_benchmark) -> ItemWeighting:
    """The benchmark whose accuracy on the source models has the largest Spearman rho with ``y``."""
    item_benchmark = np.asarray(item_benchmark)
    names = list(dict.fromkeys(item_benchmark.tolist()))
    X_src = np.asarray(X_src, dtype=np.float64)
    rhos = {b: rank.spearman(X_src[:, item_benchmark == b].mean(axis=1), y_src) for b in names}
    valid = {b: r for b, r in rhos.items() if np.isfinite(r)}
    best = max(valid, key=valid.get) if valid else names[0]
    items = np.flatnonzero(item_benchmark == best)
    return ItemWeighting("best_single", items, np.full(len(items), 1.0 / len(items)),
                         info={"benchmark": best, "source_rho": {b: float(r) for b, r in rhos.items()}})


# --------------------------------------------------------------------------- IRT (MetaBench-like)
@dataclass
class IRT2PL:
    a: np.ndarray   # discrimination per item
    b: np.ndarray   # difficulty per item
    theta: np.ndarray   # abilities of the models it was fitted on

    def information(self, theta) -> np.ndarray:
        """Fisher information ``a^2 p (1 - p)`` of every item at abilities ``theta`` (T x M)."""
        p = _sigmoid(self.a[None, :] * (np.asarray(theta)[:, None] - self.b[None, :]))
        return self.a[None, :] ** 2 * p * (1 - p)


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def fit_2pl(X, steps: int = 300, lr: float = 0.05, seed: int = 0) -> IRT2PL:
    """Joint MAP fit of a 2PL model ``P(x_ij = 1) = σ(a_j (θ_i - b_j))`` (Adam, full batch).

    Priors: θ ~ N(0, 1), log a ~ N(0, 0.5²), b ~ N(0, 2²); they keep items that every source model
    passes or fails finite. Fractional entries are treated as Bernoulli probabilities.
    """
    g = torch.Generator().manual_seed(seed)
    Xt = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    K, M = Xt.shape
    theta = (0.1 * torch.randn(K, generator=g)).requires_grad_()
    log_a = torch.zeros(M, requires_grad=True)
    b = torch.zeros(M, requires_grad=True)
    opt = torch.optim.Adam([theta, log_a, b], lr=lr)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        logits = log_a.exp()[None, :] * (theta[:, None] - b[None, :])
        nll = torch.nn.functional.binary_cross_entropy_with_logits(logits, Xt, reduction="sum")
        prior = 0.5 * (theta ** 2).sum() + 0.5 * (log_a ** 2).sum() / 0.25 + 0.5 * (b ** 2).sum() / 4.0
        ((nll + prior) / (K * M)).backward()
        opt.step()
    return IRT2PL(a=log_a.exp().detach().double().numpy(), b=b.detach().double().numpy(),
                  theta=theta.detach().double().numpy())


def estimate_theta(X, a, b, iters: int = 30) -> np.ndarray:
    """MAP ability of each model (standard-normal prior) given item parameters (Newton steps)."""
    X = np.asarray(X, dtype=np.float64)
    theta = np.zeros(X.shape[0])
    for _ in range(iters):
        p = _sigmoid(a[None, :] * (theta[:, None] - b[None, :]))
        grad = ((X - p) * a[None, :]).sum(axis=1) - theta
        hess = -(a[None, :] ** 2 * p * (1 - p)).sum(axis=1) - 1.0
        theta = theta - grad / hess
    return theta


def metabench_like(X_src, k: int, seed: int = 0) -> ItemWeighting:
    """The ``k`` most informative items of a 2PL fit on the source models; score = MAP ability."""
    X_src = np.asarray(X_src, dtype=np.float64)
    k = min(k, X_src.shape[1])
    irt = fit_2pl(X_src, seed=seed)
    info = irt.information(irt.theta).mean(axis=0)
    items = np.sort(np.argsort(-info, kind="stable")[:k])
    a, b = irt.a[items], irt.b[items]
    return ItemWeighting("metabench_like", items, np.full(k, 1.0 / k),
                         scorer=lambda Xs: estimate_theta(Xs, a, b),
                         info={"mean_information_selected": float(info[items].mean())})


# --------------------------------------------------------------------------- anchor points
def tinybenchmarks_like(X_src, k: int, seed: int = 0) -> ItemWeighting:
    """Anchor points: k-means over the items' source-model response vectors, weight = cluster size.

    k-means runs on one thread: scikit-learn's threads add their partial cluster sums in the order
    they finish, so with several the centres (and then the anchors) differ from run to run."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    X_src = np.asarray(X_src, dtype=np.float64)
    M = X_src.shape[1]
    cols = X_src.T                                       # one row per item
    k = min(k, len(np.unique(cols, axis=0)))             # identical items form one cluster at most
    with threadpool_limits(limits=1):
        km = KMeans(n_clusters=k, n_init=3, random_state=seed).fit(cols)
    items, weights = [], []
    for c in range(k):
        members = np.flatnonzero(km.labels_ == c)
        if len(members) == 0:
            continue
        dist = ((cols[members] - km.cluster_centers_[c]) ** 2).sum(axis=1)
        items.append(int(members[np.argmin(dist)]))
        weights.append(len(members) / M)
    order = np.argsort(items)
    items, weights = np.array(items)[order], np.array(weights)[order]
    return ItemWeighting("tinybenchmarks_like", items, weights / weights.sum())
