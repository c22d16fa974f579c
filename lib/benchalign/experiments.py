"""The experiments of notebook 07: train on small models, test on unseen large ones.

- :func:`split_by_size` -- source models (smaller than ``source_max_b``) and test groups (at least
  ``min_b`` each, e.g. ``{"30B+": 30, "70B+": 70}``); models without a known size are left out.
- :data:`METHODS` -- the registry of methods: name -> :class:`Method` (a label and one function
  ``fit(data, train, val, seed, cfg, loss) -> (scores of every model, item weights or None)``).
  Adding a method is one function and one :func:`register` line; the notebook's tables, figure
  order and ``numbers.tex`` follow the registry.
- :func:`compare` -- every method for several seeds (a seed fixes the source train/validation
  split and the random draws); :func:`summarise` turns the predictions into the
  ``{group: {method: {...}}}`` comparison with uncertainty (:func:`bootstrap`).
- :func:`ablation` (ranking losses), :func:`data_needs` (source models, items) and
  :func:`cross_paper` (direct-evaluation scores -> train-before-test ranking).
- :func:`benchalign_report` -- all of notebook 07 in one call.

Training never sees a test model: every fit receives only the rows of source models
(:func:`_fit_rows` asserts it), and the test groups are disjoint from the source set by
construction (``size < source_max_b`` versus ``size >= min_b >= source_max_b``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from . import baselines, rank
from .data import ItemData


class ExperimentError(ValueError):
    """An experiment cannot run on the given data (the message says why)."""


@dataclass
class Config:
    """Training settings shared by every BenchAlign fit of an experiment."""
    lr: float = 1e-4
    max_steps: int = 3000
    patience: int = 500      # the validation loss rises before it falls (module doc of rank)
    val_fraction: float = 0.2
    floor: float = rank.FLOOR
    subset_items: int = 100
    loss: str = "ranknet"
    eval_every: int = 10


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
    return Split(source=source, groups=groups, notes=notes)


def train_val(source: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random train/validation split of the source models (no validation below 6 models)."""
    perm = np.random.default_rng(seed).permutation(np.asarray(source))
    n_val = int(round(val_fraction * len(perm))) if len(perm) >= 6 else 0
    n_val = min(max(n_val, 2 if n_val else 0), len(perm) - 2)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


# --------------------------------------------------------------------------- fitting one method
def _fit_rows(data: ItemData, train, val, cfg: Config, items=None, init=None,
              loss: str | None = None) -> rank.Fit:
    X = data.X if items is None else data.X[:, items]
    return rank.fit(X[train], data.target[train], X[val] if len(val) else None,
                    data.target[val] if len(val) else None, loss=loss or cfg.loss, lr=cfg.lr,
                    max_steps=cfg.max_steps, patience=cfg.patience, init=init,
                    floor=cfg.floor, eval_every=cfg.eval_every)


# --------------------------------------------------------------------------- the methods
@dataclass(frozen=True)
class Method:
    """One way to score models from items: ``fit(data, train, val, seed, cfg, loss)`` returns the
    scores of every model and the item weights over all M items (None for non-linear scorers)."""
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


def _scored(base: baselines.ItemWeighting, data: ItemData):
    """Scores of every model under a baseline, and its weights over all M items."""
    if base.scorer is not None:
        return base.score(data.X), None
    full = np.zeros(data.X.shape[1])
    full[base.items] = base.weights
    return base.score(data.X), full


@register("no_alignment", "No alignment (plain accuracy)", learns=False, headline=True)
def _no_alignment(data, train, val, seed, cfg, loss=None):
    return _scored(baselines.no_alignment(data.X.shape[1]), data)


@register("random", "Random weights", learns=False, headline=True)
def _random(data, train, val, seed, cfg, loss=None):
    return _scored(baselines.random_weights(data.X.shape[1], seed), data)


# Subset methods: which items to keep and their weights, chosen on the source models.
SUBSETS: dict[str, Callable] = {
    "best_single": lambda data, X, y, seed, cfg: baselines.best_single(X, y, data.item_benchmark),
    "metabench_like": lambda data, X, y, seed, cfg: baselines.metabench_like(X, cfg.subset_items, seed=seed),
    "tinybenchmarks_like": lambda data, X, y, seed, cfg: baselines.tinybenchmarks_like(X, cfg.subset_items,
                                                                                       seed=seed),
}


