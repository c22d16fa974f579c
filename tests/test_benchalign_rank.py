"""BenchAlign's ranking losses: exact fast gradients, normalisation, metrics, recovery, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lib.benchalign import rank

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _naive_ranknet(X, w, y, floor=rank.FLOOR):
    """Mean RankNet loss by explicit loops over ordered pairs (plain Python floats)."""
    wn = rank.normalise(w, floor)
    total, n = 0.0, 0
    for i in range(len(y)):
        for j in range(len(y)):
            if y[i] > y[j]:
                d = sum((X[i][m] - X[j][m]) * wn[m] for m in range(len(wn)))
                total += math.log1p(math.exp(-d))
                n += 1
    return total / n


def _naive_grad_autograd(X, w, y, floor=rank.FLOOR):
    """Gradient through the materialised K x K x M pair differences (what the fast path avoids)."""
    Xt = torch.tensor(X, dtype=torch.float64)
    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    diff = Xt[:, None, :] - Xt[None, :, :]                     # K x K x M
    d = diff @ rank.normalise(wt, floor)
    P = torch.tensor(y)[:, None] > torch.tensor(y)[None, :]
    loss = torch.nn.functional.softplus(-d[P]).mean()
    loss.backward()
    return float(loss.detach()), wt.grad.numpy()


@pytest.fixture
def small():
    rng = np.random.default_rng(3)
    X = rng.integers(0, 2, size=(9, 6)).astype(float)
    y = rng.normal(size=9)
    y[4] = y[2]                                                 # a tie: no pair between 2 and 4
    return X, y


@pytest.mark.parametrize("w_kind", ["positive", "mixed", "near_zero_sum"])
def test_fast_ranknet_gradient_equals_naive_pairwise(small, w_kind):
    X, y = small
    w = {"positive": np.linspace(0.5, 2.0, 6),
         "mixed": np.array([1.0, -0.4, 0.8, 0.3, -0.2, 0.9]),
         "near_zero_sum": np.array([1.0, -1.0, 0.5, -0.52, 0.3, -0.25])}[w_kind]
    naive_loss, naive_grad = _naive_grad_autograd(X, w, y)
    assert _naive_ranknet(X, w, y) == pytest.approx(naive_loss, rel=1e-12)
    loss, grad = rank.ranknet_loss_grad(X, w, y)                 # closed form X^T c
    assert loss == pytest.approx(naive_loss, rel=1e-12)
    np.testing.assert_allclose(grad, naive_grad, rtol=1e-9, atol=1e-12)
    loss_t, grad_t = rank.loss_and_grad(X, w, y, "ranknet")     # what fit() uses
    assert loss_t == pytest.approx(naive_loss, rel=1e-12)
    np.testing.assert_allclose(grad_t, naive_grad, rtol=1e-9, atol=1e-12)


def test_blockwise_ranknet_does_not_depend_on_the_block_size(small):
    X, y = small
    s = torch.tensor(X @ np.linspace(-1, 1, 6), requires_grad=True)
    target = rank.Target(y)
    assert target.n_pairs == int((y[:, None] > y[None, :]).sum())
    values, grads = [], []
    for block in (1, 2, 4, 256):
        s.grad = None
        value = rank.pair_loss(s, target, "ranknet", block=block)
        value.backward()
        values.append(float(value.detach()))
        grads.append(s.grad.numpy().copy())
    assert np.allclose(values, values[0], rtol=1e-12)
    assert all(np.allclose(g, grads[0], rtol=1e-12, atol=1e-15) for g in grads)


@pytest.mark.parametrize("loss", rank.LOSSES)
def test_every_loss_gradient_matches_finite_differences(small, loss):
    _, y = small
    X = np.random.default_rng(5).random((9, 6))      # continuous: no score ties, ranks stay put under ±h
    w = np.array([1.0, -0.4, 0.8, 0.3, -0.2, 0.9])
    _, grad = rank.loss_and_grad(X, w, y, loss)
    h = 1e-6
    fd = np.array([(rank.loss_and_grad(X, w + h * e, y, loss)[0] - rank.loss_and_grad(X, w - h * e, y, loss)[0])
                   / (2 * h) for e in np.eye(len(w))])
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-8)
    assert np.abs(grad).max() > 1e-4                              # a real, non-zero gradient


def test_normalisation_is_weighted_accuracy_bounded_and_scale_free():
    w = np.array([1.0, 3.0, 0.0, 4.0])
    np.testing.assert_allclose(rank.normalise(w), w / 8.0)       # all positive: sums to one
    np.testing.assert_allclose(rank.normalise(5 * w), rank.normalise(w))
    cancel = np.array([1.0, -1.0 + 1e-9, 2.0, -2.0])             # Σw ~ 0: floor of Σ|w| applies
    wn = rank.normalise(cancel)
    assert np.abs(wn).sum() == pytest.approx(1 / rank.FLOOR)
    X = np.eye(4)
    assert np.abs(rank.scores(X, cancel)).max() <= 1 / rank.FLOOR + 1e-9
    torch_wn = rank.normalise(torch.tensor(cancel))
    np.testing.assert_allclose(torch_wn.numpy(), wn)


def test_metrics_on_known_orders():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    assert rank.pair_accuracy(y, y) == 1.0 and rank.spearman(y, y) == pytest.approx(1.0)
    assert rank.pair_accuracy(-y, y) == 0.0 and rank.spearman(-y, y) == pytest.approx(-1.0)
    assert rank.pair_accuracy(np.zeros(4), y) == 0.5              # score ties count half
    assert rank.pair_accuracy([1, 2, 4, 3], y) == pytest.approx(5 / 6)
    assert math.isnan(rank.spearman([1, 1, 1], [1, 2, 3]))


def _guttman_world(rng, K):
    """Signal items: model i passes item t iff its target rank exceeds t (perfect ordering);
    decoy items are passed mostly by *worse* models, so plain accuracy ranks poorly."""
    y = rng.permutation(K).astype(float)
    signal = (y[:, None] > np.arange(K - 1)[None, :]).astype(float)
    decoy = (rng.random((K, 3 * K)) < 0.9 - 0.8 * y[:, None] / K).astype(float)
    return np.hstack([signal, decoy]), y


def test_perfect_features_recover_a_perfect_ranking():
    rng = np.random.default_rng(0)
    X, y = _guttman_world(rng, 30)
    uniform = X.mean(axis=1)
    assert rank.spearman(uniform, y) < 0.5                       # no alignment is misled by decoys
    train = np.arange(0, 30, 2)
    val = np.arange(1, 30, 2)[:5]
    test = np.arange(1, 30, 2)[5:]
    fit = rank.fit(X[train], y[train], X[val], y[val], lr=1e-3, max_steps=1500, patience=300)
    s = fit.scores(X)
    assert rank.pair_accuracy(s[test], y[test]) == 1.0
    assert rank.spearman(s[test], y[test]) == pytest.approx(1.0)
    assert fit.best_step > 0 and fit.val_loss < fit.history[0][2]


def test_fit_is_deterministic_and_starts_uniform():
    rng = np.random.default_rng(1)
    X, y = _guttman_world(rng, 12)
    a = rank.fit(X, y, lr=1e-3, max_steps=50, patience=50)
    b = rank.fit(X, y, lr=1e-3, max_steps=50, patience=50)
    np.testing.assert_array_equal(a.weights, b.weights)
    c = rank.fit(X, y, max_steps=0)
    np.testing.assert_allclose(c.weights, np.full(X.shape[1], 1 / X.shape[1]), rtol=1e-6)


def test_fit_rejects_bad_input_clearly():
    X = np.ones((4, 3))
    with pytest.raises(rank.RankError, match="unknown loss 'listnet'"):
        rank.fit(X, [1, 2, 3, 4], loss="listnet")
    with pytest.raises(rank.RankError, match="NaN"):
        rank.fit(np.where(np.eye(4, 3) > 0, np.nan, 0.0), [1, 2, 3, 4])
    with pytest.raises(rank.RankError, match="ranks no pair"):
        rank.fit(X, [1, 1, 1, 1])
    with pytest.raises(rank.RankError, match="4 training models but 3 target"):
        rank.fit(X, [1, 2, 3])
