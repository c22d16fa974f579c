"""Rank agreement between benchmarks: Kendall tau of the model rankings they induce.

Pure functions on the tidy frame of :func:`lib.store.load` and on the model x benchmark matrices of
:func:`lib.store.matrix`. Every tau is tau-b (ties handled) on the models scored on *both* sides of
a pair (missing models are dropped pairwise, never imputed). Scores are first oriented so that
higher is better (lower-is-better metrics such as bits-per-byte are negated), so a positive tau
always means the two rankings agree.

:func:`agreement_report` gathers what notebook 04 shows: the point estimates, their bootstrap
intervals over models (:func:`bootstrap_agreement`, :mod:`lib.analysis.uncertainty`), the
measurement quality and noise ceiling of every benchmark (:mod:`lib.analysis.noise`), the tau gain
on subsets of models (:mod:`lib.analysis.robustness`) and agreement along the fine-tuning curves
(:mod:`lib.analysis.budget`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from .. import layout, metadata, store
from ..util import did_you_mean
from . import uncertainty

MIN_MODELS = 3   # below this a tau is reported as NaN


def tau_arrays(x, y, min_models: int = MIN_MODELS, variant: str = "b") -> tuple[float, int]:
    """Kendall tau of two aligned arrays on the positions where both are finite; returns (tau, n).

    ``variant``: ``"b"`` (the one used everywhere), ``"c"`` (Stuart's) or ``"a"`` (concordant minus
    discordant model pairs over all pairs: a tie counts as neither)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = int(keep.sum())
    if n < max(2, min_models) or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), n
    if variant == "a":
        i, j = np.triu_indices(n, 1)
        return float(np.mean(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]))), n
    return float(stats.kendalltau(x, y, variant=variant).statistic), n


def kendall_tau(a: pd.Series, b: pd.Series, min_models: int = MIN_MODELS) -> tuple[float, int]:
    """Kendall tau-b between two score series on their common non-missing index; returns (tau, n).

    NaN when fewer than ``min_models`` models are shared or when one side is constant.
    """
    common = a.index.intersection(b.index)
    return tau_arrays(a.loc[common].to_numpy(float), b.loc[common].to_numpy(float), min_models)


def split_benchmarks(names: Iterable[str], store_root=None) -> tuple[list[str], list[str]]:
    """(downstream benchmarks, perplexity corpora) among ``names``, by metadata category/metric."""
    names = list(names)
    ppl = set(metadata.perplexity_benchmarks(names, store_root))
    return [n for n in names if n not in ppl], [n for n in names if n in ppl]


def pair_table(matrix: pd.DataFrame, min_models: int = MIN_MODELS) -> pd.DataFrame:
    """Kendall tau of every unordered benchmark pair: columns a, b, tau, n_models (all pairs in one
    vectorised pass, :func:`lib.analysis.uncertainty.weighted_tau`; equal to :func:`tau_arrays`)."""
    cols = list(matrix.columns)
    idx = list(itertools.combinations(range(len(cols)), 2))
    x = matrix.to_numpy(float)
    taus = uncertainty.weighted_tau(x, idx, None, min_models)[0] if idx else np.array([])
    finite = np.isfinite(x)
    n = [int((finite[:, a] & finite[:, b]).sum()) for a, b in idx]
    return pd.DataFrame({"a": [cols[a] for a, _ in idx], "b": [cols[b] for _, b in idx], "tau": taus,
                         "n_models": n}, columns=["a", "b", "tau", "n_models"])


def tau_matrix(pairs: pd.DataFrame, order: list[str] | None = None) -> pd.DataFrame:
    """Square symmetric benchmark x benchmark tau matrix from :func:`pair_table` (diagonal 1)."""
    names = order or sorted(set(pairs["a"]) | set(pairs["b"]))
    pos = {n: k for k, n in enumerate(names)}
    mat = np.full((len(names), len(names)), np.nan)
    for a, b, tau in pairs[["a", "b", "tau"]].itertuples(index=False):
        if a in pos and b in pos:
            mat[pos[a], pos[b]] = mat[pos[b], pos[a]] = tau
    np.fill_diagonal(mat, 1.0)
    return pd.DataFrame(mat, index=names, columns=names)


def compare_protocols(df: pd.DataFrame, benchmarks: list[str], min_models: int = MIN_MODELS,
                      protocols: tuple[str, str] = store.PROTOCOLS) -> pd.DataFrame:
    """Per benchmark pair, tau under both protocols: a, b, tau_<p>, n_<p>, delta, improved."""
    dirs = store.directions(df)
    out = None
    for p in protocols:
        full = store.matrix(df, p)
        mat = store.orient(full.reindex(columns=benchmarks) if benchmarks else full, dirs)
        t = pair_table(mat, min_models).rename(columns={"tau": f"tau_{p}", "n_models": f"n_{p}"})
        out = t if out is None else out.merge(t, on=["a", "b"], how="outer")
    first, second = (f"tau_{p}" for p in protocols)
    out["delta"] = out[second] - out[first]
    out["improved"] = out["delta"] > 0
    return out


