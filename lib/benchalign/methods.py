"""BenchAlign's methods and the protocol they share: train on small models, test on unseen large ones.

:func:`split_by_size` makes the source and test models; :data:`METHODS` is the registry (adding a
method is one function and one :func:`register` line: the tables, figure order and ``numbers.tex``
follow it); :func:`cv_fits` is the cross-validated protocol of every method that learns weights;
:func:`evaluate` scores the test groups. Beside them stand the model-metadata baselines that could
explain a gain without any item weights (the instruction-tuned flag, the parameter count, the flag
with plain accuracy breaking its ties, BenchAlign given the flag as a feature).

Training never sees a test model: every fit receives only the rows of source models
(:func:`cv_fits` passes them and nothing else), and the test groups are disjoint from the source
set by construction (``size < source_max_b`` versus ``size >= min_b >= source_max_b``). The test
models are scored once per method and seed, after fitting (:func:`evaluate`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import rankdata

from ..outputs import clean
from . import baselines, rank
from .data import ItemData

# The paper's values set beside ours in the tables and figures (Spearman rho of the test models'
# ranking; its target: ArmoRM reward-model preferences, 4,364 models, 21,065 items): the 70B+ rho of
# no alignment and of BenchAlign, as README.md has quoted them since stage 07 was built. The paper's
# other cells (13B+, 30B+, its subsets and loss ablation) are not held here and stay blank, not guessed.
PAPER_RHO: dict[str, dict[str, float]] = {"70B+": {"no_alignment": 0.15, "benchalign": 0.71}}


class ExperimentError(ValueError):
    """An experiment cannot run on the given data (the message says why)."""


@dataclass
class Config:
    """Training settings shared by every BenchAlign fit of an experiment."""
    lr: float = 1e-4
    max_steps: int = 3000
    patience: int = 200      # steps without a lower mean validation loss before a run stops
    folds: int = 5           # k of the k-fold cross-validation over the source models
    floor: float = rank.FLOOR
    subset_items: int = 100
    loss: str = "ranknet"
    eval_every: int = 10     # the candidate step counts: 0, eval_every, 2 eval_every, ...
    validation: str = "kfold"   # "kfold": stratified k-fold; "largest": the largest 1/folds of the source models


VALIDATIONS = ("kfold", "largest")


def subset_items(fraction: float, n_items: int) -> int:
    """Items a subset method keeps at ``fraction`` of ``n_items`` (at least 1)."""
    return max(1, int(round(fraction * n_items)))


@dataclass
class Split:
    source: np.ndarray                     # row indices of the source models
    groups: dict[str, np.ndarray]          # test group -> row indices
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {"source": int(len(self.source)), **{g: int(len(v)) for g, v in self.groups.items()}}


def split_by_size(data: ItemData, source_max_b: float, test_groups: dict[str, float],
                  min_test: int = 3, relative: bool = False) -> Split:
    """Source = known size < ``source_max_b``; test group g = known size >= ``test_groups[g]``.

    With ``relative`` the thresholds are quantiles (0..1) of the known sizes' ranks instead of
    billions of parameters (for worlds of tiny models, e.g. source 0.5 = the smaller half).
    Groups with fewer than ``min_test`` models are dropped with a note (a ranking of two models
    says little); a group threshold below ``source_max_b`` is an error (it would test on source
    models).
    """
    if data.size_b is None:
        raise ExperimentError("the item data carries no model sizes")
    size = np.asarray(data.size_b, dtype=np.float64)
    known = np.isfinite(size)
    if relative:
        q = np.full(len(size), np.nan)
        if known.sum() > 1:
            q[known] = (rankdata(size[known], method="average") - 1) / (known.sum() - 1)
        elif known.any():
            q[known] = 0.0
        size = q
    unit = "" if relative else "B"
    source = np.flatnonzero(known & (size < source_max_b))
    notes = []
    if (~known).any():
        notes.append(f"{int((~known).sum())} model(s) without a known size are not used")
    groups = {}
    for name, min_b in test_groups.items():
        if min_b < source_max_b:
            raise ExperimentError(f"test group {name!r} starts at {min_b}{unit}, below the source limit "
                                  f"{source_max_b}{unit}: it would contain source models")
        idx = np.flatnonzero(known & (size >= min_b))
        if len(idx) < min_test:
            notes.append(f"test group {name} has {len(idx)} model(s) (< {min_test}): not evaluated")
            continue
        groups[name] = idx
    if len(source) < 2:
        notes.append(f"only {len(source)} source model(s): nothing can be learned")
    elif len(source) < 4:
        notes.append(f"only {len(source)} source models: too few to cross-validate, the learned methods "
                     "keep their initial weights")
    return Split(source=source, groups=groups, notes=notes)


# --------------------------------------------------------------------------- the protocol
def largest_fold(data: ItemData, rows: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Fold ids for ``validation="largest"``: the largest ``1/folds`` of ``rows`` by size (at least 2
    models; equal sizes in an order drawn with ``seed``) form the one validation fold (0), the
    others are only trained on (-1), as the test models are larger than every source model."""
    size = np.asarray(data.size_b, dtype=np.float64)[rows]
    order = np.lexsort((np.random.default_rng(30_000 + seed).random(len(rows)), size))
    fold = np.full(len(rows), -1)
    fold[order[len(rows) - max(2, int(round(len(rows) / folds))):]] = 0
    return fold


