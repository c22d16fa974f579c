"""The experiments of notebook 07: train on small models, test on unseen large ones.

- :func:`split_by_size` -- source models (smaller than ``source_max_b``) and test groups (at least
  ``min_b`` each, e.g. ``{"30B+": 30, "70B+": 70}``); models without a known size are left out.
- :data:`METHODS` -- the registry of methods: name -> :class:`Method` (a label and one function
  ``fit(data, source, seeds, cfg, loss) -> [Outcome per seed]``: the scores of every model, the item
  weights, the cross-validated fit). Adding a method is one function and one :func:`register` line;
  the notebook's tables, figure order and ``numbers.tex`` follow the registry.
- The protocol of every method that learns weights (BenchAlign, the subset + BenchAlign
  combinations, the loss ablation, the data needs, the cross-paper experiment) is
  :func:`lib.benchalign.rank.fit_many`: k-fold cross-validation over the source models chooses the
  number of Adam steps (step 0, plain accuracy, is a candidate) by mean validation loss, then one
  refit on all source models with that choice. A seed fixes the folds (and the random draws of the
  random and subset methods); the seeds of one method run as one batch.
- :func:`compare` -- every method for several seeds; :func:`summarise` turns the predictions into
  the ``{group: {method: {...}}}`` comparison: seed means, the spread over seeds, 95 % bootstrap
  intervals over the test models, and paired differences to no alignment and to the best single
  benchmark on the same bootstrap draws (:func:`bootstrap`).
- :func:`ablation` (ranking losses), :func:`data_needs` (source models chosen at random, spread
  over the target, or by label-free k-center selection; items) and :func:`cross_paper`
  (direct-evaluation scores -> train-before-test ranking).
- :func:`benchalign_report` -- all of notebook 07 in one call.

Training never sees a test model: every fit receives only the rows of source models
(:func:`_cv_fits` passes them and nothing else), and the test groups are disjoint from the source
set by construction (``size < source_max_b`` versus ``size >= min_b >= source_max_b``). The test
models are scored once per method and seed, after fitting (:func:`evaluate`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from . import baselines, rank
from .data import ItemData

REFERENCES = ("no_alignment", "best_single")      # paired differences are taken against these


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


def _cv_fits(data: ItemData, tasks: Sequence[rank.Task], cfg: Config, loss: str | None = None) -> list[rank.Fit]:
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
    items: bool = False            # needs item-level 0/1 features (the cross-paper data has scores)
    headline: bool = False         # its numbers go to numbers.tex and the cross-paper comparison


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


@register("no_alignment", "No alignment (plain accuracy)", learns=False, headline=True)
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
        return _with_fits(data, _cv_fits(data, tasks, cfg, loss))
    return fit


register("best_single", "Best single benchmark", headline=True)(_subset_method("best_single"))
register("metabench_like", "MetaBench-like (IRT subset)", items=True)(_subset_method("metabench_like"))
register("tinybenchmarks_like", "TinyBenchmarks-like (anchors)", items=True)(_subset_method("tinybenchmarks_like"))


@register("benchalign", "BenchAlign", headline=True)
def _benchalign(data, source, seeds, cfg, loss=None):
    return _with_fits(data, _cv_fits(data, [rank.Task(source, s) for s in seeds], cfg, loss))


for _name in SUBSETS:
    register(f"{_name}+benchalign", f"{METHODS[_name].label} + BenchAlign",
             items=METHODS[_name].items)(_subset_plus_benchalign(_name))


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
            "source_rho": {b: _clean(r) for b, r in base.info["source_rho"].items()}}


def evaluate(scores: np.ndarray, y: np.ndarray, groups: dict[str, np.ndarray]) -> dict[str, dict]:
    """Spearman rho and pairwise accuracy of ``scores`` on each test group (the one place that
    reads the test models' targets)."""
    return {g: {"spearman": rank.spearman(scores[idx], y[idx]),
                "pair_acc": rank.pair_accuracy(scores[idx], y[idx])} for g, idx in groups.items()}


@dataclass
class Comparison:
    rows: pd.DataFrame                       # method, seed, group, spearman, pair_acc
    preds: dict[str, np.ndarray]             # method -> seeds x models scores
    weights: dict[str, list[np.ndarray]]     # method -> per-seed item weights (weighted methods)
    split: Split
    fits: dict[str, list[rank.Fit]] = field(default_factory=dict)   # method -> per-seed fits (learned)


def compare(data: ItemData, split: Split, methods=tuple(METHODS), seeds: int = 5, cfg: Config | None = None,
            progress=None) -> Comparison:
    """Fit and evaluate every method for seeds 0..seeds-1 (methods that learn from source models
    are skipped when there are fewer than 2); ``progress`` (a :class:`lib.progress.Progress`)
    advances by one per method."""
    cfg = cfg or Config()
    if data.target is None:
        raise ExperimentError("the item data carries no target scores")
    rows, preds, weights, fits = [], {}, {}, {}
    for method in methods:
        if len(split.source) < 2 and METHODS[method].learns:
            _advance(progress)
            continue                                   # nothing to fit on (the split's notes say so)
        outcomes = run_method(method, data, split.source, range(seeds), cfg)
        preds[method] = np.array([o.scores for o in outcomes])
        if outcomes[0].weights is not None:
            weights[method] = [o.weights for o in outcomes]
        if outcomes[0].fit is not None:
            fits[method] = [o.fit for o in outcomes]
        for seed, o in enumerate(outcomes):
            for g, res in evaluate(o.scores, data.target, split.groups).items():
                rows.append({"method": method, "seed": seed, "group": g, **res})
        _advance(progress)
    df = pd.DataFrame(rows, columns=["method", "seed", "group", "spearman", "pair_acc"])
    return Comparison(df, preds, weights, split, fits)


def _advance(progress, note: str = "") -> None:
    if progress is not None:
        progress.advance(note=note)


# --------------------------------------------------------------------------- uncertainty
def _batched_spearman(S: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rho of each row of S (B x n) against the matching row of y (B x n)."""
    rs, ry = rankdata(S, axis=-1), rankdata(y, axis=-1)
    rs, ry = rs - rs.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
    den = np.sqrt((rs ** 2).sum(-1) * (ry ** 2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rs * ry).sum(-1) / den, np.nan)


def _counted_pair_acc(s: np.ndarray, y: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Pairwise accuracy of scores ``s`` (n) against ``y`` (n) on resamples given by how often each
    model was drawn (``counts``: B x n): ``c^T H c / c^T P c`` with ``P_ij = [y_i > y_j]`` and
    ``H_ij = P_ij ([s_i > s_j] + [s_i = s_j] / 2)``."""
    P = (y[:, None] > y[None, :]).astype(np.float64)
    H = P * ((s[:, None] > s[None, :]) + 0.5 * (s[:, None] == s[None, :]))
    num = ((counts @ H) * counts).sum(1)
    den = ((counts @ P) * counts).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def resamples(n: int, n_boot: int, seed: int = 0) -> np.ndarray:
    """``n_boot`` bootstrap resamples of ``n`` test models (positions, n_boot x n), drawn once and
    shared by every method, so that differences between methods are paired."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def bootstrap(preds: np.ndarray, y: np.ndarray, idx: np.ndarray, pick: np.ndarray) -> dict[str, np.ndarray]:
    """Metrics of each seed's predictions (``preds``: seeds x models) on the resampled test models
    ``idx[pick]`` (``pick`` from :func:`resamples`): ``{metric: seeds x n_boot}``."""
    preds = np.atleast_2d(preds)
    rows = idx[pick]                                                   # n_boot x n
    counts = np.zeros((len(pick), len(idx)))
    np.add.at(counts, (np.arange(len(pick))[:, None], pick), 1.0)
    yb = y[rows]
    return {"spearman": np.array([_batched_spearman(p[rows], yb) for p in preds]),
            "pair_acc": np.array([_counted_pair_acc(p[idx], y[idx], counts) for p in preds])}


def _clean(x) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 4)


def _seed_mean(v: np.ndarray) -> np.ndarray:
    """Mean over seeds (axis 0) of each bootstrap draw, ignoring NaN seeds (NaN if all are)."""
    ok = np.isfinite(v)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok.any(0), np.where(ok, v, 0.0).sum(0) / ok.sum(0), np.nan)


def _interval(draws: np.ndarray) -> list | None:
    draws = draws[np.isfinite(draws)]
    return [_clean(v) for v in np.percentile(draws, [2.5, 97.5])] if len(draws) > 1 else None


def summarise(comp: Comparison, y: np.ndarray, n_boot: int = 1000, seed: int = 0) -> dict:
    """``{group: {method: record}}``. A record holds, for ``metric`` in (spearman, pair_acc):

    - ``metric``: the mean over seeds of the metric on all test models of the group;
    - ``metric_seed_std``: its standard deviation over seeds (what a different fold assignment,
      random draw or subset changes);
    - ``metric_ci``, ``metric_std``: 95 % percentile interval and standard deviation of the seed
      mean over ``n_boot`` bootstrap resamples of the test models (what a different sample of
      test models changes);
    - ``metric_diff_<ref>``, ``metric_diff_<ref>_ci`` for ref in :data:`REFERENCES`: the paired
      difference to that method (same resamples for both; point = difference of the means) with
      its 95 % interval;

    and ``n_models``, ``n_seeds``.
    """
    out: dict[str, dict] = {}
    for g, idx in comp.split.groups.items():
        pick = resamples(len(idx), n_boot, seed)
        draws = {m: {k: _seed_mean(v) for k, v in bootstrap(P, y, idx, pick).items()}
                 for m, P in comp.preds.items()}
        out[g] = {}
        for method in comp.preds:
            sub = comp.rows[(comp.rows.method == method) & (comp.rows.group == g)]
            rec = {"n_models": int(len(idx)), "n_seeds": int(len(sub))}
            for metric in ("spearman", "pair_acc"):
                d = draws[method][metric]
                fin = d[np.isfinite(d)]
                rec[metric] = _clean(sub[metric].mean())
                rec[f"{metric}_std"] = _clean(fin.std(ddof=1)) if len(fin) > 1 else None
                rec[f"{metric}_ci"] = _interval(d)
                rec[f"{metric}_seed_std"] = _clean(sub[metric].std(ddof=0)) if len(sub) else None
                for ref in REFERENCES:
                    if ref == method or ref not in comp.preds:
                        continue
                    other = comp.rows[(comp.rows.method == ref) & (comp.rows.group == g)][metric].mean()
                    rec[f"{metric}_diff_{ref}"] = _clean(sub[metric].mean() - other)
                    rec[f"{metric}_diff_{ref}_ci"] = _interval(d - draws[ref][metric])
            out[g][method] = rec
    return out


def table(summary_main: dict, metric: str = "spearman") -> pd.DataFrame:
    """Method x group table of ``metric`` as 'mean [95 % ci] (seed std)' strings (for display)."""
    cells = {}
    for g, methods in summary_main.items():
        for m, r in methods.items():
            if r.get(metric) is None:
                cells[(METHODS[m].label if m in METHODS else m, g)] = "n/a"
                continue
            ci = r.get(f"{metric}_ci")
            cells[(METHODS[m].label if m in METHODS else m, g)] = (
                f"{r[metric]:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
                + (f" (seeds ± {r[f'{metric}_seed_std']:.3f})" if r.get(f"{metric}_seed_std") else ""))
    return _registry_order(cells)


def _registry_order(cells: dict) -> pd.DataFrame:
    """(method label, group) -> text cells as a table, methods in registry order."""
    s = pd.Series(cells, dtype=object)
    if not len(s):
        return pd.DataFrame()
    df = s.unstack()
    order = [spec.label for spec in METHODS.values() if spec.label in df.index]
    return df.reindex(order + [m for m in df.index if m not in order])


def paired_table(summary_main: dict, metric: str = "spearman", ref: str = "no_alignment") -> pd.DataFrame:
    """Method x group table of the paired difference to ``ref`` as 'diff [95 % ci]' strings."""
    cells = {}
    for g, methods in summary_main.items():
        for m, r in methods.items():
            d, ci = r.get(f"{metric}_diff_{ref}"), r.get(f"{metric}_diff_{ref}_ci")
            if d is not None:
                cells[(METHODS[m].label if m in METHODS else m, g)] = (
                    f"{d:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else ""))
    return _registry_order(cells)


def weights_by_benchmark(data: ItemData, weights: list[np.ndarray]) -> pd.DataFrame:
    """Per benchmark: summed weight, positive and negative mass, share of negative items (seed means)."""
    W = np.array(weights)
    rows = []
    for b in data.benchmarks:
        m = data.item_benchmark == b
        rows.append({"benchmark": b, "items": int(m.sum()), "weight_sum": W[:, m].sum(1).mean(),
                     "weight_sum_std": W[:, m].sum(1).std(), "positive": np.clip(W[:, m], 0, None).sum(1).mean(),
                     "negative": np.clip(W[:, m], None, 0).sum(1).mean(),
                     "share_negative_items": (W[:, m] < 0).mean()})
    return pd.DataFrame(rows).set_index("benchmark")


# --------------------------------------------------------------------------- the protocol, summarised
def protocol_summary(fits: dict[str, list[rank.Fit]], cfg: Config, curve_method: str = "benchalign") -> dict:
    """How the protocol chose: per learned method the chosen steps per seed, the folds and the steps
    run; for ``curve_method`` the learning curves (mean validation and training loss over the folds
    at every candidate step, per seed)."""
    out = {"folds": cfg.folds, "candidate_steps": f"0, {cfg.eval_every}, {2 * cfg.eval_every}, ... "
           f"(at most {cfg.max_steps}; a run stops {cfg.patience} steps after its best)",
           "lr": cfg.lr, "loss": cfg.loss, "chosen_steps": {}, "folds_used": {}, "steps_run": {}, "notes": {}}
    for m, fs in fits.items():
        out["chosen_steps"][m] = [int(f.step) for f in fs]
        out["folds_used"][m] = sorted({int(f.folds) for f in fs})
        out["steps_run"][m] = int(max(f.steps_run for f in fs))
        notes = sorted({f.note for f in fs if f.note})
        if notes:
            out["notes"][m] = notes
    if curve_method in fits and len(fits[curve_method][0].curve):
        fs = fits[curve_method]
        n = min(len(f.curve) for f in fs)
        out["curve"] = {"method": curve_method, "step": [int(s) for s in fs[0].curve[:n, 0]],
                        "val_loss": [[_clean(v) for v in f.curve[:n, 2]] for f in fs],
                        "train_loss": [[_clean(v) for v in f.curve[:n, 1]] for f in fs]}
    return out


# --------------------------------------------------------------------------- ablation
def ablation(data: ItemData, split: Split, losses=rank.LOSSES, seeds: int = 5, cfg: Config | None = None,
             done: dict[str, list[rank.Fit]] | None = None, progress=None) -> pd.DataFrame:
    """BenchAlign with each ranking loss (same protocol, folds and settings); rows per loss, seed,
    group, with the chosen step. ``done`` holds fits already made (e.g. the comparison's BenchAlign
    for ``cfg.loss``), reused instead of refitted."""
    cfg = cfg or Config()
    rows = []
    for loss in losses:
        fits = (done or {}).get(loss) or _cv_fits(data, [rank.Task(split.source, s) for s in range(seeds)],
                                                 cfg, loss)
        for seed, f in enumerate(fits):
            for g, res in evaluate(f.scores(data.X), data.target, split.groups).items():
                rows.append({"loss": loss, "seed": seed, "group": g, "step": f.step, **res})
        _advance(progress, f"ablation {loss}")
    return pd.DataFrame(rows, columns=["loss", "seed", "group", "step", "spearman", "pair_acc"])


# --------------------------------------------------------------------------- choosing source models
def spread_selection(data: ItemData, source: np.ndarray, k: int, seed: int) -> np.ndarray:
    """``k`` source models spread evenly over the range of their target ranks (uses every source
    model's target label: a selection made after the fact)."""
    y = data.target[source]
    order = np.argsort(y, kind="stable")
    pos = np.unique(np.round(np.linspace(0, len(order) - 1, min(k, len(order)))).astype(int))
    return np.sort(source[order[pos]])


def random_selection(data: ItemData, source: np.ndarray, k: int, seed: int) -> np.ndarray:
    """``k`` source models drawn at random (no label needed)."""
    return np.sort(np.random.default_rng(10_000 + seed).choice(source, size=k, replace=False))


def kcenter_selection(data: ItemData, source: np.ndarray, k: int, seed: int) -> np.ndarray:
    """``k`` source models chosen before any target label is known: greedy k-center (farthest-point)
    selection on the models' item-response vectors (Euclidean distance), starting from a model drawn
    with ``seed``; each next model is the one farthest from those already chosen."""
    X = np.asarray(data.X[source], dtype=np.float64)
    rng = np.random.default_rng(20_000 + seed)
    chosen = [int(rng.integers(len(source)))]
    dist = ((X - X[chosen[0]]) ** 2).sum(1)
    while len(chosen) < min(k, len(source)):
        nxt = int(np.argmax(dist))
        chosen.append(nxt)
        dist = np.minimum(dist, ((X - X[nxt]) ** 2).sum(1))
    return np.sort(source[chosen])


# kind of data-needs row -> how its source models are chosen (the ones marked label-free need no target)
SELECTIONS: dict[str, tuple[Callable, bool]] = {
    "source_random": (random_selection, True),
    "source_kcenter": (kcenter_selection, True),
    "source_spread": (spread_selection, False),
}


# --------------------------------------------------------------------------- data needs
def data_needs(data: ItemData, split: Split, source_counts=(10, 20, 40, 80), item_counts=(50, 100, 200, 400),
               seeds: int = 5, cfg: Config | None = None, progress=None, kinds=tuple(SELECTIONS)) -> pd.DataFrame:
    """Test rho/pair accuracy against the number of source models (chosen by each selection of
    :data:`SELECTIONS`) and of items (random subsets), BenchAlign under the cross-validated protocol
    next to no alignment on the same items. Counts above what the data has are skipped; the seeds
    of one (kind, count) run as one batch. Rows: kind, n, seed, group, method, metrics, step."""
    cfg = cfg or Config()
    rows = []
    n_src, M = len(split.source), data.X.shape[1]
    jobs = [(kind, n) for kind in kinds for n in source_counts if 2 <= n <= n_src]
    jobs += [("items", n) for n in item_counts if 1 <= n <= M]
    for kind, n in jobs:
        tasks = []
        for seed in range(seeds):
            if kind == "items":
                rng = np.random.default_rng(10_000 + seed)
                tasks.append(rank.Task(split.source, seed, np.sort(rng.choice(M, size=n, replace=False))))
            else:
                tasks.append(rank.Task(SELECTIONS[kind][0](data, split.source, n, seed), seed))
        for seed, (t, f) in enumerate(zip(tasks, _cv_fits(data, tasks, cfg))):
            plain = data.X.mean(axis=1) if t.items is None else data.X[:, t.items].mean(axis=1)
            for method, sc in (("benchalign", f.scores(data.X)), ("no_alignment", plain)):
                for g, res in evaluate(sc, data.target, split.groups).items():
                    rows.append({"kind": kind, "n": n, "seed": seed, "group": g, "method": method,
                                 "step": f.step if method == "benchalign" else 0, **res})
        _advance(progress, f"data needs {kind} {n}")
    return pd.DataFrame(rows, columns=["kind", "n", "seed", "group", "method", "step", "spearman", "pair_acc"])


def needs_jobs(split: Split, source_counts, item_counts, n_items: int, kinds=tuple(SELECTIONS)) -> int:
    """Number of (kind, count) runs :func:`data_needs` makes (for progress reports)."""
    n_src = len(split.source)
    return (len(kinds) * sum(2 <= n <= n_src for n in source_counts)
            + sum(1 <= n <= n_items for n in item_counts))


def config_dict(cfg: Config) -> dict:
    return asdict(cfg)


# --------------------------------------------------------------------------- across the two papers
CROSS_METHODS = tuple(m for m, spec in METHODS.items() if spec.headline)


def cross_paper(data: ItemData, source_max_b: float, test_min_b: float, seeds: int = 5,
                cfg: Config | None = None, n_boot: int = 1000) -> dict:
    """Can direct-evaluation scores predict the train-before-test ranking of larger models?

    ``data`` comes from :func:`lib.benchalign.data.load_cross_paper` (one feature per benchmark, so
    no alignment is the plain mean of the benchmark scores). Returns the split counts, the
    comparison of :data:`CROSS_METHODS` on the test models (same protocol and summary as the main
    comparison, with paired differences to the plain mean), the chosen steps, the learned weight per
    benchmark (seed mean and std) and the source and test models.
    """
    cfg = cfg or Config()
    group = f"{test_min_b:g}B+"
    split = split_by_size(data, source_max_b, {group: test_min_b})
    out = {"counts": split.counts(), "notes": split.notes, "source_max_b": source_max_b,
           "test_min_b": test_min_b, "benchmarks": list(data.item_benchmark)}
    if not split.groups or len(split.source) < 2:
        out["skipped"] = "; ".join(split.notes) or "too few models"
        return out
    comp = compare(data, split, CROSS_METHODS, seeds, cfg)
    out["comparison"] = summarise(comp, data.target, n_boot)[group]
    out["chosen_steps"] = {m: [int(f.step) for f in fs] for m, fs in comp.fits.items()}
    out["best_single"] = best_single_choice(data, split)
    W = np.array(comp.weights["benchalign"])
    out["weights"] = {b: {"mean": round(float(W[:, j].mean()), 5), "std": round(float(W[:, j].std()), 5)}
                      for j, b in enumerate(data.item_benchmark)}
    out["source_models"] = [data.models[i] for i in split.source]
    out["test_models"] = [data.models[i] for i in split.groups[group]]
    return out


# --------------------------------------------------------------------------- summary pieces
def ablation_summary(df: pd.DataFrame) -> dict:
    """``{group: {loss: {spearman, spearman_std, pair_acc, pair_acc_std, steps}}}`` (mean and std
    over seeds; the chosen steps per seed)."""
    out: dict = {}
    for (g, loss), sub in df.groupby(["group", "loss"], sort=False):
        rec = {k: _clean(v) for k, v in {
            "spearman": sub.spearman.mean(), "spearman_std": sub.spearman.std(ddof=0),
            "pair_acc": sub.pair_acc.mean(), "pair_acc_std": sub.pair_acc.std(ddof=0)}.items()}
        out.setdefault(g, {})[loss] = {**rec, "steps": [int(s) for s in sub.step]}
    return out


def needs_summary(df: pd.DataFrame) -> dict:
    """``{group: {kind: {n: {method: mean spearman}}}}`` of :func:`data_needs`."""
    out: dict = {}
    for (g, kind, n, method), sub in df.groupby(["group", "kind", "n", "method"]):
        out.setdefault(g, {}).setdefault(kind, {}).setdefault(str(int(n)), {})[method] = _clean(sub.spearman.mean())
    return out


def selection_summary(df: pd.DataFrame) -> dict:
    """``{group: {n: {kind: {spearman, spearman_seed_std, pair_acc}}}}``: BenchAlign's test metrics
    for k source models chosen by each selection (random, label-free k-center, spread over the
    target), side by side."""
    out: dict = {}
    sub = df[(df.method == "benchalign") & df.kind.isin(list(SELECTIONS))]
    for (g, n, kind), s in sub.groupby(["group", "n", "kind"]):
        out.setdefault(g, {}).setdefault(str(int(n)), {})[kind] = {
            "spearman": _clean(s.spearman.mean()), "spearman_seed_std": _clean(s.spearman.std(ddof=0)),
            "pair_acc": _clean(s.pair_acc.mean())}
    return out


def duplicates_line(info: dict) -> str:
    """One line about duplicated model names in the item files (the full lists stay in ``info``)."""
    dups = info.get("duplicated_names") or {}
    names = sorted({n for v in dups.values() for n in v})
    if not names:
        return "no duplicated model names"
    files = sum(bool(v) for v in dups.values())
    return (f"{len(names)} model names occur more than once in {files} of {len(dups)} item files; "
            f"duplicates policy {info.get('duplicates')!r} (the names: summary.json data.info.duplicated_names)")


def set_threads(n: int) -> None:
    """Torch threads for the fits (1 is fastest for these small problems on a busy machine)."""
    import torch

    if n > 0:
        torch.set_num_threads(n)


# --------------------------------------------------------------------------- notebook 07 in one call
def benchalign_report(items: ItemData, split: Split, cfg: Config, *, seeds: int = 5, n_boot: int = 1000,
                      losses=rank.LOSSES, source_counts=(), item_counts=(), need_seeds: int = 3,
                      cross_paper_store=None, cross_source_max_b: float = 3.5,
                      cross_test_min_b: float = 6.0, progress: bool = True) -> dict:
    """Everything notebook 07 shows: the method comparison on the test groups (``comparison``,
    ``main``), how the protocol chose (``protocol``), learned weights by benchmark (``by_bench``),
    the loss ablation (``ablation``), the data needs and source selections (``needs``), the
    cross-paper experiment (``cross``, on the published store when ``cross_paper_store`` is given),
    ``tables`` (name -> DataFrame to save), ``notes`` and ``summary`` (the plain numbers of
    summary.json). With ``progress``, a console line reports the units of work done (one unit: a
    method with all its seeds, a loss, a data-needs count, the cross-paper experiment)."""
    from ..progress import Progress
    from .data import ItemDataError, load_cross_paper

    notes = list(split.notes)
    fittable = bool(split.groups) and len(split.source) >= 2
    n_units = (len(METHODS) + (len(losses) + needs_jobs(split, source_counts, item_counts, items.X.shape[1])
                               if fittable else 0) + (cross_paper_store is not None))
    with Progress(n_units, "benchalign") if progress else nullcontext() as bar:
        comp = compare(items, split, tuple(METHODS), seeds, cfg, progress=bar)
        main = summarise(comp, items.target, n_boot)
        by_bench = (weights_by_benchmark(items, comp.weights["benchalign"]) if "benchalign" in comp.weights
                    else pd.DataFrame())
        done = {cfg.loss: comp.fits["benchalign"]} if "benchalign" in comp.fits else {}
        abl = ablation(items, split, losses, seeds, cfg, done, progress=bar) if fittable else pd.DataFrame()
        needs = (data_needs(items, split, source_counts, item_counts, need_seeds, cfg, progress=bar)
                 if fittable else pd.DataFrame())
        cross = {"skipped": "cross_paper is off in this profile"}
        if cross_paper_store is not None:
            try:
                cross = cross_paper(load_cross_paper(cross_paper_store), cross_source_max_b, cross_test_min_b,
                                    seeds, cfg, n_boot)
            except (ItemDataError, ValueError, KeyError) as exc:   # e.g. a store without direct_eval results
                cross = {"skipped": f"{type(exc).__name__}: {exc}"}
            _advance(bar, "cross-paper")
    if not main:
        notes.append("no test group could be evaluated: too few models for a source/test split")
    protocol = protocol_summary(comp.fits, cfg)
    by_note: dict[str, list[str]] = {}
    for m, ns in protocol["notes"].items():
        for n in ns:
            by_note.setdefault(n, []).append(m)
    notes += [f"{', '.join(ms)}: {n}" for n, ms in by_note.items()]
    tables = {f"comparison_{g.replace('+', 'plus')}": pd.DataFrame(main[g]).T for g in main}
    tables.update({name: df for name, df in (("ablation", abl), ("data_needs", needs),
                                             ("weights_by_benchmark", by_bench)) if len(df)})
    if "comparison" in cross:
        tables["cross_paper"] = pd.DataFrame(cross["comparison"]).T
    summary = {"data": {"models": len(items.models), "items": int(items.X.shape[1]), "features": items.benchmarks,
                        "target": items.info.get("target"), **split.counts(), "info": items.info,
                        "duplicates_line": duplicates_line(items.info)},
               "main": main, "best_single": best_single_choice(items, split),
               "protocol": protocol,
               "ablation": ablation_summary(abl) if len(abl) else {},
               "data_needs": needs_summary(needs) if len(needs) else {},
               "source_selection": selection_summary(needs) if len(needs) else {},
               "weights_by_benchmark": by_bench.round(5).to_dict(orient="index"),
               "cross_paper": cross, "config": config_dict(cfg), "notes": notes}
    return {"comparison": comp, "main": main, "protocol": protocol, "by_bench": by_bench, "ablation": abl,
            "needs": needs, "cross": cross, "tables": tables, "notes": notes, "summary": summary}


def headline_numbers(main: dict) -> dict:
    """``{group_method_metric: value}`` of the headline methods, for numbers.tex (metrics, their
    seed spread, and the paired difference to no alignment with its interval)."""
    out = {}
    for g, ms in main.items():
        for m, r in ms.items():
            if m not in METHODS or not METHODS[m].headline:
                continue
            for k in ("spearman", "pair_acc"):
                for key in (k, f"{k}_seed_std", f"{k}_diff_no_alignment"):
                    if r.get(key) is not None:
                        out[f"{g}_{m}_{key}"] = r[key]
                ci = r.get(f"{k}_diff_no_alignment_ci")
                if ci:
                    out[f"{g}_{m}_{k}_diff_no_alignment_lo"], out[f"{g}_{m}_{k}_diff_no_alignment_hi"] = ci
    return out
