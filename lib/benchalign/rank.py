"""BenchAlign: learn one real weight per item so that weighted accuracy reproduces a target ranking.

Score of model i: ``s_i = w~ . x_i`` with ``x_i`` its item correctness and ``w~`` the normalised
weights (:func:`normalise`). The weights start uniform (``w~ = 1/M``: plain accuracy, i.e. "no
alignment") or at given initial weights, and are trained full-batch with Adam (learning rate 1e-4,
no weight decay) on one of the ranking losses of :data:`LOSSES`.

Normalisation. ``w~ = w / d`` with ``d = sqrt(((Σw)^2 + floor^2 (Σ|w|)^2) / (1 + floor^2))`` (default
floor 0.1). Three properties matter:

- *No sign flips.* ``d > 0`` for every ``w``, so the ranking ``X w~`` is the ranking of ``X w``: it
  moves continuously with ``w`` and never inverts because ``Σw`` changes sign. (A denominator with
  the sign of ``Σw``, as in ``sign(Σw) max(|Σw|, floor Σ|w|)``, inverts the whole ranking each time
  ``Σw`` crosses zero; Adam's steps of about ``lr`` per weight are large next to the uniform start
  ``1/M``, and on the leaderboard items ``Σw`` crosses zero within 15 steps.)
- *Weighted accuracy, bounded scores.* With non-negative weights ``Σ|w| = Σw`` and ``d = Σw``
  exactly, so the score is a weighted accuracy (uniform weights: plain accuracy). When weights
  cancel, ``d >= floor Σ|w| / sqrt(1 + floor^2)``, so ``|s_i| <= sqrt(1 + floor^2) / floor`` (about
  10) and the pairwise losses cannot be driven down by inflating the scale of ``w``.
- *Smooth in Σw.* ``d`` is differentiable in ``Σw`` (a root of a sum of squares, not a maximum).
  The maximum ``max(|Σw|, floor Σ|w|)`` is sign-free too, but has a kink where the two meet; on the
  leaderboard items Adam then bounces across the kink (the training loss rises from 0.39 to 0.44
  between steps 50 and 65 at lr 1e-4) and the test rho jumps by 0.05 between steps 10 apart, which
  makes any choice of a step count a lottery. With this ``d`` the
  training loss falls steadily (docs/design.md has the measurements).

The scores are invariant to rescaling ``w`` by a positive factor.

Exact full-batch loss without the K^2 x M pair differences. With ``s = X w~`` every pairwise loss
below is a function of the K x K matrix of score differences ``s_i - s_j``; its gradient with
respect to ``w~`` is ``X^T c`` for the K-vector ``c = dL/ds``. For the linear RankNet
``L = Σ_{y_i > y_j} log(1 + exp(-(s_i - s_j)))``, ``c_i = Σ_j A_ji - Σ_j A_ij`` with
``A_ij = [y_i > y_j] σ(-(s_i - s_j))`` (tests/test_benchalign_rank.py checks this closed form against
autograd). One step costs O(K M + K^2) time; :meth:`Pairs.pairwise` computes the loss and ``c`` in
blocks of rows, in descending target order (model i is preferred only to models after it, so half
the pairs are visited), so the memory is O(K M + block K C) for C fits at once: neither a K x K
matrix nor a K^2 x M tensor is formed. Losses are averaged over the preferred pairs (a constant
factor that makes learning rates comparable across numbers of models).

Many fits at once. :func:`descend` trains C weight vectors side by side (a C x M parameter, one
*column* per fit, each with its own training rows, validation rows, items and start): the losses of
the columns are summed, so each column receives exactly the gradient of its own loss, and Adam acts
element-wise, so every column follows exactly the path it would follow alone; the scores of all
columns come from one matrix product ``X W~^T``.

The protocol (:func:`fit_many`, :func:`fit`), chosen on the source models only: k-fold
cross-validation over the source models (folds stratified by target rank, :func:`kfold`) records
the validation loss of every fold at step 0 and every ``eval_every`` steps; the number of steps with
the lowest mean validation loss over the folds is chosen, and the weights are those of one refit on
all source models after exactly that many steps. The refit is one more column of the same run, so
its weights at the chosen step are kept as the run passes it (Adam is deterministic and full-batch:
the same as refitting afterwards). Step 0 (the initial weights, i.e. plain accuracy) is a
candidate, so the protocol falls back to no alignment when alignment does not lower the validation
loss. A run stops when every fit has gone ``patience`` steps without a lower mean validation loss,
or at ``max_steps``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

LOSSES = ("ranknet", "lambdarank", "ndcg_loss2", "pointwise")
PAIRWISE = LOSSES[:3]             # weighted means over preferred pairs (one blockwise kernel)
RANK_WEIGHTED = ("lambdarank", "ndcg_loss2")   # pair weights that depend on the current ranks
FLOOR = 0.1
_EPS = 1e-12
TIE = 1e-4                        # scores this close (relative to a column's largest) rank as tied
_BLOCK_ELEMENTS = 1 << 22        # block of the pairwise losses: rows x models x columns <= 4M entries
_KEEP_ELEMENTS = 1 << 27         # pair indicators (bool) kept between steps up to 128M entries (128 MB)


class RankError(ValueError):
    """Invalid input to a BenchAlign fit (the message says what)."""


# --------------------------------------------------------------------------- scores
def normalise(w, floor: float = FLOOR):
    """``w~ = w / d`` with ``d = sqrt(((Σw)^2 + floor^2 (Σ|w|)^2) / (1 + floor^2)) > 0`` along the last
    axis (numpy or torch; the rows of a 2-d array are separate weightings; see the module doc)."""
    if isinstance(w, torch.Tensor):
        total = w.sum(-1, keepdim=True)
        l1 = w.abs().sum(-1, keepdim=True).clamp_min(_EPS)
        return w / torch.sqrt((total ** 2 + (floor * l1) ** 2) / (1.0 + floor ** 2))
    w = np.asarray(w, dtype=np.float64)
    total = w.sum(-1, keepdims=True)
    l1 = np.maximum(np.abs(w).sum(-1, keepdims=True), _EPS)
    return w / np.sqrt((total ** 2 + (floor * l1) ** 2) / (1.0 + floor ** 2))


# --------------------------------------------------------------------------- losses of many columns
class Target:
    """A target ranking prepared for the losses: scores ``y`` and their descending order."""

    def __init__(self, y, dtype=torch.float64):
        y_np = np.asarray(y, dtype=np.float64)
        if not np.isfinite(y_np).all():
            raise RankError("target scores contain NaN or infinite values")
        self.y = torch.as_tensor(y_np, dtype=dtype)
        self.order = torch.argsort(self.y, descending=True, stable=True)
        self.y_sorted = self.y[self.order]


class Pairs:
    """The preferred pairs ``y_i > y_j`` among the rows of each column of ``mask`` (K x C, bool),
    prepared once for many evaluations of the pairwise losses: their number per column
    (``n_pairs``), the graded gains of the NDCG-weighted losses, and blocks of rows of the
    descending target order, each block against the models after it, so half of the K x K pairs
    are visited. The NDCG-weighted losses use bool pair indicators per block (kept when they fit in
    ``_KEEP_ELEMENTS`` entries, else rebuilt at each use); RankNet needs none (:meth:`_ranknet`).
    One work buffer of a block's size is reused by every block and step."""

    def __init__(self, target: Target, mask, dtype=torch.float32):
        self.target = target
        self.mask = mask if isinstance(mask, torch.Tensor) else torch.as_tensor(np.asarray(mask, dtype=bool))
        K, C = self.mask.shape
        m = self.mask.to(torch.float64)
        below = (target.y[:, None] > target.y[None, :]).to(torch.float64) @ m        # K x C
        self.n_pairs = (m * below).sum(0).to(dtype)
        self.sorted_mask = self.mask[target.order]
        y = target.y_sorted.to(torch.float64)[:, None]
        # gains 2^rel - 1, rel = target min-max scaled over each column's rows (sorted order, K x C)
        lo = torch.where(self.sorted_mask, y, torch.inf).amin(0, keepdim=True)
        hi = torch.where(self.sorted_mask, y, -torch.inf).amax(0, keepdim=True)
        self.gains = (torch.pow(2.0, (y - lo) / (hi - lo).clamp_min(_EPS)) - 1.0).nan_to_num(0.0).to(dtype)
        self.block = int(np.clip(_BLOCK_ELEMENTS // max(K * C, 1), 1, max(16, -(-K // 8))))
        self._keep = K * K * C / 2 <= _KEEP_ELEMENTS        # build on first use by an NDCG-weighted loss
        self.blocks = [(lo_, min(K, lo_ + self.block), None) for lo_ in range(0, K, self.block)]
        # RankNet's fast path: in descending target order, model i is preferred to model j exactly
        # when j >= first[i], the first position after i's group of tied targets; the pairs it
        # excludes within a block's columns lo: lie in a band of columns lo:band_hi
        ys = target.y_sorted.numpy()
        first = np.searchsorted(-ys, -ys, side="right")
        self.bands = []
        for lo_, hi_, _ in self.blocks:
            band = int(first[lo_:hi_].max()) - lo_
            cols = np.arange(lo_, lo_ + band)
            self.bands.append((band, torch.as_tensor(cols[None, :] < first[lo_:hi_, None])[:, :, None]))
        self._buffer: torch.Tensor | None = None

    def _indicator(self, lo: int, hi: int) -> torch.Tensor:
        ys, m = self.target.y_sorted, self.sorted_mask
        return (ys[lo:hi, None] > ys[None, lo:])[:, :, None] & m[lo:hi, None, :] & m[None, lo:, :]   # b x (K-lo) x C

    def ranks(self, S_sorted: torch.Tensor) -> torch.Tensor:
        """1-based rank of each model by score among its column's rows, best first (sorted order,
        K x C; rows outside a column rank after them). Scores closer than :data:`TIE` of the
        column's largest score are tied and share their mean rank: at the initial weights, models
        with equal accuracy differ only in the last bits of a float32 sum, which another CPU rounds
        otherwise, and a tie broken by them gave the NDCG-weighted losses other curves there."""
        masked = torch.where(self.sorted_mask, S_sorted, -torch.inf)
        order = torch.argsort(masked, dim=0, descending=True, stable=True)
        desc = masked.gather(0, order)
        scale = torch.where(self.sorted_mask, S_sorted.abs(), 0.0).amax(0, keepdim=True).clamp_min(_EPS)
        starts = torch.cat([torch.ones_like(desc[:1], dtype=torch.bool),
                            (desc[:-1] - desc[1:]).nan_to_num(0.0) > TIE * scale])      # a new tie group
        group = starts.long().cumsum(0) - 1
        position = torch.arange(1, len(S_sorted) + 1, dtype=S_sorted.dtype).unsqueeze(1).expand_as(desc)
        total = torch.zeros_like(desc).scatter_add_(0, group, position)
        count = torch.zeros_like(desc).scatter_add_(0, group, torch.ones_like(desc))
        r = torch.empty_like(desc)
        r.scatter_(0, order, (total / count).gather(0, group))
        return r

    def pairwise(self, S_sorted: torch.Tensor, loss: str, value: bool = True, grad: bool = True
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For a pairwise ``loss`` (ranknet, lambdarank, ndcg_loss2): per column the weighted sum of
        ``softplus(-(s_i - s_j))`` over the preferred pairs (zeros unless ``value``), its gradient
        ``c`` w.r.t. the scores (K x C; pair weights held constant; zeros unless ``grad``) and the sum
        of the pair weights (the normaliser), all in descending target order, without autograd.
        LambdaRank weights a pair by |ΔNDCG| of swapping it in the current ranking (held constant,
        Burges 2010; gains ``2^rel - 1``, rel = target min-max scaled, discount ``1/log2(1 + rank)``),
        NDCG-Loss2 by LambdaLoss's ``|1/D(k) - 1/D(k+1)| |G_i - G_j|`` (Wang et al. 2018)."""
        K, C = S_sorted.shape
        if self._buffer is None or self._buffer.dtype != S_sorted.dtype:
            self._buffer = torch.empty(self.block * K * C, dtype=S_sorted.dtype)
        if loss == "ranknet":
            return self._ranknet(S_sorted, value, grad) + (self.n_pairs.to(S_sorted.dtype),)
        total = S_sorted.new_zeros(C)
        norm = S_sorted.new_zeros(C)
        c = torch.zeros_like(S_sorted)
        G = self.gains.to(S_sorted.dtype)
        r = self.ranks(S_sorted)
        disc = 1.0 / torch.log2(1.0 + r)
        if self._keep and self.blocks and self.blocks[0][2] is None:
            self.blocks = [(lo, hi, self._indicator(lo, hi)) for lo, hi, _ in self.blocks]
        for lo, hi, P in self.blocks:
            if P is None:
                P = self._indicator(lo, hi)
            if loss == "lambdarank":         # |ΔNDCG| of swapping i and j
                P = P * (G[lo:hi, None, :] - G[None, lo:, :]).abs() * (disc[lo:hi, None, :] - disc[None, lo:, :]).abs()
            elif loss == "ndcg_loss2":       # |1/D(k) - 1/D(k+1)| |G_i - G_j|, k = |r_i - r_j|, in log base 2
                k = (r[lo:hi, None, :] - r[None, lo:, :]).abs()
                delta = (1.0 / torch.log2(1.0 + k.clamp_min(1.0)) - 1.0 / torch.log2(2.0 + k)).abs()
                P = P * (G[lo:hi, None, :] - G[None, lo:, :]).abs() * delta / np.log(2.0)
            norm += P.sum((0, 1))
            A = self._buffer[:(hi - lo) * (K - lo) * C].view(hi - lo, K - lo, C)
            torch.sub(S_sorted[None, lo:, :], S_sorted[lo:hi, None, :], out=A)      # -(s_i - s_j)
            if value:
                total += (F.softplus(A) * P).sum((0, 1))
            if grad:
                A.sigmoid_().mul_(P)                                                # -dL/dD_ij
                c[lo:hi] -= A.sum(dim=1)
                c[lo:] += A.sum(dim=0)
        return total, c, norm

    def step(self, S: torch.Tensor, loss: str, value: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per column the training loss of the scores ``S`` (K x C, row order; NaN without pairs;
        zeros for the pairwise losses unless ``value``) and, for the pairwise losses, its gradient
        w.r.t. ``S`` without autograd (else None: the loss carries an autograd graph)."""
        if loss not in PAIRWISE:
            return _pointwise(S, self), None
        order = self.target.order
        with torch.no_grad():
            total, c_sorted, norm = self.pairwise(S[order], loss, value=value)
            norm = norm.clamp_min(_EPS)
            grad_S = torch.empty_like(c_sorted)
            grad_S[order] = c_sorted / norm
            return torch.where(self.n_pairs > 0, total / norm, torch.nan), grad_S

    def value(self, S: torch.Tensor, loss: str) -> np.ndarray:
        """Loss of each column (NaN without pairs), without the gradient pass of the pairwise losses."""
        if loss not in PAIRWISE:
            return _pointwise(S, self).double().numpy()
        total, _, norm = self.pairwise(S[self.target.order], loss, value=True, grad=False)
        return torch.where(self.n_pairs > 0, total / norm.clamp_min(_EPS), torch.nan).double().numpy()

    def _ranknet(self, S_sorted: torch.Tensor, value: bool, grad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """RankNet without a pass over pair indicators: a model outside a column gets score +inf
        where it would be preferred and -inf where it would be the other model, so every one of its
        terms ``σ(s_j - s_i)`` and ``softplus(s_j - s_i)`` is exactly 0; only the narrow band of
        tied or earlier models next to each block's diagonal is set to -inf explicitly."""
        K, C = S_sorted.shape
        total = S_sorted.new_zeros(C)
        c = torch.zeros_like(S_sorted)
        S_i = torch.where(self.sorted_mask, S_sorted, torch.inf)
        S_j = torch.where(self.sorted_mask, S_sorted, -torch.inf)
        for (lo, hi, _), (band, excluded) in zip(self.blocks, self.bands):
            A = self._buffer[:(hi - lo) * (K - lo) * C].view(hi - lo, K - lo, C)
            torch.sub(S_j[None, lo:, :], S_i[lo:hi, None, :], out=A)              # -(s_i - s_j)
            A[:, :band].masked_fill_(excluded, -torch.inf)                       # y_i <= y_j: no pair
            if value:
                total += F.softplus(A).sum((0, 1))
            if not grad:
                continue
            A.sigmoid_()                                                         # -dL/dD_ij
            c[lo:hi] -= A.sum(dim=1)
            c[lo:] += A.sum(dim=0)
        return total, c


class PairList:
    """Explicit preferences as the linear RankNet's objective of many columns: entry e says that row
    ``winner[e]`` beats row ``loser[e]`` in column ``column[e]`` with weight ``weight[e] > 0``. Per
    column the loss is ``Σ_e weight_e softplus(s_loser - s_winner) / Σ_e weight_e`` (the same
    softplus of :meth:`Pairs.pairwise`; repeated and contradicting entries simply add), and its
    gradient w.r.t. the scores is summed per (row, column) with ``bincount``: O(entries) per step,
    deterministic. The same interface as :class:`Pairs` (``n_pairs``, :meth:`step`, :meth:`value`)."""

    def __init__(self, winner, loser, column, weight, K: int, C: int, dtype=torch.float32):
        self.winner, self.loser, self.column = (torch.as_tensor(np.asarray(a, dtype=np.int64))
                                                for a in (winner, loser, column))
        self.weight = torch.as_tensor(np.asarray(weight, dtype=np.float64), dtype=dtype)
        self.K, self.C = K, C
        self.n_pairs = torch.bincount(self.column, self.weight.double(), minlength=C).to(dtype)
        self._w_flat, self._l_flat = self.winner * C + self.column, self.loser * C + self.column

    def _terms(self, S: torch.Tensor) -> torch.Tensor:
        flat = S.reshape(-1)
        return flat[self._l_flat] - flat[self._w_flat]                        # -(s_winner - s_loser)

    def _mean(self, per_entry: torch.Tensor) -> torch.Tensor:
        total = torch.bincount(self.column, per_entry, minlength=self.C)
        return torch.where(self.n_pairs > 0, total / self.n_pairs.clamp_min(_EPS), torch.nan)

    def step(self, S: torch.Tensor, loss: str, value: bool) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():              # always the linear RankNet (fit_pairs_many passes no other)
            A = self._terms(S)
            per_column = self._mean(F.softplus(A) * self.weight) if value else S.new_zeros(self.C)
            g = A.sigmoid_() * self.weight / self.n_pairs.clamp_min(_EPS)[self.column]   # -dL/dD
            n = self.K * self.C
            grad = torch.bincount(self._l_flat, g, minlength=n) - torch.bincount(self._w_flat, g, minlength=n)
            return per_column.to(S.dtype), grad.to(S.dtype).view(self.K, self.C)

    def value(self, S: torch.Tensor, loss: str) -> np.ndarray:
        with torch.no_grad():
            return self._mean(F.softplus(self._terms(S)) * self.weight).double().numpy()


def _pointwise(S: torch.Tensor, pairs: Pairs) -> torch.Tensor:
    """Per column, least-squares regression of the standardised target on the standardised score
    (free intercept and slope; equals ``2 (1 - Pearson r)``), NaN without a preferred pair."""
    n_pairs = pairs.n_pairs.to(S.dtype)
    nan = torch.full_like(n_pairs, torch.nan)
    s, mf = S.T, pairs.mask.T.to(S.dtype)                                  # C x K
    y = pairs.target.y.to(S.dtype).expand_as(s)
    n = mf.sum(1, keepdim=True).clamp_min(1.0)

    def z(v):
        mean = (v * mf).sum(1, keepdim=True) / n
        sd = ((((v - mean) * mf) ** 2).sum(1, keepdim=True) / n).sqrt().clamp_min(1e-8)
        return (v - mean) / sd
    return torch.where(n_pairs > 0, (((z(s) - z(y)) ** 2) * mf).sum(1) / n[:, 0], nan)


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


# --------------------------------------------------------------------------- many columns, one run
@dataclass
class Checkpoint:
    """The state of a :func:`descend` run after ``step`` Adam steps: per column the training loss,
    the validation loss (NaN without validation rows or pairs), and the weights."""
    step: int
    train: np.ndarray                  # C
    val: np.ndarray                    # C
    raw: torch.Tensor                  # C x M unnormalised weights (items outside a column are 0)
    floor: float

    def weights(self, columns=slice(None)) -> np.ndarray:
        """Normalised weights of the selected columns (numpy float64)."""
        return normalise(self.raw[columns].detach().double(), self.floor).numpy()


def descend(X, y, train_mask, val_mask=None, *, item_mask=None, init=None, loss: str = "ranknet",
            lr: float = 1e-4, floor: float = FLOOR, eval_every: int = 10,
            dtype=torch.float32) -> Iterator[Checkpoint]:
    """Adam on C columns side by side (module doc); yields a :class:`Checkpoint` at step 0 and
    every ``eval_every`` steps, for as long as the caller iterates.

    ``train_mask`` / ``val_mask`` are K x C booleans (rows of ``X`` each column trains / validates
    on); ``item_mask`` (C x M) the items a column may weight (others stay exactly 0); ``init`` (C x M
    or M) the starting weights (uniform over the column's items by default), rescaled to Σ|w| = 1.
    """
    if loss not in LOSSES:
        raise RankError(f"unknown loss {loss!r}; expected one of {LOSSES}")
    train = torch.as_tensor(np.asarray(train_mask, dtype=bool))
    val = None if val_mask is None else torch.as_tensor(np.asarray(val_mask, dtype=bool))
    target = Target(y, dtype)
    return _descend(X, Pairs(target, train, dtype), None if val is None else Pairs(target, val, dtype),
                    train.shape[1], item_mask, init, loss, lr, floor, eval_every, dtype)


def _descend(X, train_obj, val_obj, C: int, item_mask, init, loss: str, lr: float, floor: float,
             eval_every: int, dtype) -> Iterator[Checkpoint]:
    """The optimiser of every fit: full-batch Adam on C weight columns whose training and validation
    losses are the objectives ``train_obj`` / ``val_obj`` (:class:`Pairs` of a score target or a
    :class:`PairList` of explicit preferences: ``step`` gives the loss and, for pairwise losses,
    its gradient w.r.t. the scores; ``value`` the loss alone)."""
    Xt = torch.as_tensor(np.asarray(X), dtype=dtype)
    K, M = Xt.shape
    items = (torch.ones(C, M, dtype=dtype) if item_mask is None
             else torch.as_tensor(np.asarray(item_mask, dtype=bool)).to(dtype))
    w0 = (np.ones((C, M)) if init is None else np.broadcast_to(np.asarray(init, dtype=np.float64), (C, M)))
    w0 = w0 * items.double().numpy()
    l1 = np.abs(w0).sum(1, keepdims=True)
    if (l1 == 0).any():
        raise RankError("a column starts with all weights 0 (empty item set or zero init)")
    W = torch.tensor(w0 / l1, dtype=dtype, requires_grad=True)
    opt = torch.optim.Adam([W], lr=lr, weight_decay=0.0)
    step = 0
    while True:
        opt.zero_grad(set_to_none=True)
        S = Xt @ normalise(W * items, floor).T                            # K x C
        checkpoint = step % eval_every == 0
        per_column, grad_S = train_obj.step(S, loss, checkpoint)
        if checkpoint:
            with torch.no_grad():
                v = np.full(C, np.nan) if val_obj is None else val_obj.value(S.detach(), loss)
            yield Checkpoint(step, per_column.detach().double().numpy(), v, (W * items).detach(), floor)
        if grad_S is not None:      # the gradient c of the summed column means, no autograd graph
            S.backward(grad_S)
        else:
            torch.nan_to_num(per_column, nan=0.0).sum().backward()
        opt.step()
        step += 1


def kfold(y, k: int, seed: int) -> np.ndarray:
    """Fold (0..k-1) of each model, stratified by target rank: the models sorted by target (ties
    in random order) are taken k at a time and each group is dealt to the folds in random order, so
    every fold spans the target range."""
    rng = np.random.default_rng(seed)
    y = np.asarray(y, dtype=np.float64)
    perm = rng.permutation(len(y))
    order = perm[np.argsort(y[perm], kind="stable")]
    fold = np.empty(len(y), dtype=int)
    for lo in range(0, len(y), k):
        chunk = order[lo:lo + k]
        fold[chunk] = rng.permutation(k)[:len(chunk)]
    return fold


@dataclass
class Task:
    """One cross-validated fit: the rows of ``X`` to learn from (the source models), the seed of
    its folds, the items it may weight (all by default) and its starting weights over them.
    ``folds`` (one id per row; -1 = never validated on) replaces the stratified :func:`kfold`."""
    rows: np.ndarray
    seed: int = 0
    items: np.ndarray | None = None
    init: np.ndarray | None = None
    folds: np.ndarray | None = None


@dataclass
class Fit:
    """The result of the protocol for one task: ``weights`` (normalised, over all columns of ``X``,
    0 outside the task's items; ``scores = X @ weights``) of the refit on all its rows after ``step``
    Adam steps, the step chosen by cross-validation, and the learning curve it was chosen on."""
    weights: np.ndarray
    loss: str
    step: int                          # chosen number of steps (0: the initial weights)
    steps_run: int                     # steps the run went before it stopped
    folds: int                         # folds used (0: too few models to cross-validate)
    curve: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))   # step, mean train, mean val
    fold_val: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # val loss per step and fold
    note: str = ""
    fold_ids: np.ndarray | None = None       # fold validating each row of X (-1: none)
    fold_weights: np.ndarray | None = None   # folds x M: each fold's weights at the chosen step

    def scores(self, X) -> np.ndarray:
        return np.asarray(X, dtype=np.float64) @ self.weights

    def oof_scores(self, X) -> np.ndarray:
        """Out-of-fold scores: each row of ``X`` scored by the weights of the fold that held it
        out, at the chosen step (NaN for rows no fold validates)."""
        X = np.asarray(X, dtype=np.float64)
        out = np.full(len(X), np.nan)
        for j in range(self.folds):
            rows = self.fold_ids == j
            out[rows] = X[rows] @ self.fold_weights[j]
        return out


def fit_many(X, y, tasks: Sequence[Task], *, folds: int = 5, loss: str = "ranknet", lr: float = 1e-4,
             max_steps: int = 3000, patience: int = 200, eval_every: int = 10, floor: float = FLOOR,
             dtype=None) -> list[Fit]:
    """The cross-validated protocol (module doc) for several tasks in one run of :func:`descend`.
    ``dtype`` defaults to float32, and to float64 for the rank-weighted losses (:data:`RANK_WEIGHTED`):
    their pair weights jump when two scores swap ranks, so in float32 the last bits of another CPU's
    sums swapped them at other steps and the learning curves parted (chosen steps 200/200/120 against
    210/180/170 between two arithmetic paths here); in float64 the curves of the two paths agree to
    1e-12 and every chosen step is the same.

    ``X`` and ``y`` hold only what the fits may see (the source models): each task uses its
    ``rows``; it gets ``min(folds, n // 2)`` stratified folds (at least 2 validation models each)
    or the folds it names; a task of fewer than 4 models cannot be cross-validated and keeps its
    initial weights (step 0, with a note). The procedure is deterministic given the tasks' seeds.
    """
    X = np.asarray(X)
    y = np.asarray(y, dtype=np.float64)
    if loss not in LOSSES:
        raise RankError(f"unknown loss {loss!r}; expected one of {LOSSES}")
    if len(y) != X.shape[0]:
        raise RankError(f"{X.shape[0]} models but {len(y)} target scores")
    if not np.isfinite(X).all():
        raise RankError("features contain NaN or infinite values")
    if not tasks:
        return []
    dtype = dtype or (torch.float64 if loss in RANK_WEIGHTED else torch.float32)
    columns = _Columns(*X.shape)             # every fold's fit and every refit: one column of one run
    plans = [_plan(t, y, columns, folds) for t in tasks]
    items, init = columns.arrays()
    run = descend(X, y, np.array(columns.train).T, np.array(columns.val).T, item_mask=items, init=init, loss=loss,
                  lr=lr, floor=floor, eval_every=eval_every, dtype=dtype)
    steps_run = _follow(run, plans, max_steps, patience)
    return [p.fit(loss, steps_run) for p in plans]


@dataclass
class PairTask:
    """One cross-validated fit to explicit preferences: row ``winner[e]`` of ``X`` beats row
    ``loser[e]`` with weight ``weight[e]`` (1 by default); ``strata`` (one score per row of ``X``,
    optional) stratifies the folds like a target does (:func:`kfold`), else they are random."""
    winner: np.ndarray
    loser: np.ndarray
    weight: np.ndarray | None = None
    seed: int = 0
    strata: np.ndarray | None = None


def fit_pairs_many(X, tasks: Sequence[PairTask], *, folds: int = 5, lr: float = 1e-4, max_steps: int = 3000,
                   patience: int = 200, eval_every: int = 10, floor: float = FLOOR,
                   dtype=torch.float32) -> list[Fit]:
    """The protocol of :func:`fit_many` on explicit preferences (linear RankNet, :class:`PairList`),
    in the same run of the same optimiser. The folds split the models that appear in a task's pairs
    (``min(folds, n // 2)``, at least 2 models each); a fold's fit trains on the pairs of two models
    outside it and is validated on the pairs that touch it (a held-out model against any other),
    so every pair validates some fold even when the preferences are sparse."""
    X = np.asarray(X)
    if not np.isfinite(X).all():
        raise RankError("features contain NaN or infinite values")
    if not tasks:
        return []
    columns = _Columns(*X.shape)
    plans = [_plan_pairs(t, columns, folds) for t in tasks]
    K, C = X.shape[0], len(columns.train)
    items, init = columns.arrays()
    run = _descend(X, _pair_list(columns.train, K, dtype), _pair_list(columns.val, K, dtype), C, items, init,
                   "ranknet", lr, floor, eval_every, dtype)
    steps_run = _follow(run, plans, max_steps, patience)
    return [p.fit("ranknet", steps_run) for p in plans]


def fit_pairs(X, winner, loser, weight=None, *, seed: int = 0, strata=None, **kwargs) -> Fit:
    """:func:`fit_pairs_many` for one set of preferences (see there for the settings)."""
    return fit_pairs_many(X, [PairTask(winner, loser, weight, seed, strata)], **kwargs)[0]


def _pair_list(cols: list[np.ndarray], K: int, dtype) -> PairList:
    """One :class:`PairList` of every column's (3 x n: winner, loser, weight) pairs."""
    col = np.concatenate([np.full(a.shape[1], c) for c, a in enumerate(cols)])
    a = np.concatenate(cols, axis=1)
    return PairList(a[0], a[1], col, a[2], K, len(cols), dtype)


def _plan_pairs(t: PairTask, columns: _Columns, folds: int) -> _Plan:
    """Check a task of explicit pairs and add its fold columns and its refit column to the run."""
    K, M = columns.K, columns.M
    win, lose = np.asarray(t.winner, dtype=np.int64), np.asarray(t.loser, dtype=np.int64)
    wt = np.ones(len(win)) if t.weight is None else np.asarray(t.weight, dtype=np.float64)
    if not (len(win) == len(lose) == len(wt)):
        raise RankError(f"{len(win)} winners, {len(lose)} losers and {len(wt)} weights")
    if not len(win):
        raise RankError("no preference pairs to learn from")
    if min(win.min(), lose.min()) < 0 or max(win.max(), lose.max()) >= K:
        raise RankError(f"a pair names a row outside the {K} rows of X")
    if (win == lose).any():
        raise RankError("a pair prefers a model to itself")
    if not (np.isfinite(wt).all() and (wt > 0).all()):
        raise RankError("pair weights must be finite and positive")
    rows = np.unique(np.concatenate([win, lose]))
    k = min(folds, len(rows) // 2)
    k = k if k >= 2 else 0
    strata = np.zeros(len(rows)) if t.strata is None else np.asarray(t.strata, dtype=np.float64)[rows]
    fold_ids = np.full(K, -1)
    fold_ids[rows] = kfold(strata, k, t.seed) if k else -1
    items, init = np.ones(M, dtype=bool), np.ones(M)
    pairs = np.stack([win, lose, wt]).astype(np.float64)
    fold_cols = []
    for j in range(k):
        touch = (fold_ids[win] == j) | (fold_ids[lose] == j)
        fold_cols.append(columns.add(pairs[:, ~touch], pairs[:, touch], items, init))
    refit = columns.add(pairs, pairs[:, :0], items, init)
    return _Plan(t, fold_cols, refit, k, done=not k, fold_ids=fold_ids, n_models=len(rows))


class _Columns:
    """The columns of one :func:`descend` run (training rows, validation rows, items, start);
    identical columns (e.g. the refit of several seeds) run once."""

    def __init__(self, K: int, M: int):
        self.K, self.M = K, M
        self.index: dict[bytes, int] = {}
        self.train, self.val, self.items, self.init = [], [], [], []

    def add(self, train: np.ndarray, val: np.ndarray, items: np.ndarray, init: np.ndarray) -> int:
        key = b"".join(f"{a.shape}".encode() + a.tobytes() for a in (train, val, items, init))
        if key not in self.index:
            self.index[key] = len(self.train)
            self.train.append(train), self.val.append(val), self.items.append(items), self.init.append(init)
        return self.index[key]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """C x M item masks and starting weights."""
        return np.array(self.items), np.array(self.init)


@dataclass
class _Plan:
    """One task in the run: its fold columns, its refit column, and what the run has shown so far."""
    task: Task
    folds: list[int]                   # columns validated on one fold each
    refit: int                         # the column trained on all the task's rows
    k: int                             # folds (0: too few models to cross-validate)
    best: tuple[float, int] = (np.inf, 0)   # lowest mean validation loss and its step
    weights: np.ndarray | None = None  # the refit's weights at that step
    curve: list = field(default_factory=list)
    fold_val: list = field(default_factory=list)
    done: bool = False
    fold_ids: np.ndarray | None = None     # fold validating each row (-1: none)
    fold_weights: np.ndarray | None = None
    n_models: int = 0

    def fit(self, loss: str, steps_run: int) -> Fit:
        note = "" if self.k else f"{self.n_models} models: too few to cross-validate, initial weights kept"
        if self.k and not np.isfinite(self.best[0]):
            note = "no validation fold ranks a pair of models: initial weights kept"
        return Fit(weights=self.weights, loss=loss, step=self.best[1], steps_run=steps_run, folds=self.k,
                   curve=np.array(self.curve).reshape(-1, 3),
                   fold_val=np.array(self.fold_val).reshape(len(self.fold_val), self.k), note=note,
                   fold_ids=self.fold_ids, fold_weights=self.fold_weights)


def _plan(t: Task, y: np.ndarray, columns: _Columns, folds: int) -> _Plan:
    """Check a task and add its fold columns and its refit column to the run."""
    K, M = columns.K, columns.M
    rows = np.asarray(t.rows, dtype=int)
    if len(np.unique(rows)) != len(rows):
        raise RankError("a task lists a model twice")
    if len(rows) < 2:
        raise RankError(f"need at least 2 models to learn from, got {len(rows)}")
    if not np.isfinite(y[rows]).all():
        raise RankError("target scores contain NaN or infinite values")
    if np.ptp(y[rows]) == 0:
        raise RankError("the target ranks no pair of models (all target scores equal)")
    items = np.zeros(M, dtype=bool)
    items[np.arange(M) if t.items is None else np.asarray(t.items, dtype=int)] = True
    init = np.zeros(M)
    init[items] = 1.0 if t.init is None else np.asarray(t.init, dtype=np.float64)
    if not np.isfinite(init).all() or np.abs(init).sum() == 0:
        raise RankError("initial weights must be finite and not all 0")
    fold, k = _task_folds(t, rows, y, folds)
    fold_cols = []
    for j in range(k):
        tr, va = np.zeros(K, dtype=bool), np.zeros(K, dtype=bool)
        tr[rows[fold != j]], va[rows[fold == j]] = True, True
        fold_cols.append(columns.add(tr, va, items, init))
    full = np.zeros(K, dtype=bool)
    full[rows] = True
    fold_ids = np.full(K, -1)
    fold_ids[rows] = fold if k else -1
    return _Plan(t, fold_cols, columns.add(full, np.zeros(K, dtype=bool), items, init), k, done=not k,
                 fold_ids=fold_ids, n_models=len(rows))


def _task_folds(t: Task, rows: np.ndarray, y: np.ndarray, folds: int) -> tuple[np.ndarray, int]:
    """(fold id per row, number of folds): the task's own folds (renumbered; 0 folds unless each
    has at least 2 models on either side) or ``min(folds, n // 2)`` stratified ones (:func:`kfold`)."""
    if t.folds is not None:
        fold = np.asarray(t.folds, dtype=int)
        if fold.shape != rows.shape:
            raise RankError(f"{len(fold)} fold ids for {len(rows)} models")
        ids = sorted(set(fold.tolist()) - {-1})
        fold = np.array([ids.index(f) if f >= 0 else -1 for f in fold], dtype=int)
        k = len(ids) if all((fold == j).sum() >= 2 and (fold != j).sum() >= 2 for j in range(len(ids))) else 0
        return fold, k
    k = min(folds, len(rows) // 2)
    k = k if k >= 2 else 0
    return (kfold(y[rows], k, t.seed) if k else np.zeros(len(rows), dtype=int)), k


def _follow(run: Iterator[Checkpoint], plans: list[_Plan], max_steps: int, patience: int) -> int:
    """Follow the run's checkpoints as the protocol does (module doc); returns the steps run."""
    step = 0
    for cp in run:
        step = cp.step
        for p in plans:
            if p.weights is None:                                        # step 0: the initial weights
                p.weights, p.fold_weights = cp.weights(p.refit), cp.weights(p.folds)
            if p.done:
                continue
            fv = cp.val[p.folds]
            mean_val = float(np.nanmean(fv)) if np.isfinite(fv).any() else np.nan
            p.curve.append((cp.step, float(np.nanmean(cp.train[p.folds])), mean_val))
            p.fold_val.append(fv)
            if np.isfinite(mean_val) and mean_val < p.best[0] - 1e-7:
                p.best = (mean_val, cp.step)
                p.weights, p.fold_weights = cp.weights(p.refit), cp.weights(p.folds)
            elif cp.step - p.best[1] >= patience:
                p.done = True
        if step >= max_steps or all(p.done for p in plans):
            break
    run.close()
    return step


def fit(X, y, *, seed: int = 0, items=None, init=None, **kwargs) -> Fit:
    """The cross-validated protocol on all rows of ``X`` (see :func:`fit_many` for the settings)."""
    return fit_many(X, y, [Task(np.arange(len(X)), seed, items, init)], **kwargs)[0]