def cv_fits(data: ItemData, tasks: Sequence[rank.Task], cfg: Config, loss: str | None = None) -> list[rank.Fit]:
    """The cross-validated protocol for ``tasks`` (rows index ``data``), seeing only their rows:
    ``rank.fit_many`` receives the features and targets of those rows and nothing else."""
    if cfg.validation not in VALIDATIONS:
        raise ExperimentError(f"unknown validation {cfg.validation!r}; expected one of {VALIDATIONS}")
    rows = np.unique(np.concatenate([np.asarray(t.rows, dtype=int) for t in tasks]))
    where = {r: i for i, r in enumerate(rows)}
    local = [rank.Task(np.array([where[r] for r in t.rows]), t.seed, t.items, t.init,
                       largest_fold(data, np.asarray(t.rows, dtype=int), cfg.folds, t.seed)
                       if cfg.validation == "largest" and len(t.rows) >= 4 else None) for t in tasks]
    return rank.fit_many(data.X[rows], data.target[rows], local, folds=cfg.folds, loss=loss or cfg.loss,
                         lr=cfg.lr, max_steps=cfg.max_steps, patience=cfg.patience,
                         eval_every=cfg.eval_every, floor=cfg.floor)


# --------------------------------------------------------------------------- the methods
@dataclass
class Outcome:
    """One method fitted with one seed: scores of every model, item weights over all M items (None
    for non-linear scorers), and the cross-validated fit (None for methods that learn no weights)."""
    scores: np.ndarray
    weights: np.ndarray | None
    fit: rank.Fit | None = None


@dataclass(frozen=True)
class Method:
    """One way to score models from items: ``fit(data, source, seeds, cfg, loss)`` returns one
    :class:`Outcome` per seed (``source``: the rows it may learn from)."""
    name: str
    label: str                     # for tables and figures
    fit: Callable
    learns: bool = True            # fitted on source models (skipped with fewer than 2)
    headline: bool = False         # its numbers go to numbers.tex and the cross-paper comparison
    flag: bool = False             # needs the instruction-tuned flag (``ItemData.instruct``)
    baseline: bool = False         # BenchAlign's tables compare against it (paired differences)


METHODS: dict[str, Method] = {}


def register(name: str, label: str, **flags) -> Callable:
    """Decorator adding ``fit`` to :data:`METHODS` under ``name`` (registry order = display order)."""
    def add(fit: Callable) -> Callable:
        METHODS[name] = Method(name, label, fit, **flags)
        return fit
    return add


def _scored(base: baselines.ItemWeighting, data: ItemData) -> Outcome:
    """Scores of every model under a baseline, and its weights over all M items."""
    if base.scorer is not None:
        return Outcome(base.score(data.X), None)
    full = np.zeros(data.X.shape[1])
    full[base.items] = base.weights
    return Outcome(base.score(data.X), full)


