"""BenchAlign's ranking losses: exact fast gradients, normalisation, metrics, recovery, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lib.benchalign import rank

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --------------------------------------------------------------------------- reference code (only the tests use it)
def _scores(X, w, floor=rank.FLOOR) -> np.ndarray:
    """Weighted accuracy ``X w~`` of every model (numpy)."""
    return np.asarray(X, dtype=np.float64) @ rank.normalise(w, floor)


def _ranknet_loss_grad(X, w, y, floor=rank.FLOOR) -> tuple[float, np.ndarray]:
    """Mean linear-RankNet loss over preferred pairs and its exact gradient w.r.t. ``w`` in closed
    form (numpy), never forming the K^2 x M pair differences: ``dL/dw~ = X^T c`` (the module doc of
    lib.benchalign.rank), then the chain rule through the normalisation:
    ``dd/dw_j = (Σw + floor^2 Σ|w| sign(w_j)) / ((1 + floor^2) d)``."""
    X, w, y = np.asarray(X, dtype=np.float64), np.asarray(w, dtype=np.float64), np.asarray(y, dtype=np.float64)
    P = (y[:, None] > y[None, :]).astype(np.float64)
    n_pairs = P.sum()
    s = X @ rank.normalise(w, floor)
    D = s[:, None] - s[None, :]
    loss = (P * np.logaddexp(0.0, -D)).sum() / n_pairs
    A = P * np.exp(-np.logaddexp(0.0, D))                         # P * sigmoid(-D)
    c = (A.sum(axis=0) - A.sum(axis=1)) / n_pairs
    g = X.T @ c                                                   # dL/dw~
    total, l1 = w.sum(), np.abs(w).sum()
    d = np.sqrt((total ** 2 + (floor * l1) ** 2) / (1.0 + floor ** 2))
    dd = (total + floor ** 2 * l1 * np.sign(w)) / ((1.0 + floor ** 2) * d)
    return float(loss), g / d - (g @ w) / d**2 * dd


def _step(S: torch.Tensor, pairs: rank.Pairs, loss: str) -> torch.Tensor:
    """The loss of each column of ``S`` as the fits compute it (:meth:`rank.Pairs.step`), its gradient
    w.r.t. ``S`` accumulated into ``S.grad``."""
    value, grad = pairs.step(S, loss, value=True)
    if grad is None:                           # the pointwise loss: an autograd graph
        value.sum().backward()
    else:
        S.backward(grad)
    return value.detach()


def _pair_loss(s: torch.Tensor, target: rank.Target, loss: str) -> float:
    """The ranking loss of one score vector ``s`` over all its models."""
    return float(rank.Pairs(target, torch.ones(len(s), 1, dtype=torch.bool), s.dtype).value(s[:, None], loss)[0])


def _loss_and_grad(X, w, y, loss: str = "ranknet", floor=rank.FLOOR) -> tuple[float, np.ndarray]:
    """Loss and gradient w.r.t. ``w`` exactly as the fits compute them (:func:`_step`, then autograd
    through the normalisation)."""
    Xt = torch.as_tensor(np.asarray(X), dtype=torch.float64)
    wt = torch.tensor(np.asarray(w, dtype=np.float64), requires_grad=True)
    pairs = rank.Pairs(rank.Target(y), torch.ones(len(y), 1, dtype=torch.bool), torch.float64)
    value = _step((Xt @ rank.normalise(wt, floor))[:, None], pairs, loss)
    return float(value[0]), wt.grad.numpy().copy()


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
    loss, grad = _ranknet_loss_grad(X, w, y)                 # closed form X^T c
    assert loss == pytest.approx(naive_loss, rel=1e-12)
    np.testing.assert_allclose(grad, naive_grad, rtol=1e-9, atol=1e-12)
    loss_t, grad_t = _loss_and_grad(X, w, y, "ranknet")     # what fit() uses
    assert loss_t == pytest.approx(naive_loss, rel=1e-12)
    np.testing.assert_allclose(grad_t, naive_grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("loss", rank.PAIRWISE)
def test_blockwise_pairwise_losses_do_not_depend_on_the_block_size(small, monkeypatch, loss):
    X, y = small
    rng = np.random.default_rng(0)
    S = torch.tensor(X @ rng.normal(size=(6, 3)), requires_grad=True)    # 3 columns
    mask = torch.tensor(rng.random((9, 3)) < 0.7)
    target = rank.Target(y)
    values, grads = [], []
    for elements, keep in ((1, 0), (2 * 9 * 3, 0), (4 * 9 * 3, 1 << 20), (1 << 22, 1 << 20)):
        monkeypatch.setattr(rank, "_BLOCK_ELEMENTS", elements)           # 1, 2, 4, all rows per block
        monkeypatch.setattr(rank, "_KEEP_ELEMENTS", keep)                 # pair indicators rebuilt / kept
        pairs = rank.Pairs(target, mask, torch.float64)
        S.grad = None
        values.append(_step(S, pairs, loss).numpy())
        grads.append(S.grad.numpy().copy())
    m = mask.numpy()
    P = y[:, None] > y[None, :]
    n = [(P & m[:, c][:, None] & m[:, c][None, :]).sum() for c in range(3)]
    np.testing.assert_array_equal(pairs.n_pairs.numpy(), n)
    s = S.detach().numpy()
    for c in range(3):                                    # each column = the loss of its rows alone
        rows = np.flatnonzero(m[:, c])
        alone = _pair_loss(torch.tensor(s[rows, c]), rank.Target(y[rows]), loss)
        assert values[0][c] == pytest.approx(float(alone), rel=1e-12)
        if loss == "ranknet":
            pairs_c = P & m[:, c][:, None] & m[:, c][None, :]
            naive = np.logaddexp(0, -(s[:, c][:, None] - s[:, c][None, :]))[pairs_c].mean()
            assert values[0][c] == pytest.approx(naive, rel=1e-12)
    assert all(np.allclose(v, values[0], rtol=1e-12) for v in values)
    assert all(np.allclose(g, grads[0], rtol=1e-12, atol=1e-15) for g in grads)


@pytest.mark.parametrize("loss", rank.LOSSES)
def test_every_loss_gradient_matches_finite_differences(small, loss):
    _, y = small
    X = np.random.default_rng(5).random((9, 6))      # continuous: no score ties, ranks stay put under ±h
    w = np.array([1.0, -0.4, 0.8, 0.3, -0.2, 0.9])
    _, grad = _loss_and_grad(X, w, y, loss)
    h = 1e-6
    fd = np.array([(_loss_and_grad(X, w + h * e, y, loss)[0] - _loss_and_grad(X, w - h * e, y, loss)[0])
                   / (2 * h) for e in np.eye(len(w))])
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-8)
    assert np.abs(grad).max() > 1e-4                              # a real, non-zero gradient


@pytest.mark.parametrize("loss", ["lambdarank", "ndcg_loss2"])
def test_ties_broken_by_the_last_bits_of_a_sum_do_not_move_the_ndcg_losses(loss):
    """Equal accuracies at the initial weights, summed in another order (another CPU's kernels):
    the scores differ in the last float32 bits; the tied models share their mean rank, so the
    loss and its gradient are the same, while a real gap still ranks."""
    y = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    pairs = rank.Pairs(rank.Target(y), np.ones((6, 1), dtype=bool))
    S = torch.tensor([[0.5], [0.5], [0.25], [0.75], [0.25], [0.5]], dtype=torch.float32)
    noisy = S.clone()
    noisy[[0, 1, 5], 0] = torch.tensor([0.5, 0.5000001, 0.49999997])       # one ulp up and down
    assert pairs.ranks(S)[:, 0].tolist() == pairs.ranks(noisy)[:, 0].tolist() == [3.0, 3.0, 5.5, 1.0, 5.5, 3.0]
    value, grad = pairs.step(S, loss, value=True)
    value2, grad2 = pairs.step(noisy, loss, value=True)
    assert float(value[0]) == pytest.approx(float(value2[0]), rel=1e-6)
    np.testing.assert_allclose(grad.numpy(), grad2.numpy(), rtol=1e-5, atol=1e-7)


def test_normalisation_is_weighted_accuracy_bounded_sign_free_and_scale_free():
    w = np.array([1.0, 3.0, 0.0, 4.0])
    np.testing.assert_allclose(rank.normalise(w), w / 8.0)       # all non-negative: sums to one
    np.testing.assert_allclose(rank.normalise(5 * w), rank.normalise(w))
    cancel = np.array([1.0, -1.0, 2.0, -2.0])                    # Σw = 0: the floor of Σ|w| applies
    wn = rank.normalise(cancel)
    bound = np.sqrt(1 + rank.FLOOR ** 2) / rank.FLOOR
    assert np.abs(wn).sum() == pytest.approx(bound)
    X = np.eye(4)
    assert np.abs(_scores(X, cancel)).max() <= bound + 1e-9
    # the denominator never changes sign: w and its mirror image around Σw = 0 rank alike
    for a in (1e-3, 1e-6):
        plus, minus = cancel + a * np.array([1, 0, 0, 0]), cancel - a * np.array([1, 0, 0, 0])
        assert np.sign(plus.sum()) != np.sign(minus.sum())
        np.testing.assert_allclose(rank.normalise(plus), rank.normalise(minus), atol=4 * a)
    torch_wn = rank.normalise(torch.tensor(np.vstack([cancel, w])))  # rows are separate weightings
    np.testing.assert_allclose(torch_wn.numpy(), np.vstack([wn, w / 8.0]))


def test_ranking_of_held_out_models_never_flips_when_the_weight_sum_crosses_zero():
    """Many items, a learning rate large next to 1/M: Σw crosses zero within a few steps. The scores
    of held-out models move continuously: consecutive steps rank them alike (a denominator with the
    sign of Σw turns the ranking upside down at each crossing: rho about -1 between steps)."""
    rng = np.random.default_rng(4)
    K, M = 60, 300
    skill = rng.normal(size=K)
    X = (rng.random((K, M)) < 1 / (1 + np.exp(-(skill[:, None] * rng.normal(size=M)[None, :])))).astype(float)
    y = skill + 0.5 * rng.normal(size=K)
    train = np.zeros((K, 1), dtype=bool)
    train[:40] = True
    held_out = np.arange(40, K)
    run = rank.descend(X, y, train, lr=0.01, eval_every=1)
    sums, ranked = [], []
    for cp in run:
        sums.append(float(cp.raw.sum()))
        ranked.append(X[held_out] @ cp.weights()[0])
        if cp.step == 60:
            break
    crossings = [t for t in range(1, len(sums)) if np.sign(sums[t]) != np.sign(sums[t - 1])]
    assert len(crossings) >= 1                                       # the situation the test is about
    for t in crossings:
        assert rank.spearman(ranked[t - 1], ranked[t]) > 0.8, (t, sums[t - 1], sums[t])


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
    source, test = np.arange(0, 30, 2), np.arange(1, 30, 2)
    fit = rank.fit(X[source], y[source], lr=1e-3, max_steps=1500, patience=300, folds=5)
    s = fit.scores(X)
    # a test model between two source models is told apart by signal items that no source pair
    # tells apart, so a few neighbouring test pairs may tie or swap: nearly perfect, not perfect
    assert rank.pair_accuracy(s[test], y[test]) > 0.95 and rank.spearman(s[test], y[test]) > 0.95
    assert rank.spearman(uniform[test], y[test]) < -0.9
    assert fit.step > 0 and fit.folds == 5
    assert fit.curve[0, 0] == 0 and fit.curve[:, 2].min() < fit.curve[0, 2]


def test_protocol_chooses_by_mean_validation_loss_then_refits_on_all_models():
    rng = np.random.default_rng(2)
    X, y = _guttman_world(rng, 24)
    kw = dict(lr=3e-3, max_steps=200, patience=200, eval_every=10)
    fit = rank.fit(X, y, seed=3, folds=4, **kw)
    assert fit.folds == 4 and fit.fold_val.shape == (len(fit.curve), 4)
    np.testing.assert_allclose(fit.curve[:, 2], fit.fold_val.mean(axis=1))
    assert fit.step == fit.curve[np.argmin(fit.curve[:, 2]), 0]   # first minimum of the mean over folds
    folds = rank.kfold(y, 4, seed=3)
    assert sorted(np.bincount(folds)) == [6, 6, 6, 6]
    for j in range(4):                                            # every fold spans the target range
        assert y[folds == j].min() <= np.sort(y)[3] and y[folds == j].max() >= np.sort(y)[-4]
    # the weights are those of one refit on all models after exactly the chosen number of steps
    for cp in rank.descend(X, y, np.ones((24, 1), dtype=bool), lr=kw["lr"], eval_every=10):
        if cp.step == fit.step:
            np.testing.assert_allclose(fit.weights, cp.weights()[0], rtol=1e-5, atol=1e-7)
            break


def test_protocol_falls_back_to_plain_accuracy_when_alignment_does_not_help():
    """A target of pure noise: whatever the training folds learn does not carry over, the mean
    validation loss is lowest at step 0, and the weights stay uniform (plain accuracy)."""
    rng = np.random.default_rng(0)
    X = (rng.random((40, 200)) < 0.5).astype(float)
    y = rng.normal(size=40)
    fit = rank.fit(X, y, lr=1e-2, max_steps=300, patience=150)
    assert fit.step == 0
    np.testing.assert_allclose(fit.weights, np.full(200, 1 / 200), rtol=1e-6)
    assert fit.curve[1:, 2].min() > fit.curve[0, 2]


def test_columns_side_by_side_follow_exactly_their_separate_paths():
    """descend with C columns (own rows, items, starts) = C separate one-column runs."""
    rng = np.random.default_rng(1)
    X = rng.random((20, 12))
    y = rng.normal(size=20)
    train = rng.random((20, 3)) < 0.7
    val = ~train
    items = np.ones((3, 12), dtype=bool)
    items[1, ::3] = False
    init = np.vstack([np.ones(12), rng.random(12) + 0.1, np.linspace(1, 2, 12)])
    for loss in rank.LOSSES:
        together = _after(rank.descend(X, y, train, val, item_mask=items, init=init, loss=loss, lr=0.05,
                                       eval_every=5, dtype=torch.float64), 15)
        for c in range(3):
            alone = _after(rank.descend(X, y, train[:, c:c + 1], val[:, c:c + 1], item_mask=items[c:c + 1],
                                        init=init[c], loss=loss, lr=0.05, eval_every=5, dtype=torch.float64), 15)
            np.testing.assert_allclose(together.weights(c), alone.weights(0), rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(together.val[c], alone.val[0], rtol=1e-9)
            assert np.all(together.weights(c)[~items[c]] == 0)


def _after(run, step):
    for cp in run:
        if cp.step == step:
            run.close()
            return cp


def test_fit_is_deterministic_and_starts_uniform():
    rng = np.random.default_rng(1)
    X, y = _guttman_world(rng, 12)
    a = rank.fit(X, y, lr=1e-3, max_steps=50, patience=50)
    b = rank.fit(X, y, lr=1e-3, max_steps=50, patience=50)
    np.testing.assert_array_equal(a.weights, b.weights)
    c = rank.fit(X, y, max_steps=0)
    assert c.step == 0
    np.testing.assert_allclose(c.weights, np.full(X.shape[1], 1 / X.shape[1]), rtol=1e-6)
    few = rank.fit(X[:3], y[:3])                                  # 3 models: no cross-validation
    assert few.folds == 0 and few.step == 0 and "too few" in few.note


def test_fit_rejects_bad_input_clearly():
    X = np.ones((4, 3))
    with pytest.raises(rank.RankError, match="unknown loss 'listnet'"):
        rank.fit(X, [1, 2, 3, 4], loss="listnet")
    with pytest.raises(rank.RankError, match="NaN"):
        rank.fit(np.where(np.eye(4, 3) > 0, np.nan, 0.0), [1, 2, 3, 4])
    with pytest.raises(rank.RankError, match="NaN"):
        rank.fit(X, [1, 2, np.nan, 4])
    with pytest.raises(rank.RankError, match="ranks no pair"):
        rank.fit(X, [1, 1, 1, 1])
    with pytest.raises(rank.RankError, match="4 models but 3 target"):
        rank.fit(X, [1, 2, 3])
