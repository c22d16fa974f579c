"""BenchAlign: learn one real weight per item so that weighted accuracy reproduces a target ranking.

Score of model i: ``s_i = w~ . x_i`` with ``x_i`` its item correctness and ``w~`` the normalised
weights (:func:`normalise`). The weights start uniform (``w~ = 1/M``: plain accuracy, i.e. "no
alignment") and are trained full-batch with Adam (learning rate 1e-4, no weight decay) on one of
the ranking losses of :data:`LOSSES`, with early stopping on a validation split of the source
models (the weights of the best validation loss are kept).

Normalisation. ``w~ = w / d`` with ``d = sign(Σw) · max(|Σw|, floor · Σ|w|)``. While the positive
weights dominate, ``d = Σw`` and ``w~`` sums to one, so the score is a weighted accuracy (exactly
so when all weights are non-negative). Weights may turn negative; when they cancel and ``Σw``
nears zero the denominator falls back to ``floor · Σ|w|`` (default floor 0.1), so ``|s_i| <=
1/floor`` stays bounded and the score never blows up or flips sign discontinuously except through
``Σw = 0`` itself (where the sign is taken as +). ``Σ|w| = 0`` cannot happen in practice (it is
guarded by a tiny epsilon). The scores are invariant to rescaling ``w``.

Exact full-batch loss without the K^2 x M pair differences. With ``s = X w~`` every pairwise loss
below is a function of the K x K matrix of score differences ``s_i - s_j``; its gradient with
respect to ``w~`` is ``X^T c`` for the K-vector ``c = dL/ds``. For the linear RankNet
``L = Σ_{y_i > y_j} log(1 + exp(-(s_i - s_j)))``, ``c_i = Σ_j A_ji - Σ_j A_ij`` with
``A_ij = [y_i > y_j] σ(-(s_i - s_j))`` (:func:`ranknet_loss_grad`). One step costs O(K M + K^2)
time; :class:`_RankNet` computes the loss and ``c`` in blocks of rows, in descending target order
(model i is preferred only to models after it, so half the pairs are visited), so the memory is
O(K M + block K): neither a K x K matrix nor a K^2 x M tensor is formed. Losses are averaged over
the preferred pairs (a constant factor that makes learning rates comparable across numbers of
models).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

LOSSES = ("ranknet", "lambdarank", "ndcg_loss2", "pointwise")
FLOOR = 0.1
_EPS = 1e-12


class RankError(ValueError):
    """Invalid input to a BenchAlign fit (the message says what)."""


# --------------------------------------------------------------------------- scores
def normalise(w, floor: float = FLOOR):
    """``w~ = w / d``, ``d = sign(Σw) max(|Σw|, floor Σ|w|)`` (numpy or torch; see module doc)."""
    if isinstance(w, torch.Tensor):
        total, l1 = w.sum(), w.abs().sum().clamp_min(_EPS)
        sign = torch.where(total < 0, -1.0, 1.0).to(w.dtype)
        return w / (sign * torch.maximum(total.abs(), floor * l1))
    w = np.asarray(w, dtype=np.float64)
    total, l1 = w.sum(), max(np.abs(w).sum(), _EPS)
    return w / ((-1.0 if total < 0 else 1.0) * max(abs(total), floor * l1))


def scores(X, w, floor: float = FLOOR) -> np.ndarray:
    """Weighted accuracy ``X w~`` of every model (numpy)."""
    return np.asarray(X, dtype=np.float64) @ normalise(w, floor)


def preferences(y) -> np.ndarray:
    """``P[i, j] = 1`` where the target strictly prefers model i to model j (ties give no pair)."""
    y = np.asarray(y, dtype=np.float64)
    if not np.isfinite(y).all():
        raise RankError("target scores contain NaN or infinite values")
    return (y[:, None] > y[None, :]).astype(np.float64)


# --------------------------------------------------------------------------- RankNet, closed form
def ranknet_loss_grad(X, w, y, floor: float = FLOOR) -> tuple[float, np.ndarray]:
    """Mean linear-RankNet loss over preferred pairs and its exact gradient w.r.t. ``w`` (numpy).

    Never forms the K^2 x M pair differences: ``dL/dw~ = X^T c`` (module doc), then the chain rule
    through :func:`normalise` (with ``d`` locally ``Σw`` or ``floor Σ|w|``).
    """
    X = np.asarray(X, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    P = preferences(y)
    n_pairs = P.sum()
    if n_pairs == 0:
        raise RankError("the target ranks no pair of models (all target scores equal)")
    wn = normalise(w, floor)
    s = X @ wn
    D = s[:, None] - s[None, :]
    loss = (P * np.logaddexp(0.0, -D)).sum() / n_pairs
    A = P * _sigmoid(-D)
    c = (A.sum(axis=0) - A.sum(axis=1)) / n_pairs
    g = X.T @ c                                  # dL/dw~
    total, l1 = w.sum(), max(np.abs(w).sum(), _EPS)
    sign = -1.0 if total < 0 else 1.0
    if abs(total) >= floor * l1:
        d, dd = sign * abs(total), np.ones_like(w)          # d = Σw
    else:
        d, dd = sign * floor * l1, sign * floor * np.sign(w)  # d = ±floor Σ|w|
    return float(loss), g / d - (g @ w) / d**2 * dd


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -z))


# --------------------------------------------------------------------------- losses on s (torch)
def _gains(y: torch.Tensor) -> torch.Tensor:
    """Graded relevance for the NDCG losses: ``2^rel - 1`` with rel = target min-max scaled."""
    span = (y.max() - y.min()).clamp_min(_EPS)
    return torch.pow(2.0, (y - y.min()) / span) - 1.0


def _ranks(s: torch.Tensor) -> torch.Tensor:
    """1-based rank of each model by current score, best first (no gradient)."""
    order = torch.argsort(s.detach(), descending=True)
    r = torch.empty_like(order)
    r[order] = torch.arange(1, len(s) + 1, device=s.device)
    return r.to(s.dtype)


class Target:
    """A target ranking prepared for the losses: scores ``y``, their descending order, the number of
    preferred pairs, and (only for the NDCG-weighted losses, built on first use) the dense K x K
    preference matrix."""

    def __init__(self, y, dtype=torch.float64):
        y_np = np.asarray(y, dtype=np.float64)
        if not np.isfinite(y_np).all():
            raise RankError("target scores contain NaN or infinite values")
        self.y = torch.as_tensor(y_np, dtype=dtype)
        self.order = torch.argsort(self.y, descending=True, stable=True)
        ys = np.sort(y_np)
        # pairs with y_i > y_j: for each model, the number of models strictly below it
        self.n_pairs = int(np.searchsorted(ys, y_np, side="left").sum())
        self._P: torch.Tensor | None = None

    @property
    def P(self) -> torch.Tensor:
        if self._P is None:
            self._P = (self.y[:, None] > self.y[None, :]).to(self.y.dtype)
        return self._P


class _RankNet(torch.autograd.Function):
    """Sum of ``softplus(-(s_i - s_j))`` over the pairs with ``y_i > y_j``, and ``c = dL/ds``.

    Models are visited in descending target order, so model i is preferred only to models after
    it; blocks of ``block`` rows against the models after them give the loss and ``c`` with
    O(K^2) time and O(block K) extra memory (no K x K matrix, no K^2 x M tensor).
    """

    @staticmethod
    def forward(ctx, s, y, order, block):
        ss, ys = s[order], y[order]
        K = s.shape[0]
        total = s.new_zeros(())
        c = torch.zeros_like(s)
        for lo in range(0, K, block):
            hi = min(K, lo + block)
            D = ss[lo:hi, None] - ss[None, lo:]
            pref = (ys[lo:hi, None] > ys[None, lo:]).to(s.dtype)
            total += (F.softplus(-D) * pref).sum()
            A = torch.sigmoid(-D) * pref                 # -dL/dD_ij
            c[lo:hi] -= A.sum(dim=1)
            c[lo:] += A.sum(dim=0)
        grad = torch.empty_like(c)
        grad[order] = c
        ctx.save_for_backward(grad)
        return total

    @staticmethod
    def backward(ctx, g):
        (c,) = ctx.saved_tensors
        return g * c, None, None, None


def pair_loss(s: torch.Tensor, target: Target, loss: str, block: int = 64) -> torch.Tensor:
    """The ranking loss ``loss`` of scores ``s`` against ``target``.

    - ``ranknet``: mean over preferred pairs of ``log(1 + exp(-(s_i - s_j)))`` (blockwise, exact;
      see :class:`_RankNet`);
    - ``lambdarank``: the same pairs weighted by |ΔNDCG| of swapping i and j in the current
      ranking (weights held constant, Burges 2010);
    - ``ndcg_loss2``: LambdaLoss's NDCG-Loss2 (Wang et al. 2018): pairs weighted by
      ``|1/D(|r_i-r_j|) - 1/D(|r_i-r_j|+1)| · |G_i - G_j|``, ``D(k) = log2(1+k)``, log base 2;
    - ``pointwise``: least-squares regression of the standardised target on the standardised
      score (free intercept and slope; equals ``2 (1 - Pearson r)``).

    The NDCG-weighted losses hold a K x K matrix (fine for thousands of models).
    """
    y = target.y.to(s.dtype)
    if loss == "ranknet":
        return _RankNet.apply(s, y, target.order, block) / max(target.n_pairs, 1)
    if loss == "pointwise":
        zs = (s - s.mean()) / s.std(unbiased=False).clamp_min(1e-8)
        zy = (y - y.mean()) / y.std(unbiased=False).clamp_min(1e-8)
        return ((zs - zy) ** 2).mean()
    if loss not in ("lambdarank", "ndcg_loss2"):
        raise RankError(f"unknown loss {loss!r}; expected one of {LOSSES}")
    P = target.P.to(s.dtype)
    terms = F.softplus(-(s[:, None] - s[None, :]))
    with torch.no_grad():
        G, r = _gains(y), _ranks(s)
        dG = (G[:, None] - G[None, :]).abs()
        if loss == "lambdarank":
            disc = 1.0 / torch.log2(1.0 + r)
            weight = P * dG * (disc[:, None] - disc[None, :]).abs()
        else:
            k = (r[:, None] - r[None, :]).abs()
            delta = (1.0 / torch.log2(1.0 + k.clamp_min(1.0)) - 1.0 / torch.log2(2.0 + k)).abs()
            weight = P * dG * delta / np.log(2.0)      # log2(1 + e^-x) = softplus(-x) / ln 2
    return (weight * terms).sum() / weight.sum().clamp_min(_EPS)


def loss_and_grad(X, w, y, loss: str = "ranknet", floor: float = FLOOR) -> tuple[float, np.ndarray]:
    """Loss and gradient w.r.t. ``w`` exactly as :func:`fit` computes them (torch autograd on s)."""
    Xt = torch.as_tensor(np.asarray(X), dtype=torch.float64)
    wt = torch.tensor(np.asarray(w, dtype=np.float64), requires_grad=True)
    value = pair_loss(Xt @ normalise(wt, floor), Target(y), loss)
    value.backward()
    return float(value.detach()), wt.grad.numpy().copy()


# --------------------------------------------------------------------------- metrics
def pair_accuracy(s, y) -> float:
    """Share of strictly ordered target pairs that the scores order the same way (score ties: 1/2)."""
    s, y = np.asarray(s, dtype=np.float64), np.asarray(y, dtype=np.float64)
    P = y[:, None] > y[None, :]
    n = P.sum()
    if n == 0:
        return float("nan")
    D = s[:, None] - s[None, :]
    return float(((D > 0) & P).sum() + 0.5 * ((D == 0) & P).sum()) / float(n)


def spearman(s, y) -> float:
    """Spearman's rho (average ranks for ties); NaN when either side is constant or K < 3."""
    from scipy.stats import spearmanr

    s, y = np.asarray(s, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(s) < 3 or np.ptp(s) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(spearmanr(s, y).statistic)


# --------------------------------------------------------------------------- training
@dataclass
class Fit:
    """A trained weighting: ``weights`` are normalised (``scores = X @ weights``)."""
    weights: np.ndarray
    loss: str
    best_step: int
    steps: int
    val_loss: float
    history: list[tuple[int, float, float]] = field(default_factory=list)   # (step, train, val)

    def scores(self, X) -> np.ndarray:
        return np.asarray(X, dtype=np.float64) @ self.weights


def fit(X_train, y_train, X_val=None, y_val=None, *, loss: str = "ranknet", lr: float = 1e-4,
        max_steps: int = 3000, patience: int = 500, init=None, floor: float = FLOOR,
        eval_every: int = 10, dtype=torch.float32) -> Fit:
    """Train BenchAlign weights on the training models; early stopping on the validation models.

    ``init`` are the starting (unnormalised) weights, uniform by default. Without validation
    models (or with fewer than 2 distinct target values there) the training loss stands in for the
    validation loss. The procedure has no randomness: the same data give the same weights.
    """
    if loss not in LOSSES:
        raise RankError(f"unknown loss {loss!r}; expected one of {LOSSES}")
    X_train = np.asarray(X_train)
    K, M = X_train.shape
    if K < 2 or M < 1:
        raise RankError(f"need at least 2 training models and 1 item, got {K} x {M}")
    if len(y_train) != K:
        raise RankError(f"{K} training models but {len(y_train)} target scores")
    if not np.isfinite(X_train).all():
        raise RankError("training features contain NaN or infinite values")
    Xt = torch.as_tensor(X_train, dtype=dtype)
    Tt = Target(y_train, dtype)
    if Tt.n_pairs == 0:
        raise RankError("the target ranks no pair of training models (all target scores equal)")
    use_val = X_val is not None and len(X_val) >= 2 and np.ptp(np.asarray(y_val, dtype=float)) > 0
    if use_val:
        Xv = torch.as_tensor(np.asarray(X_val), dtype=dtype)
        Tv = Target(y_val, dtype)
    w0 = np.full(M, 1.0 / M) if init is None else np.asarray(init, dtype=np.float64)
    if w0.shape != (M,):
        raise RankError(f"init has shape {w0.shape}, expected ({M},)")
    w = torch.tensor(w0 / max(np.abs(w0).sum(), _EPS), dtype=dtype, requires_grad=True)
    opt = torch.optim.Adam([w], lr=lr, weight_decay=0.0)

    def val_loss() -> float:
        with torch.no_grad():
            wn = normalise(w, floor)
            if use_val:
                return float(pair_loss(Xv @ wn, Tv, loss))
            return float(pair_loss(Xt @ wn, Tt, loss))

    best = (val_loss(), 0, normalise(w.detach(), floor).double().numpy().copy())
    history = [(0, best[0], best[0])]
    step = 0
    for step in range(1, max_steps + 1):
        opt.zero_grad(set_to_none=True)
        train = pair_loss(Xt @ normalise(w, floor), Tt, loss)
        train.backward()
        opt.step()
        if step % eval_every == 0 or step == max_steps:
            v = val_loss()
            history.append((step, float(train.detach()), v))
            if v < best[0] - 1e-7:
                best = (v, step, normalise(w.detach(), floor).double().numpy().copy())
            elif step - best[1] >= patience:
                break
    return Fit(weights=best[2], loss=loss, best_step=best[1], steps=step, val_loss=best[0], history=history)