def _subset(name: str, data: ItemData, train, val, seed: int, cfg: Config) -> baselines.ItemWeighting:
    source = np.concatenate([train, val]).astype(int)
    return SUBSETS[name](data, data.X[source], data.target[source], seed, cfg)


def _subset_method(name: str) -> Callable:
    return lambda data, train, val, seed, cfg, loss=None: _scored(_subset(name, data, train, val, seed, cfg), data)


def _subset_plus_benchalign(name: str) -> Callable:
    """BenchAlign fitted on the items a subset method keeps, starting from its weights."""
    def fit(data, train, val, seed, cfg, loss=None):
        base = _subset(name, data, train, val, seed, cfg)
        f = _fit_rows(data, train, val, cfg, items=base.items, init=base.weights, loss=loss)
        full = np.zeros(data.X.shape[1])
        full[base.items] = f.weights
        return f.scores(data.X[:, base.items]), full
    return fit


register("best_single", "Best single benchmark", headline=True)(_subset_method("best_single"))
register("metabench_like", "MetaBench-like (IRT subset)", items=True)(_subset_method("metabench_like"))
register("tinybenchmarks_like", "TinyBenchmarks-like (anchors)", items=True)(_subset_method("tinybenchmarks_like"))


@register("benchalign", "BenchAlign", headline=True)
def _benchalign(data, train, val, seed, cfg, loss=None):
    f = _fit_rows(data, train, val, cfg, loss=loss)
    return f.scores(data.X), f.weights


for _name in SUBSETS:
    register(f"{_name}+benchalign", f"{METHODS[_name].label} + BenchAlign",
             items=METHODS[_name].items)(_subset_plus_benchalign(_name))