@register("no_alignment", "No alignment (plain accuracy)", learns=False, headline=True, baseline=True)
def _no_alignment(data, source, seeds, cfg, loss=None):
    return [_scored(baselines.no_alignment(data.X.shape[1]), data) for _ in seeds]


@register("random", "Random weights", learns=False, headline=True)
def _random(data, source, seeds, cfg, loss=None):
    return [_scored(baselines.random_weights(data.X.shape[1], seed), data) for seed in seeds]


# Subset methods: which items to keep and their weights, chosen on the source models.
SUBSETS: dict[str, Callable] = {
    "best_single": lambda data, X, y, seed, cfg: baselines.best_single(X, y, data.item_benchmark),
    "metabench_like": lambda data, X, y, seed, cfg: baselines.metabench_like(X, cfg.subset_items, seed=seed),
    "tinybenchmarks_like": lambda data, X, y, seed, cfg: baselines.tinybenchmarks_like(X, cfg.subset_items,
                                                                                       seed=seed),
}


_SUBSET_CACHE: dict[tuple, baselines.ItemWeighting] = {}


def _subset(name: str, data: ItemData, source, seed: int, cfg: Config) -> baselines.ItemWeighting:
    """The subset ``name`` chosen on the source rows (remembered by the content of what it reads, so
    a subset method and its + BenchAlign combination choose it once)."""
    source = np.asarray(source, dtype=int)
    X, y = data.X[source], data.target[source]
    key = (name, seed, cfg.subset_items, hashlib.sha1(X.tobytes() + y.tobytes()).hexdigest(),
           hashlib.sha1(np.asarray(data.item_benchmark).astype(str).tobytes()).hexdigest())
    if key not in _SUBSET_CACHE:
        if len(_SUBSET_CACHE) > 64:
            _SUBSET_CACHE.clear()
        _SUBSET_CACHE[key] = SUBSETS[name](data, X, y, seed, cfg)
    return _SUBSET_CACHE[key]


def _subset_method(name: str) -> Callable:
    return lambda data, source, seeds, cfg, loss=None: [_scored(_subset(name, data, source, s, cfg), data)
                                                         for s in seeds]


def _with_fits(data: ItemData, fits: list[rank.Fit]) -> list[Outcome]:
    return [Outcome(f.scores(data.X), f.weights, f) for f in fits]


def _subset_plus_benchalign(name: str) -> Callable:
    """BenchAlign on the items a subset method keeps, starting from its weights (the subset is
    chosen once on all source models; the protocol then chooses the steps)."""
    def fit(data, source, seeds, cfg, loss=None):
        bases = [_subset(name, data, source, s, cfg) for s in seeds]
        tasks = [rank.Task(source, s, b.items, b.weights) for s, b in zip(seeds, bases)]
        return _with_fits(data, cv_fits(data, tasks, cfg, loss))
    return fit


# --------------------------------------------------------------------------- model metadata alone
def _flag(data: ItemData) -> np.ndarray:
    if data.instruct is None:
        raise ExperimentError("the item data carries no instruction-tuned flag")
    return data.instruct.astype(np.float64)


@register("instruct_flag", "Instruction-tuned flag (model name)", learns=False, headline=True, flag=True, baseline=True)
def _instruct_flag(data, source, seeds, cfg, loss=None):
    return [Outcome(_flag(data), None) for _ in seeds]


@register("flag_accuracy", "Flag, ties broken by plain accuracy", learns=False, headline=True, flag=True, baseline=True)
def _flag_accuracy(data, source, seeds, cfg, loss=None):
    acc = np.asarray(data.X, dtype=np.float64).mean(axis=1)
    span = float(np.ptp(acc)) + 1.0 if len(acc) else 1.0      # every flagged model above every other
    return [Outcome(_flag(data) * span + acc, None) for _ in seeds]


@register("param_count", "Parameter count (model name)", learns=False, headline=True, baseline=True)
def _param_count(data, source, seeds, cfg, loss=None):
    if data.size_b is None:
        raise ExperimentError("the item data carries no model sizes")
    return [Outcome(np.asarray(data.size_b, dtype=np.float64), None) for _ in seeds]