def mean_tau(pairs: pd.DataFrame, column: str = "tau") -> float:
    """Mean tau over the pairs where it is defined (NaN if none is)."""
    vals = pairs[column].dropna()
    return float(vals.mean()) if len(vals) else float("nan")


def per_benchmark_mean(pairs: pd.DataFrame, column: str = "tau") -> pd.Series:
    """Each benchmark's mean tau against all the others (sorted ascending: outliers first)."""
    long = pd.concat([pairs[["a", column]].rename(columns={"a": "benchmark"}),
                      pairs[["b", column]].rename(columns={"b": "benchmark"})])
    return long.groupby("benchmark")[column].mean().sort_values()


def category_matrix(pairs: pd.DataFrame, categories: Mapping[str, str], column: str = "tau",
                    order: list[str] | None = None) -> pd.DataFrame:
    """Category x category mean tau over benchmark pairs (a pair counts for both of its cells).

    A within-category cell averages the pairs inside that category; it is NaN for a category with
    a single benchmark (no pair).
    """
    cats = order or sorted(set(categories[b] for b in set(pairs["a"]) | set(pairs["b"])))
    sums, counts = _category_sums(pairs, categories, column, cats)
    with np.errstate(invalid="ignore"):
        return pd.DataFrame(np.where(counts > 0, sums / np.where(counts > 0, counts, 1), np.nan), index=cats,
                            columns=cats)


def category_counts(pairs: pd.DataFrame, categories: Mapping[str, str], column: str = "tau",
                    order: list[str] | None = None) -> pd.DataFrame:
    """The number of benchmark pairs behind each cell of :func:`category_matrix` (pairs whose tau is
    defined): n (n - 1) / 2 inside a category of n benchmarks, n_a n_b between two categories, so a
    category of two benchmarks has a single pair on the diagonal."""
    cats = order or sorted(set(categories[b] for b in set(pairs["a"]) | set(pairs["b"])))
    return pd.DataFrame(_category_sums(pairs, categories, column, cats)[1].astype(int), index=cats, columns=cats)