def run_method(method: str, data: ItemData, train, val, seed: int, cfg: Config,
               loss: str | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Scores of every model under ``method`` fitted on the source rows, and its item weights."""
    if method not in METHODS:
        raise ExperimentError(f"unknown method {method!r}; expected one of {list(METHODS)}")
    return METHODS[method].fit(data, train, val, seed, cfg, loss)


def best_single_choice(data: ItemData, split: Split) -> dict:
    """Which benchmark the ``best_single`` baseline picks on the source models, and every
    benchmark's Spearman rho with the target there."""
    if len(split.source) < 2:
        return {}
    base = baselines.best_single(data.X[split.source], data.target[split.source], data.item_benchmark)
    return {"benchmark": base.info["benchmark"],
            "source_rho": {b: _clean(r) for b, r in base.info["source_rho"].items()}}


def evaluate(scores: np.ndarray, y: np.ndarray, groups: dict[str, np.ndarray]) -> dict[str, dict]:
    return {g: {"spearman": rank.spearman(scores[idx], y[idx]),
                "pair_acc": rank.pair_accuracy(scores[idx], y[idx])} for g, idx in groups.items()}


@dataclass
class Comparison:
    rows: pd.DataFrame                       # method, seed, group, spearman, pair_acc
    preds: dict[str, np.ndarray]             # method -> seeds x models scores
    weights: dict[str, list[np.ndarray]]     # method -> per-seed item weights (weighted methods)
    split: Split


def compare(data: ItemData, split: Split, methods=tuple(METHODS), seeds: int = 5, cfg: Config | None = None,
            progress: bool = False) -> Comparison:
    """Fit and evaluate every method for seeds 0..seeds-1 (methods that learn from source models
    are skipped when there are fewer than 2)."""
    cfg = cfg or Config()
    if data.target is None:
        raise ExperimentError("the item data carries no target scores")
    rows, preds, weights = [], {}, {}
    it = [(m, s) for m in methods for s in range(seeds)]
    if progress:
        from tqdm import tqdm  # plain text bar: no widget dependency in notebooks
        it = tqdm(it, desc="methods x seeds", mininterval=5)
    for method, seed in it:
        if len(split.source) < 2 and METHODS[method].learns:
            continue                                   # nothing to fit on (the split's notes say so)
        train, val = train_val(split.source, cfg.val_fraction, seed)
        sc, w = run_method(method, data, train, val, seed, cfg)
        preds.setdefault(method, []).append(sc)
        if w is not None:
            weights.setdefault(method, []).append(w)
        for g, res in evaluate(sc, data.target, split.groups).items():
            rows.append({"method": method, "seed": seed, "group": g, **res})
    df = pd.DataFrame(rows, columns=["method", "seed", "group", "spearman", "pair_acc"])
    return Comparison(df, {m: np.array(v) for m, v in preds.items()}, weights, split)


# --------------------------------------------------------------------------- uncertainty
def _batched_spearman(S: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rho of each row of S (B x n) against the matching row of y (B x n)."""
    rs, ry = rankdata(S, axis=-1), rankdata(y, axis=-1)
    rs, ry = rs - rs.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
    den = np.sqrt((rs ** 2).sum(-1) * (ry ** 2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rs * ry).sum(-1) / den, np.nan)


def _batched_pair_acc(S: np.ndarray, y: np.ndarray) -> np.ndarray:
    P = y[:, :, None] > y[:, None, :]
    D = S[:, :, None] - S[:, None, :]
    n = P.sum(axis=(1, 2))
    hit = ((D > 0) & P).sum(axis=(1, 2)) + 0.5 * ((D == 0) & P).sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, hit / n, np.nan)


def bootstrap(preds: np.ndarray, y: np.ndarray, idx: np.ndarray, n_boot: int = 1000,
              seed: int = 0) -> dict[str, np.ndarray]:
    """Joint draws over seeds and test models: draw b resamples the test models with replacement
    and takes the predictions of seed ``b mod S``; returns the metric of each draw."""
    rng = np.random.default_rng(seed)
    preds = np.atleast_2d(preds)
    S = preds.shape[0]
    pick = rng.integers(0, len(idx), size=(n_boot, len(idx)))
    rows = idx[pick]                                           # n_boot x n
    Sb = preds[np.arange(n_boot) % S][np.arange(n_boot)[:, None], rows]
    yb = y[rows]
    return {"spearman": _batched_spearman(Sb, yb), "pair_acc": _batched_pair_acc(Sb, yb)}


def _clean(x) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 4)


def summarise(comp: Comparison, y: np.ndarray, n_boot: int = 1000, seed: int = 0) -> dict:
    """``{group: {method: {...}}}``: seed means (``spearman``, ``pair_acc``), ``*_std`` and ``*_ci``
    from :func:`bootstrap` draws (test models and seeds jointly), ``*_seed_std`` over seeds only."""
    out: dict[str, dict] = {}
    for g, idx in comp.split.groups.items():
        out[g] = {}
        for method, P in comp.preds.items():
            sub = comp.rows[(comp.rows.method == method) & (comp.rows.group == g)]
            boot = bootstrap(P, y, idx, n_boot, seed)
            rec = {"n_models": int(len(idx)), "n_seeds": int(len(sub))}
            for metric in ("spearman", "pair_acc"):
                draws = boot[metric][np.isfinite(boot[metric])]
                rec[metric] = _clean(sub[metric].mean())
                rec[f"{metric}_std"] = _clean(draws.std(ddof=1)) if len(draws) > 1 else None
                rec[f"{metric}_ci"] = ([_clean(v) for v in np.percentile(draws, [2.5, 97.5])]
                                       if len(draws) > 1 else None)
                rec[f"{metric}_seed_std"] = _clean(sub[metric].std(ddof=0)) if len(sub) else None
            out[g][method] = rec
    return out


def table(summary_main: dict, metric: str = "spearman") -> pd.DataFrame:
    """Method x group table of ``metric`` as 'mean ± std [ci]' strings (for display)."""
    cells = {}
    for g, methods in summary_main.items():
        for m, r in methods.items():
            if r.get(metric) is None:
                cells[(m, g)] = "n/a"
                continue
            ci = r.get(f"{metric}_ci")
            cells[(m, g)] = (f"{r[metric]:.2f} ± {r[f'{metric}_std'] or 0:.2f}"
                             + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""))
    s = pd.Series(cells)
    return s.unstack() if len(s) else pd.DataFrame()


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


# --------------------------------------------------------------------------- ablation, data needs
def ablation(data: ItemData, split: Split, losses=rank.LOSSES, seeds: int = 5,
             cfg: Config | None = None) -> pd.DataFrame:
    """BenchAlign with each ranking loss (same splits and settings); rows per loss, seed, group."""
    cfg = cfg or Config()
    rows = []
    for loss in losses:
        for seed in range(seeds):
            train, val = train_val(split.source, cfg.val_fraction, seed)
            f = _fit_rows(data, train, val, cfg, loss=loss)
            for g, res in evaluate(f.scores(data.X), data.target, split.groups).items():
                rows.append({"loss": loss, "seed": seed, "group": g, "best_step": f.best_step, **res})
    return pd.DataFrame(rows)


def spread_selection(y_source: np.ndarray, k: int) -> np.ndarray:
    """Positions of ``k`` source models spread evenly over the range of their target ranks."""
    order = np.argsort(y_source, kind="stable")
    pos = np.unique(np.round(np.linspace(0, len(order) - 1, min(k, len(order)))).astype(int))
    return np.sort(order[pos])


def data_needs(data: ItemData, split: Split, source_counts=(10, 20, 40, 80), item_counts=(50, 100, 200, 400),
               spread_models: int = 20, seeds: int = 5, cfg: Config | None = None,
               progress: bool = False) -> pd.DataFrame:
    """Test rho/pair accuracy against the number of source models (random subsets; a spread
    selection) and items (random subsets), each next to no alignment on the same items.

    Counts above what the data has are skipped. Rows: kind, n, seed, group, method, metrics.
    """
    cfg = cfg or Config()
    rows = []
    n_src, M = len(split.source), data.X.shape[1]
    jobs = [("source_random", n, s) for n in source_counts if 2 <= n <= n_src for s in range(seeds)]
    if 2 <= spread_models <= n_src:
        jobs += [("source_spread", spread_models, s) for s in range(seeds)]
    jobs += [("items", n, s) for n in item_counts if 1 <= n <= M for s in range(seeds)]
    if progress:
        from tqdm import tqdm
        jobs = tqdm(jobs, desc="data needs", mininterval=5)
    for kind, n, seed in jobs:
        rng = np.random.default_rng(10_000 + seed)
        items = None
        if kind == "source_random":
            pool = np.sort(rng.choice(split.source, size=n, replace=False))
        elif kind == "source_spread":
            pool = split.source[spread_selection(data.target[split.source], n)]
        else:
            pool = split.source
            items = np.sort(rng.choice(M, size=n, replace=False))
        train, val = train_val(pool, cfg.val_fraction, seed)
        f = _fit_rows(data, train, val, cfg, items=items)
        X = data.X if items is None else data.X[:, items]
        for method, sc in (("benchalign", f.scores(X)), ("no_alignment", X.mean(axis=1))):
            for g, res in evaluate(sc, data.target, split.groups).items():
                rows.append({"kind": kind, "n": n, "seed": seed, "group": g, "method": method, **res})
    return pd.DataFrame(rows, columns=["kind", "n", "seed", "group", "method", "spearman", "pair_acc"])


def config_dict(cfg: Config) -> dict:
    return asdict(cfg)


# --------------------------------------------------------------------------- across the two papers
CROSS_METHODS = tuple(m for m, spec in METHODS.items() if spec.headline)


def cross_paper(data: ItemData, source_max_b: float, test_min_b: float, seeds: int = 5,
                cfg: Config | None = None, n_boot: int = 1000) -> dict:
    """Can direct-evaluation scores predict the train-before-test ranking of larger models?

    ``data`` comes from :func:`lib.benchalign.data.load_cross_paper` (one feature per benchmark).
    Returns the split counts, the comparison of :data:`CROSS_METHODS` on the test models, the
    learned weight per benchmark (seed mean and std) and the rho of train-before-test with direct
    evaluation averaged over all benchmarks on the test models.
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
    out["best_single"] = best_single_choice(data, split)
    W = np.array(comp.weights["benchalign"])
    out["weights"] = {b: {"mean": round(float(W[:, j].mean()), 5), "std": round(float(W[:, j].std()), 5)}
                      for j, b in enumerate(data.item_benchmark)}
    out["source_models"] = [data.models[i] for i in split.source]
    out["test_models"] = [data.models[i] for i in split.groups[group]]
    return out


# --------------------------------------------------------------------------- summary pieces
def ablation_summary(df: pd.DataFrame) -> dict:
    """``{group: {loss: {spearman, spearman_std, pair_acc, pair_acc_std}}}`` (mean and std over seeds)."""
    out: dict = {}
    for (g, loss), sub in df.groupby(["group", "loss"], sort=False):
        out.setdefault(g, {})[loss] = {k: _clean(v) for k, v in {
            "spearman": sub.spearman.mean(), "spearman_std": sub.spearman.std(ddof=0),
            "pair_acc": sub.pair_acc.mean(), "pair_acc_std": sub.pair_acc.std(ddof=0)}.items()}
    return out


def needs_summary(df: pd.DataFrame) -> dict:
    """``{group: {kind: {n: {method: mean spearman}}}}`` of :func:`data_needs`."""
    out: dict = {}
    for (g, kind, n, method), sub in df.groupby(["group", "kind", "n", "method"]):
        out.setdefault(g, {}).setdefault(kind, {}).setdefault(str(int(n)), {})[method] = _clean(sub.spearman.mean())
    return out


def set_threads(n: int) -> None:
    """Torch threads for the fits (1 is fastest for these small problems on a busy machine)."""
    import torch

    if n > 0:
        torch.set_num_threads(n)


# --------------------------------------------------------------------------- notebook 07 in one call
def benchalign_report(items: ItemData, split: Split, cfg: Config, *, seeds: int = 5, n_boot: int = 1000,
                      losses=rank.LOSSES, source_counts=(), item_counts=(), spread_models: int = 20,
                      need_seeds: int = 3, cross_paper_store=None, cross_source_max_b: float = 3.5,
                      cross_test_min_b: float = 6.0, progress: bool = True) -> dict:
    """Everything notebook 07 shows: the method comparison on the test groups (``comparison``,
    ``main``), learned weights by benchmark (``by_bench``), the loss ablation (``ablation``), the
    data needs (``needs``), the cross-paper experiment (``cross``, on the published store when
    ``cross_paper_store`` is given), ``tables`` (name -> DataFrame to save), ``notes`` and
    ``summary`` (the plain numbers of summary.json)."""
    from .data import ItemDataError, load_cross_paper

    notes = list(split.notes)
    comp = compare(items, split, tuple(METHODS), seeds, cfg, progress=progress)
    main = summarise(comp, items.target, n_boot)
    by_bench = (weights_by_benchmark(items, comp.weights["benchalign"]) if "benchalign" in comp.weights
                else pd.DataFrame())
    fittable = bool(split.groups) and len(split.source) >= 2
    abl = ablation(items, split, losses, seeds, cfg) if fittable else pd.DataFrame()
    needs = (data_needs(items, split, source_counts, item_counts, spread_models, need_seeds, cfg, progress=progress)
             if fittable else pd.DataFrame())
    cross = {"skipped": "cross_paper is off in this profile"}
    if cross_paper_store is not None:
        try:
            cross = cross_paper(load_cross_paper(cross_paper_store), cross_source_max_b, cross_test_min_b,
                                seeds, cfg, n_boot)
        except (ItemDataError, ValueError, KeyError) as exc:   # e.g. a store without direct_eval results
            cross = {"skipped": f"{type(exc).__name__}: {exc}"}
    if not main:
        notes.append("no test group could be evaluated: too few models for a source/test split")
    tables = {f"comparison_{g.replace('+', 'plus')}": pd.DataFrame(main[g]).T for g in main}
    tables.update({name: df for name, df in (("ablation", abl), ("data_needs", needs),
                                             ("weights_by_benchmark", by_bench)) if len(df)})
    if "comparison" in cross:
        tables["cross_paper"] = pd.DataFrame(cross["comparison"]).T
    summary = {"data": {"models": len(items.models), "items": int(items.X.shape[1]), "features": items.benchmarks,
                        "target": items.info.get("target"), **split.counts(), "info": items.info},
               "main": main, "best_single": best_single_choice(items, split),
               "ablation": ablation_summary(abl) if len(abl) else {},
               "data_needs": needs_summary(needs) if len(needs) else {},
               "weights_by_benchmark": by_bench.round(5).to_dict(orient="index"),
               "cross_paper": cross, "config": config_dict(cfg), "notes": notes}
    return {"comparison": comp, "main": main, "by_bench": by_bench, "ablation": abl, "needs": needs,
            "cross": cross, "tables": tables, "notes": notes, "summary": summary}


def headline_numbers(main: dict) -> dict:
    """``{group_method_metric: value}`` of the headline methods, for numbers.tex."""
    return {f"{g}_{m}_{k}": v for g, ms in main.items() for m, r in ms.items()
            if m in METHODS and METHODS[m].headline
            for k, v in r.items() if k in ("spearman", "pair_acc") and v is not None}