def with_flag(data: ItemData) -> ItemData:
    """``data`` with the instruction-tuned flag (0/1) as one more item column, benchmark ``flag``."""
    return ItemData(np.hstack([data.X, _flag(data)[:, None]]), list(data.models),
                    np.append(data.item_benchmark, "flag"), np.append(data.item_id, 0), data.target,
                    data.size_b, dict(data.info), data.instruct)


@register("benchalign_flag", "BenchAlign + flag as a feature", headline=True, flag=True)
def _benchalign_flag(data, source, seeds, cfg, loss=None):
    aug = with_flag(data)
    return _with_fits(aug, cv_fits(aug, [rank.Task(source, s) for s in seeds], cfg, loss))


def restrict(split: Split, keep: np.ndarray, min_test: int = 3) -> Split:
    """``split`` with only the models where ``keep`` (a boolean per model) holds, in the source set
    and in every test group; groups left with fewer than ``min_test`` models are dropped (a note)."""
    keep = np.asarray(keep, dtype=bool)
    notes, groups = [], {}
    for g, idx in split.groups.items():
        idx = idx[keep[idx]]
        if len(idx) < min_test:
            notes.append(f"test group {g} has {len(idx)} model(s) here (< {min_test}): not evaluated")
            continue
        groups[g] = idx
    source = split.source[keep[split.source]]
    if len(source) < 4:
        notes.append(f"only {len(source)} source model(s) here: too few to cross-validate")
    return Split(source=source, groups=groups, notes=notes)


register("best_single", "Best single benchmark", headline=True, baseline=True)(_subset_method("best_single"))
register("metabench_like", "MetaBench-like (IRT subset)")(_subset_method("metabench_like"))
register("tinybenchmarks_like", "TinyBenchmarks-like (anchors)")(_subset_method("tinybenchmarks_like"))


@register("benchalign", "BenchAlign", headline=True)
def _benchalign(data, source, seeds, cfg, loss=None):
    return _with_fits(data, cv_fits(data, [rank.Task(source, s) for s in seeds], cfg, loss))


for _name in SUBSETS:
    register(f"{_name}+benchalign", f"{METHODS[_name].label} + BenchAlign")(_subset_plus_benchalign(_name))


BASELINES = tuple(m for m, spec in METHODS.items() if spec.baseline)     # registry order


def method_label(name: str) -> str:
    """The registry's label of a method (its name where the registry has none)."""
    return METHODS[name].label if name in METHODS else name


def run_method(method: str, data: ItemData, source, seeds: Sequence[int], cfg: Config,
               loss: str | None = None) -> list[Outcome]:
    """``method`` fitted on the source rows, once per seed."""
    if method not in METHODS:
        raise ExperimentError(f"unknown method {method!r}; expected one of {list(METHODS)}")
    return METHODS[method].fit(data, np.asarray(source, dtype=int), list(seeds), cfg, loss)


def best_single_choice(data: ItemData, split: Split) -> dict:
    """Which benchmark the ``best_single`` baseline picks on the source models, and every
    benchmark's Spearman rho with the target there."""
    if len(split.source) < 2:
        return {}
    base = baselines.best_single(data.X[split.source], data.target[split.source], data.item_benchmark)
    return {"benchmark": base.info["benchmark"],
            "source_rho": {b: clean(r) for b, r in base.info["source_rho"].items()}}


def evaluate(scores: np.ndarray, y: np.ndarray, groups: dict[str, np.ndarray]) -> dict[str, dict]:
    """Spearman rho and pairwise accuracy of ``scores`` on each test group (the one place that
    reads the test models' targets)."""
    return {g: {"spearman": rank.spearman(scores[idx], y[idx]),
                "pair_acc": rank.pair_accuracy(scores[idx], y[idx])} for g, idx in groups.items()}


def set_threads(n: int) -> None:
    """Torch threads for the fits (1 is fastest for these small problems on a busy machine)."""
    import torch

    if n > 0:
        torch.set_num_threads(n)