def _category_sums(pairs: pd.DataFrame, categories: Mapping[str, str], column: str,
                   cats: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(sum of tau, number of pairs) per category x category cell, symmetric."""
    pos = {c: k for k, c in enumerate(cats)}
    sums = np.zeros((len(cats), len(cats)))
    counts = np.zeros((len(cats), len(cats)))
    for a, b, tau in pairs[["a", "b", column]].itertuples(index=False):
        if pd.isna(tau):
            continue
        ca, cb = categories[a], categories[b]
        if ca not in pos or cb not in pos:
            continue
        sums[pos[ca], pos[cb]] += tau
        counts[pos[ca], pos[cb]] += 1
        if ca != cb:
            sums[pos[cb], pos[ca]] += tau
            counts[pos[cb], pos[ca]] += 1
    return sums, counts


def category_cells(mats: Mapping[str, pd.DataFrame], counts: pd.DataFrame) -> dict:
    """The upper triangle of the category matrices, diagonal first, as plain values: ``{"cells": [[a, b],
    ...], "n_pairs": [...], "tau": {protocol: [...]}}`` (a summary's form of :func:`category_matrix`)."""
    cats = list(counts.index)
    cells = [(a, a) for a in cats] + [(a, b) for i, a in enumerate(cats) for b in cats[i + 1:]]
    return {"cells": [list(c) for c in cells], "n_pairs": [int(counts.loc[a, b]) for a, b in cells],
            "tau": {p: [float(m.loc[a, b]) for a, b in cells] for p, m in mats.items()}}


WITHIN_MIN_BENCHMARKS = 3    # a category needs this many benchmarks for :func:`within_checks` (one left out: a pair)


def within_checks(matrices: Mapping[str, pd.DataFrame], categories: Mapping[str, str],
                  subsets: Mapping[str, list[str]] | None = None, min_models: int = MIN_MODELS,
                  protocols: tuple[str, str] = store.PROTOCOLS) -> dict:
    """The within-category mean tau of each category of at least :data:`WITHIN_MIN_BENCHMARKS`
    benchmarks computed other ways, to see which choice a published value could rest on:
    ``{category: [{"check", <protocol>: value, ...}]}``, rows: the tables' definition (tau-b, mean over
    the category's pairs), tau-c, tau-a, the median over the pairs, the benchmark whose omission gives
    the lowest and the highest value under the first protocol, and likewise the subset of models
    (``subsets``: {label: models}, e.g. :func:`lib.analysis.robustness.model_subsets`' families left out).
    ``matrices``: {protocol: oriented model x benchmark matrix}."""
    first = protocols[0]
    cols = list(matrices[first].columns)
    out: dict[str, list[dict]] = {}

    def mean_tau_of(names: list[str], models=None, variant: str = "b", agg=np.nanmean) -> dict:
        vals = {}
        for p in protocols:
            mat = matrices[p].reindex(columns=names)
            mat = mat if models is None else mat.reindex(models)
            taus = [tau_arrays(mat[a], mat[b], min_models, variant)[0] for a, b in itertools.combinations(names, 2)]
            vals[p] = float(agg(taus)) if np.isfinite(taus).any() else float("nan")
        return vals

    def extremes(label: str, options: dict[str, dict]) -> list[dict]:
        ranked = sorted(options.items(), key=lambda kv: kv[1][first])
        return [{"check": f"{label(ranked[0][0])} (lowest)", **ranked[0][1]},
                {"check": f"{label(ranked[-1][0])} (highest)", **ranked[-1][1]}] if ranked else []

    for cat in dict.fromkeys(categories[b] for b in cols):
        names = [b for b in cols if categories[b] == cat]
        if len(names) < WITHIN_MIN_BENCHMARKS:
            continue
        rows = [{"check": "tau-b, mean over its pairs (the tables')", **mean_tau_of(names)},
                {"check": "tau-c", **mean_tau_of(names, variant="c")},
                {"check": "tau-a", **mean_tau_of(names, variant="a")},
                {"check": "median over its pairs", **mean_tau_of(names, agg=np.nanmedian)}]
        rows += extremes(lambda b: f"without {b}", {b: mean_tau_of([n for n in names if n != b]) for b in names})
        subs = {f"{k} ({len(v)} models)": v for k, v in (subsets or {}).items() if len(v) >= min_models}
        rows += extremes(str, {k: mean_tau_of(names, v) for k, v in subs.items()})
        out[cat] = rows
    return out


def ranks(scores: pd.Series) -> pd.Series:
    """1 = best (higher score); ties share the mean rank."""
    return scores.rank(ascending=False, method="average")


MEAN_RANK_COLUMNS = ["model", "protocol", "mean_rank", "mean_rank_lo", "mean_rank_hi", "n_benchmarks", "of",
                     "rank_shift", "rank_shift_lo", "rank_shift_hi"]


def mean_ranks(oriented: Mapping[str, pd.DataFrame], n_boot: int = uncertainty.N_BOOT, seed: int = 0,
               level: float = uncertainty.LEVEL, baseline: str = store.DIRECT) -> pd.DataFrame:
    """Each model's mean rank over benchmarks under each protocol, with a bootstrap interval over
    benchmarks, and its shift from the ``baseline`` protocol: one row per (model, protocol), the
    columns of :data:`MEAN_RANK_COLUMNS`.

    ``oriented``: {protocol: oriented model x benchmark matrix}. On each benchmark a model is ranked
    among the models scored there (:func:`ranks`: 1 = best, ties share); ``mean_rank`` averages the
    ``n_benchmarks`` it is scored on, among ``of`` models. Its interval (``level``, ``n_boot`` draws
    of those benchmarks with replacement, :func:`lib.analysis.uncertainty.mean_draws`, as notebook 08
    draws them for a placed model) says how much the mean rank owes to which benchmarks are in the
    set. ``rank_shift`` = mean rank under the protocol - under ``baseline`` (negative: the model moves
    up), its interval paired: the same draws of the benchmarks both protocols ranked it on (NaN on
    the baseline's own rows).
    """
    ranked = {p: m.apply(ranks) for p, m in oriented.items()}
    base = ranked.get(baseline)
    rows = []
    for protocol, table in ranked.items():
        for model in table.index:
            own = table.loc[model].dropna()
            if own.empty:
                continue
            lo, hi = uncertainty.interval(uncertainty.mean_draws(own.to_numpy(float), n_boot, seed), level)
            row = {"model": model, "protocol": protocol, "mean_rank": float(own.mean()), "mean_rank_lo": lo,
                   "mean_rank_hi": hi, "n_benchmarks": len(own), "of": len(table),
                   "rank_shift": np.nan, "rank_shift_lo": np.nan, "rank_shift_hi": np.nan}
            theirs = base.loc[model].dropna() if protocol != baseline and base is not None and model in base.index \
                else pd.Series(dtype=float)
            common = [b for b in own.index if b in theirs.index]
            if common:
                shift = (uncertainty.mean_draws(own[common].to_numpy(float), n_boot, seed)
                         - uncertainty.mean_draws(theirs[common].to_numpy(float), n_boot, seed))
                row["rank_shift"] = row["mean_rank"] - float(theirs.mean())
                row["rank_shift_lo"], row["rank_shift_hi"] = uncertainty.interval(shift, level)
            rows.append(row)
    return pd.DataFrame(rows, columns=MEAN_RANK_COLUMNS)


def rank_plot_data(matrix: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Models scored on both ``a`` and ``b`` with their rank (1 = best) on each: model, rank_a, rank_b."""
    both = matrix[[a, b]].dropna()
    return pd.DataFrame({"model": both.index, "rank_a": ranks(both[a]).to_numpy(),
                         "rank_b": ranks(both[b]).to_numpy()}).sort_values("rank_a", ignore_index=True)


PAPER_RANK_PAIR = ("nq_open", "arc_challenge")    # the paper's Figure 1: NQ-Open against ARC-Challenge ...
PAPER_HIGHLIGHT = ("google/gemma-2-9b",)            # ... with Gemma-2-9B marked
MOST_IMPROVED = "most_improved"


def choose_rank_pair(asked: list[str] | tuple[str, ...], pairs: pd.DataFrame, benchmarks: list[str],
                     highlight: list[str] | tuple[str, ...] = (), models: Iterable[str] = ()
                     ) -> tuple[tuple[str, str] | None, list[str]]:
    """(the rank plot's two benchmarks, the models it marks). ``asked``: two benchmarks, or
    ``[MOST_IMPROVED]`` (the pair whose tau improves most, :func:`most_improved_pair`); empty: the
    paper's Figure 1 pair (:data:`PAPER_RANK_PAIR`) where both are benchmarks here, else the most
    improved pair. ``highlight``: models to mark; empty: the paper's (:data:`PAPER_HIGHLIGHT`) that are
    among ``models`` when the pair is the paper's. An unknown benchmark or model is a ValueError."""
    asked = list(asked)
    if asked == [MOST_IMPROVED]:
        pair = most_improved_pair(pairs)
    elif asked:
        if len(asked) != 2 or asked[0] == asked[1]:
            raise ValueError(f"rank_plot_pair must name two benchmarks or be [{MOST_IMPROVED!r}], got {asked}")
        unknown = [b for b in asked if b not in benchmarks]
        if unknown:
            raise ValueError(f"rank_plot_pair: {unknown[0]!r} is not a downstream benchmark here"
                             f"{did_you_mean(unknown[0], benchmarks)}")
        pair = (asked[0], asked[1])
    else:
        pair = PAPER_RANK_PAIR if set(PAPER_RANK_PAIR) <= set(benchmarks) else most_improved_pair(pairs)
    models = set(models)
    unknown = [m for m in highlight if m not in models]
    if unknown:
        raise ValueError(f"rank_plot_highlight: {unknown[0]!r} is not a model here{did_you_mean(unknown[0], models)}")
    marked = list(highlight) or ([m for m in PAPER_HIGHLIGHT if m in models] if pair == PAPER_RANK_PAIR else [])
    return pair, marked


def most_improved_pair(pairs: pd.DataFrame, column: str = "delta") -> tuple[str, str] | None:
    """The benchmark pair whose tau improves most (the paper-style opening figure), or None."""
    valid = pairs.dropna(subset=[column])
    if valid.empty:
        return None
    row = valid.loc[valid[column].idxmax()]
    return str(row["a"]), str(row["b"])


def bootstrap_agreement(matrices: Mapping[str, pd.DataFrame], benchmarks: list[str], categories: Mapping[str, str],
                        n_boot: int = uncertainty.N_BOOT, seed: int = 0, level: float = uncertainty.LEVEL,
                        min_models: int = MIN_MODELS, protocols: tuple[str, str] = store.PROTOCOLS,
                        rank_pair: tuple[str, str] | None = None, cells: list | None = None) -> dict:
    """Bootstrap over models (the same draws for both protocols) of the numbers of
    :func:`agreement_report`'s summary; returns their intervals under the summary's names + ``_ci``
    (``category_cells_ci``: per cell of ``cells``; ``rank_plot_tau_ci``: of ``rank_pair``) and
    ``defined`` (share of draws in which each mean tau is defined).

    ``matrices``: {protocol: oriented model x benchmark matrix}. Models are the union over protocols.
    """
    models = sorted(set().union(*(matrices[p].index for p in protocols)))
    k = len(benchmarks)
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    m = len(pairs)
    x = np.hstack([matrices[p].reindex(index=models, columns=benchmarks).to_numpy(float) for p in protocols])
    w = uncertainty.draws(len(models), n_boot, seed)
    taus = uncertainty.weighted_tau(x, pairs + [(a + k, b + k) for a, b in pairs], w, min_models)
    per = {p: taus[:, i * m:(i + 1) * m] for i, p in enumerate(protocols)}
    member = np.zeros((m, k))
    for row, (a, b) in enumerate(pairs):
        member[row, a] = member[row, b] = 1
    cats = sorted(set(categories[b] for b in benchmarks))
    within = np.zeros((m, len(cats)))
    for row, (a, b) in enumerate(pairs):
        if categories[benchmarks[a]] == categories[benchmarks[b]]:
            within[row, cats.index(categories[benchmarks[a]])] = 1

    def group_mean(t: np.ndarray, groups: np.ndarray) -> np.ndarray:
        ok = np.isfinite(t)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (np.where(ok, t, 0.0) @ groups) / (ok @ groups)

    means = {p: group_mean(per[p], np.ones((m, 1)))[:, 0] for p in protocols}
    first, second = protocols
    both = np.isfinite(per[first]) & np.isfinite(per[second])
    improved = (both & (per[second] > per[first])).sum(axis=1).astype(float)
    improved[~both.any(axis=1)] = np.nan
    ci = lambda v: uncertainty.interval(v, level)
    out = {"mean_tau_ci": {p: ci(means[p]) for p in protocols},
           "mean_tau_gain_ci": ci(means[second] - means[first]),
           "pairs_improved_ci": ci(improved),
           "defined": {p: float(np.isfinite(means[p]).mean()) for p in protocols}}
    bench = {p: group_mean(per[p], member) for p in protocols}
    out["benchmark_mean_tau_ci"] = {b: {p: ci(bench[p][:, j]) for p in protocols} for j, b in enumerate(benchmarks)}
    cat = {p: uncertainty.nanmean_rows(group_mean(per[p], within)) if cats else np.full(n_boot, np.nan)
           for p in protocols}
    out["category_within_mean_tau_ci"] = {p: ci(cat[p]) for p in protocols}
    if cells:
        index = {tuple(c): k for k, c in enumerate(cells)}
        in_cell = np.zeros((m, len(cells)))
        for row, (a, b) in enumerate(pairs):
            ca, cb = categories[benchmarks[a]], categories[benchmarks[b]]
            in_cell[row, index.get((ca, cb), index.get((cb, ca)))] = 1
        out["category_cells_ci"] = {p: [ci(v) for v in group_mean(per[p], in_cell).T] for p in protocols}
    if rank_pair is not None:
        a, b = rank_pair
        out["rank_plot_tau_ci"] = {}
        for p in protocols:
            cols = matrices[p].reindex(index=models, columns=[a, b]).to_numpy(float)
            out["rank_plot_tau_ci"][p] = ci(uncertainty.weighted_tau(cols, [(0, 1)], w, min_models)[:, 0])
    return out


@uncertainty.one_blas_thread
def agreement_report(df: pd.DataFrame, store_root=None, min_models: int = MIN_MODELS,
                     rank_plot_pair: list[str] | tuple[str, str] = (), rank_plot_highlight: list[str] | tuple = (),
                     protocols: tuple[str, str] = store.PROTOCOLS, n_boot: int = uncertainty.N_BOOT,
                     seed: int = 0, level: float = uncertainty.LEVEL, work=None, halvings: int | None = None) -> dict:
    """Everything notebook 04 shows, from a tidy store frame (downstream benchmarks only): the tables
    and figure data under the keys of the returned dict (each built by the function its section
    names), ``summary`` (plain numbers; every interval under its number's name + ``_ci``) and
    ``notes`` (why some numbers are NaN). ``rank_plot`` is the two-ranking figure of the pair and
    models :func:`choose_rank_pair` makes of ``rank_plot_pair`` and ``rank_plot_highlight``, by default
    the paper's Figure 1; ``budget`` is None without validation curves under ``work``.

    ``n_boot`` draws of models with ``seed`` give the ``level`` percentile intervals; ``work`` (the
    profile's work folder) holds per-item results (the noise estimates use them when present,
    else the store's standard errors) and validation curves; ``halvings`` random half-splits per
    benchmark estimate its reliability.
    """
    from . import noise

    halvings = noise.HALVINGS if halvings is None else halvings
    boot_cfg = _Boot(n_boot, seed, level, min_models, protocols)
    benchmarks = _downstream(df, store_root, protocols)
    notes: list[str] = []

    # point estimates: every benchmark pair under both protocols, per benchmark, per category
    points = _point_estimates(df, benchmarks, store_root, min_models, protocols, notes)
    summary = points["summary"]

    # intervals: one bootstrap over models, the same draws for both protocols
    dirs = store.directions(df)
    oriented = {p: store.orient(store.matrix(df, p), dirs) for p in protocols}
    down = {p: oriented[p][benchmarks] for p in protocols}
    models = sorted(set().union(*(oriented[p].index for p in protocols)))
    pair, marked = choose_rank_pair(rank_plot_pair, points["pairs"], benchmarks, rank_plot_highlight, models)
    boot = bootstrap_agreement(down, benchmarks, points["categories"], n_boot, seed, level, min_models, protocols,
                               rank_pair=pair, cells=summary["category_cells"]["cells"])
    _add_intervals(summary, boot, len(models), boot_cfg, notes)
    plot = _rank_plot(oriented, pair, marked, boot, min_models, summary)
    # each model's mean rank over the benchmarks (the leaderboard's), intervals over benchmarks
    ranks_table = mean_ranks(down, n_boot, seed, level, protocols[0])
    summary["mean_ranks"] = {"unit": "benchmarks", "n_boot": n_boot, "seed": seed, "level": level,
                             "baseline": protocols[0], "n_benchmarks": len(benchmarks)}
    per_benchmark_ci = {p: pd.DataFrame({b: boot["benchmark_mean_tau_ci"][b][p] for b in benchmarks},
                                        index=["lo", "hi"]).T.reindex(points["per_benchmark"].index)
                        for p in protocols}

    # measurement quality and noise ceiling (one estimator: split-half reliability)
    quality, ceiling = _noise_section(df, benchmarks, models, points, work, halvings, boot_cfg, summary, notes)

    # robustness: the gain on subsets of models, and the within-category tau computed other ways
    robust, subsets = _robustness_section(df, down, models, store_root, boot_cfg, summary, notes)
    summary["within_checks"] = within_checks(down, points["categories"], subsets, min_models, protocols)

    # fine-tuning budget: agreement along the validation curves
    budget_tab = _budget_section(work, models, benchmarks, boot_cfg, summary, notes)

    summary["notes"] = notes
    return {"benchmarks": points["bench_order"], "pairs": points["pairs"], "per_benchmark": points["per_benchmark"],
            "per_benchmark_ci": per_benchmark_ci, "tau": points["tau"], "categories": points["categories"],
            "category": points["category"], "category_counts": points["counts"], "rank_plot": plot,
            "quality": quality, "ceiling": ceiling, "robustness": robust, "budget": budget_tab,
            "mean_ranks": ranks_table, "summary": summary, "notes": notes}


@dataclass(frozen=True)
class _Boot:
    """The bootstrap settings every section of :func:`agreement_report` shares."""
    n_boot: int
    seed: int
    level: float
    min_models: int
    protocols: tuple[str, str]


def _downstream(df: pd.DataFrame, store_root, protocols: tuple[str, str]) -> list[str]:
    """The downstream benchmarks of the store (perplexity corpora left out); both protocols and at
    least two benchmarks are needed."""
    present = [p for p in protocols if p in set(df["protocol"])]
    if len(present) < 2:
        raise store.StoreError(f"rank agreement needs results of both protocols {list(protocols)}; "
                               f"the store has {sorted(set(df['protocol']))}")
    benchmarks, _ = split_benchmarks(sorted(df["benchmark"].unique()), store_root)
    if len(benchmarks) < 2:
        raise store.StoreError(f"rank agreement needs at least two downstream benchmarks, found {benchmarks}")
    return benchmarks


def _point_estimates(df: pd.DataFrame, benchmarks: list[str], store_root, min_models: int,
                     protocols: tuple[str, str], notes: list[str]) -> dict:
    """Pairs, per-benchmark and per-category mean tau, the tau matrices in category order, and the
    summary's point estimates."""
    bench_meta = metadata.benchmarks_frame(benchmarks, store_root)
    categories = bench_meta["category"].to_dict()
    pairs = compare_protocols(df, benchmarks, min_models, protocols)
    per_benchmark = pd.DataFrame({p: per_benchmark_mean(pairs, f"tau_{p}") for p in protocols})
    per_benchmark = per_benchmark.reindex(benchmarks).sort_values(protocols[0])
    order = [c for c in metadata.CATEGORIES if c in set(categories.values())]
    order += sorted(set(categories.values()) - set(order))
    bench_order = sorted(benchmarks, key=lambda b: (order.index(categories[b]), b))
    tau = {p: tau_matrix(pairs.rename(columns={f"tau_{p}": "tau"}), bench_order) for p in protocols}
    category = {p: category_matrix(pairs, categories, f"tau_{p}", order) for p in protocols}
    counts = category_counts(pairs.dropna(subset=[f"tau_{p}" for p in protocols]), categories,
                             f"tau_{protocols[0]}", order)
    cells = category_cells(category, counts)
    single = [c for c in order if sum(v == c for v in categories.values()) < 2]
    if single:
        notes.append(f"categories with one benchmark have no within-category pair (NaN): {single}")
    undefined = pairs[pairs[[f"tau_{p}" for p in protocols]].isna().any(axis=1)]
    if len(undefined):
        notes.append(f"{len(undefined)} pair(s) have fewer than {min_models} common models or a constant "
                     "score: tau NaN, left out of the means")
    compared = pairs.dropna(subset=[f"tau_{p}" for p in protocols])
    first, second = protocols
    diag = {p: np.diag(category[p].to_numpy()) for p in protocols}
    summary = {
        "n_benchmarks": len(benchmarks),
        "n_models": {p: int(store.matrix(df, p)[benchmarks].notna().any(axis=1).sum()) for p in protocols},
        "n_pairs": int(len(pairs)),
        "n_pairs_compared": int(len(compared)),
        "pairs_improved": int(compared["improved"].sum()),
        "mean_tau": {p: mean_tau(pairs, f"tau_{p}") for p in protocols},
        "median_tau": {p: float(pairs[f"tau_{p}"].median()) for p in protocols},
        "benchmark_mean_tau": {b: {p: float(per_benchmark.loc[b, p]) for p in protocols} for b in benchmarks},
        "lowest_benchmark": {p: (str(per_benchmark[p].idxmin()) if per_benchmark[p].notna().any() else None)
                             for p in protocols},
        "category_within_mean_tau": {p: float(np.nanmean(diag[p])) if np.isfinite(diag[p]).any() else float("nan")
                                     for p in protocols},
        "category_cells": cells,
        "min_models": min_models,
    }
    summary["mean_tau_gain"] = summary["mean_tau"][second] - summary["mean_tau"][first]
    return {"bench_meta": bench_meta, "categories": categories, "pairs": pairs, "per_benchmark": per_benchmark,
            "bench_order": bench_order, "tau": tau, "category": category, "counts": counts, "summary": summary}


def _add_intervals(summary: dict, boot: dict, n_models: int, cfg: _Boot, notes: list[str]) -> None:
    """The bootstrap's intervals into the summary (under each number's name + ``_ci``), whether the
    gain's interval excludes zero, and the bootstrap's settings."""
    summary.update({k: v for k, v in boot.items() if k not in ("defined", "rank_plot_tau_ci", "category_cells_ci")})
    summary["category_cells"]["tau_ci"] = boot.get("category_cells_ci", {})
    lo, hi = summary["mean_tau_gain_ci"]
    summary["mean_tau_gain_excludes_zero"] = bool(np.isfinite(lo) and (lo > 0 or hi < 0))
    low_n, high_n = summary["pairs_improved_ci"]
    if np.isfinite(low_n) and not low_n <= summary["pairs_improved"] <= high_n:
        notes.append(f"pairs_improved ({summary['pairs_improved']}) lies outside its percentile interval "
                     f"[{low_n:.0f}, {high_n:.0f}]: a count at the edge of its range, where resampled models (about "
                     "63 % distinct per draw) make more pairs noisy; read the interval's low end as a one-sided bound")
    summary["bootstrap"] = {"unit": "models", "n_models": n_models, "n_boot": cfg.n_boot, "seed": cfg.seed,
                            "level": cfg.level, "defined": boot["defined"]}
    thin = [p for p, share in boot["defined"].items() if share < 0.9]
    if thin:
        notes.append(f"mean tau is undefined in more than 10 % of the bootstrap draws for {thin} (too few "
                     "distinct models): intervals cover only the draws where it is defined")


def _rank_plot(oriented: dict[str, pd.DataFrame], pair: tuple[str, str] | None, marked: list[str], boot: dict,
               min_models: int, summary: dict) -> dict | None:
    """The two rankings of ``pair`` under each protocol, with their tau and its interval, and the
    models to mark."""
    if pair is None:
        return None
    a, b = pair
    plot = {"a": a, "b": b, "data": {p: rank_plot_data(m, a, b) for p, m in oriented.items()},
            "tau": {p: kendall_tau(m[a], m[b], min_models)[0] for p, m in oriented.items()},
            "ci": boot["rank_plot_tau_ci"], "highlight": list(marked)}
    summary["rank_plot"] = {"a": a, "b": b, "tau": plot["tau"], "tau_ci": plot["ci"], "highlight": list(marked)}
    return plot


def _noise_section(df: pd.DataFrame, benchmarks: list[str], models: list[str], points: dict, work,
                   halvings: int, cfg: _Boot, summary: dict, notes: list[str]) -> tuple[pd.DataFrame, dict]:
    """Measurement quality of every benchmark and the noise ceiling of every pair
    (:mod:`lib.analysis.noise`), into the summary."""
    from . import noise

    protocols, seed, min_models = cfg.protocols, cfg.seed, cfg.min_models
    meas = {p: noise.load_measurements(df, p, benchmarks, work, models) for p in protocols}
    rel = {p: noise.reliabilities(meas[p], halvings, seed, min_models) for p in protocols}
    chance = points["bench_meta"]["chance"]
    quality = noise.quality_table(meas, chance.where(chance.notna(), None).to_dict(), rel)
    ceiling_pairs = noise.ceiling_pairs(points["pairs"], {p: rel[p]["reliability"] for p in protocols}, protocols)
    missing = noise.missing_line(meas)
    if missing:
        notes.append(missing)
    tied = {p: [b for b in benchmarks
                if meas[p].source[b] != noise.MISSING and not np.isfinite(rel[p].loc[b, "reliability"])]
            for p in protocols}
    if any(tied.values()):
        notes.append("reliability undefined (scores too tied to split into halves), so no noise ceiling for "
                     + "; ".join(f"{p}: {', '.join(bs)}" for p, bs in tied.items() if bs))
    ceiling = {"pairs": ceiling_pairs, "per_benchmark": noise.ceiling_per_benchmark(ceiling_pairs, protocols),
               "summary": noise.ceiling_summary(ceiling_pairs, protocols), "reliability": rel, "missing": missing}
    per_b = ceiling["per_benchmark"].to_dict("index")
    rel_b = {p: rel[p]["reliability"].to_dict() for p in protocols}
    summary["noise_ceiling"] = {**ceiling["summary"], "halvings": halvings,
                                "source": {p: meas[p].source for p in protocols},
                                "benchmark": {b: {p: {"mean_tau": per_b[b][f"tau_{p}"],
                                                      "mean_ceiling": per_b[b][f"ceiling_{p}"],
                                                      "reliability": rel_b[p][b]} for p in protocols}
                                              for b in per_b}}
    summary["measurement_quality"] = {
        p: {r["benchmark"]: {k: r[k] for k in ("mean", "chance", "position", "typical_se", "spread", "se_to_gap",
                                               "reliability", "cannot_rank", "reasons")}
            for r in g.to_dict("records")} for p, g in quality.groupby("protocol", sort=False)}
    summary["cannot_rank"] = {p: sorted(g.loc[g["cannot_rank"], "benchmark"]) for p, g in
                              quality.groupby("protocol", sort=False)}
    return quality, ceiling


def _robustness_section(df: pd.DataFrame, down: dict[str, pd.DataFrame], models: list[str], store_root,
                        cfg: _Boot, summary: dict, notes: list[str]) -> tuple[pd.DataFrame, dict]:
    """The gain in mean tau on subsets of models (:mod:`lib.analysis.robustness`) and the subsets;
    the table's first row is the full sample, whose interval is the main bootstrap's."""
    from . import robustness

    protocols = cfg.protocols
    models_meta = metadata.models_frame(models, store_root)
    subsets, sub_notes = robustness.model_subsets(models_meta, robustness.complete_models(df, protocols),
                                                  cfg.min_models)
    notes += sub_notes
    subsets.pop(robustness.ALL, None)             # the full sample's row is the bootstrap above
    robust = robustness.gain(down, subsets, "tau", cfg.n_boot, cfg.seed, cfg.level, cfg.min_models, protocols)
    lo, hi = summary["mean_tau_gain_ci"]
    full = {"subset": robustness.ALL, "n_models": len(models), **summary["mean_tau"],
            "gain": summary["mean_tau_gain"], "gain_lo": lo, "gain_hi": hi}
    robust = pd.concat([pd.DataFrame([full]), robust], ignore_index=True)
    summary["robustness"] = robustness.summary(robust)
    return robust, subsets


def _budget_section(work, models: list[str], benchmarks: list[str], cfg: _Boot, summary: dict,
                    notes: list[str]) -> pd.DataFrame | None:
    """Agreement along the validation curves of stage 02 (:mod:`lib.analysis.budget`); None without
    curves (published results carry final scores only)."""
    from . import budget

    budget_tab = None
    if work is not None:
        curves = layout.curves_frame(work, models, benchmarks)
        if len(curves):
            budget_tab = budget.budget_table(curves, benchmarks, cfg.n_boot, cfg.seed, cfg.level, cfg.min_models)
    if budget_tab is None:
        notes.append("no validation curves in this profile's work folder (published results carry final "
                     "scores only): the fine-tuning budget section is skipped")
        summary["budget"] = None
    else:
        summary["budget"] = budget.summary(budget_tab)
    return budget_tab


def headline_table(summary: dict, protocols: tuple[str, str] = store.PROTOCOLS) -> pd.DataFrame:
    """The headline numbers of a 04 summary with their intervals: rows (number, protocol), columns
    estimate, lo, hi."""
    rows = []
    for p in protocols:
        for key in ("mean_tau", "category_within_mean_tau"):
            rows.append((key, p, summary[key][p], *summary[f"{key}_ci"][p]))
    rows.append(("mean_tau_gain", f"{protocols[1]} - {protocols[0]}", summary["mean_tau_gain"],
                 *summary["mean_tau_gain_ci"]))
    rows.append(("pairs_improved", f"of {summary['n_pairs_compared']}", summary["pairs_improved"],
                 *summary["pairs_improved_ci"]))
    for p in protocols:
        low = summary["lowest_benchmark"][protocols[0]]
        if low is not None:
            rows.append((f"benchmark_mean_tau[{low}]", p, summary["benchmark_mean_tau"][low][p],
                         *summary["benchmark_mean_tau_ci"][low][p]))
    return pd.DataFrame(rows, columns=["number", "protocol", "estimate", "lo", "hi"]).set_index(["number", "protocol"])


def gain_statement(summary: dict) -> str:
    """One sentence: does the paired interval of the mean-tau gain exclude zero?"""
    lo, hi = summary["mean_tau_gain_ci"]
    b = summary["bootstrap"]
    head = (f"mean tau gain {summary['mean_tau_gain']:+.3f}, {b['level']:.0%} paired bootstrap interval over "
            f"{b['n_models']} models ({b['n_boot']} draws): [{lo:+.3f}, {hi:+.3f}]")
    if not np.isfinite(lo):
        return head + ": undefined (too few models)"
    if summary["mean_tau_gain_excludes_zero"]:
        return head + f": it excludes 0, the gain is {'positive' if lo > 0 else 'negative'} beyond resampling of models"
    return head + ": it does NOT exclude 0, the data cannot tell the gain from no change"


def tex_numbers(summary: dict, protocols: tuple[str, str] = store.PROTOCOLS) -> dict:
    """The numbers of a 04 summary for ``numbers.tex`` (every interval as ``..._lo`` / ``..._hi``)."""
    out = {"pairs": summary["n_pairs"], "pairs_improved": summary["pairs_improved"]}
    out["pairs_improved_lo"], out["pairs_improved_hi"] = (int(round(v)) if np.isfinite(v) else v
                                                          for v in summary["pairs_improved_ci"])
    for p in protocols:
        out[f"tau_mean_{p}"] = summary["mean_tau"][p]
        out[f"tau_mean_{p}_lo"], out[f"tau_mean_{p}_hi"] = summary["mean_tau_ci"][p]
        out[f"tau_within_{p}"] = summary["category_within_mean_tau"][p]
        out[f"tau_within_{p}_lo"], out[f"tau_within_{p}_hi"] = summary["category_within_mean_tau_ci"][p]
        ceiling = summary["noise_ceiling"][p]
        out[f"ceiling_mean_{p}"], out[f"ceiling_ratio_{p}"] = ceiling["mean_ceiling"], ceiling["ratio"]
    out["tau_gain"] = summary["mean_tau_gain"]
    out["tau_gain_lo"], out["tau_gain_hi"] = summary["mean_tau_gain_ci"]
    return out
