"""Rank agreement between benchmarks: Kendall tau of the model rankings they induce.

Pure functions on the tidy frame of :func:`lib.store.load` and on the model x benchmark matrices of
:func:`lib.store.matrix`. Every tau is tau-b (ties handled) on the models scored on *both* sides of
a pair (missing models are dropped pairwise, never imputed). Scores are first oriented so that
higher is better (lower-is-better metrics such as bits-per-byte are negated), so a positive tau
always means the two rankings agree.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd
from scipy import stats

from .. import metadata, store

MIN_MODELS = 3   # below this a tau is reported as NaN


def tau_arrays(x, y, min_models: int = MIN_MODELS) -> tuple[float, int]:
    """Kendall tau-b of two aligned arrays on the positions where both are finite; returns (tau, n)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = int(keep.sum())
    if n < max(2, min_models) or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), n
    return float(stats.kendalltau(x, y, variant="b").statistic), n


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
    """Kendall tau of every unordered benchmark pair: columns a, b, tau, n_models."""
    rows = []
    values = {c: matrix[c].to_numpy(float) for c in matrix.columns}
    for a, b in itertools.combinations(list(matrix.columns), 2):
        tau, n = tau_arrays(values[a], values[b], min_models)
        rows.append({"a": a, "b": b, "tau": tau, "n_models": n})
    return pd.DataFrame(rows, columns=["a", "b", "tau", "n_models"])


def tau_matrix(pairs: pd.DataFrame, order: list[str] | None = None) -> pd.DataFrame:
    """Square symmetric benchmark x benchmark tau matrix from :func:`pair_table` (diagonal 1)."""
    names = order or sorted(set(pairs["a"]) | set(pairs["b"]))
    mat = pd.DataFrame(np.nan, index=names, columns=names)
    for a, b, tau in pairs[["a", "b", "tau"]].itertuples(index=False):
        if a in mat.index and b in mat.index:
            mat.loc[a, b] = mat.loc[b, a] = tau
    for n in names:
        mat.loc[n, n] = 1.0
    return mat


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
    sums = pd.DataFrame(0.0, index=cats, columns=cats)
    counts = pd.DataFrame(0, index=cats, columns=cats)
    for a, b, tau in pairs[["a", "b", column]].itertuples(index=False):
        if pd.isna(tau):
            continue
        ca, cb = categories[a], categories[b]
        if ca not in sums.index or cb not in sums.index:
            continue
        sums.loc[ca, cb] += tau
        counts.loc[ca, cb] += 1
        if ca != cb:
            sums.loc[cb, ca] += tau
            counts.loc[cb, ca] += 1
    return sums / counts.where(counts > 0)


def ranks(scores: pd.Series) -> pd.Series:
    """1 = best (higher score); ties share the mean rank."""
    return scores.rank(ascending=False, method="average")


def rank_plot_data(matrix: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Models scored on both ``a`` and ``b`` with their rank (1 = best) on each: model, rank_a, rank_b."""
    both = matrix[[a, b]].dropna()
    return pd.DataFrame({"model": both.index, "rank_a": ranks(both[a]).to_numpy(),
                         "rank_b": ranks(both[b]).to_numpy()}).sort_values("rank_a", ignore_index=True)


def most_improved_pair(pairs: pd.DataFrame, column: str = "delta") -> tuple[str, str] | None:
    """The benchmark pair whose tau improves most (the paper-style opening figure), or None."""
    valid = pairs.dropna(subset=[column])
    if valid.empty:
        return None
    row = valid.loc[valid[column].idxmax()]
    return str(row["a"]), str(row["b"])


def agreement_report(df: pd.DataFrame, store_root=None, min_models: int = MIN_MODELS,
                     rank_plot_pair: list[str] | tuple[str, str] = (),
                     protocols: tuple[str, str] = store.PROTOCOLS) -> dict:
    """Everything notebook 04 shows, from a tidy store frame (downstream benchmarks only).

    Returns a dict with ``benchmarks`` (list), ``pairs`` (:func:`compare_protocols`),
    ``per_benchmark`` (benchmark x protocol mean tau), ``tau`` ({protocol: square matrix}),
    ``categories`` ({benchmark: category}), ``category`` ({protocol: category matrix}),
    ``rank_plot`` (``None`` or {a, b, data: {protocol: ranks}, tau: {protocol}}: the two-ranking
    figure for ``rank_plot_pair``, by default the pair whose tau improves most), ``summary``
    (plain numbers) and ``notes`` (why some numbers are NaN).
    """
    present = [p for p in protocols if p in set(df["protocol"])]
    if len(present) < 2:
        raise store.StoreError(f"rank agreement needs results of both protocols {list(protocols)}; "
                               f"the store has {sorted(set(df['protocol']))}")
    benchmarks, _ = split_benchmarks(sorted(df["benchmark"].unique()), store_root)
    notes: list[str] = []
    if len(benchmarks) < 2:
        raise store.StoreError(f"rank agreement needs at least two downstream benchmarks, found {benchmarks}")
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
    single = [c for c in order if sum(v == c for v in categories.values()) < 2]
    if single:
        notes.append(f"categories with one benchmark have no within-category pair (NaN): {single}")
    undefined = pairs[pairs[[f"tau_{p}" for p in protocols]].isna().any(axis=1)]
    if len(undefined):
        notes.append(f"{len(undefined)} pair(s) have fewer than {min_models} common models or a constant "
                     "score: tau NaN, left out of the means")
    compared = pairs.dropna(subset=[f"tau_{p}" for p in protocols])
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
        "category_within_mean_tau": {p: float(np.nanmean(np.diag(category[p].to_numpy())))
                                     if np.isfinite(np.diag(category[p].to_numpy())).any() else float("nan")
                                     for p in protocols},
        "min_models": min_models,
    }
    plot = None
    pair = tuple(rank_plot_pair) if rank_plot_pair else most_improved_pair(pairs)
    if pair is not None:
        a, b = pair
        dirs = store.directions(df)
        oriented = {p: store.orient(store.matrix(df, p), dirs) for p in protocols}
        plot = {"a": a, "b": b, "data": {p: rank_plot_data(m, a, b) for p, m in oriented.items()},
                "tau": {p: kendall_tau(m[a], m[b], min_models)[0] for p, m in oriented.items()}}
        summary["rank_plot"] = {"a": a, "b": b, "tau": plot["tau"]}
    summary["notes"] = notes
    return {"benchmarks": bench_order, "pairs": pairs, "per_benchmark": per_benchmark, "tau": tau,
            "categories": categories, "category": category, "rank_plot": plot, "summary": summary,
            "notes": notes}
