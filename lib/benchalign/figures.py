"""Figures of notebook 07 (shared style from :mod:`lib.plots`; the notebook saves them).

Every figure fits a two-column paper: ``plots.WIDTH_DOUBLE`` (full width) or ``plots.WIDTH_SINGLE``
(one column) wide, methods named by their registry labels, a title saying what is shown.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import plots
from .experiments import METHODS, SELECTIONS

METRIC_LABELS = {"spearman": "Spearman ρ", "pair_acc": "pairwise accuracy"}
SELECTION_LABELS = {"source_random": "random", "source_kcenter": "k-center (label-free)",
                    "source_spread": "spread over target (uses labels)"}


def _label(method: str) -> str:
    return METHODS[method].label if method in METHODS else method


def method_bars(main: dict, metrics=("spearman", "pair_acc"), ref: str = "no_alignment"):
    """Rows: metrics; left column: each method's value on each test group (mean over seeds, whiskers
    = 95 % bootstrap interval over test models); right column: its paired difference to ``ref``
    (same bootstrap resamples; whiskers = 95 % interval)."""
    groups = list(main)
    methods = [m for m in METHODS if any(m in main[g] for g in groups)]
    n = len(methods)
    fig, axes = plt.subplots(len(metrics), 2, figsize=(plots.WIDTH_DOUBLE, 0.28 * n * len(metrics) + 1.3),
                             sharey=True, squeeze=False)
    height = 0.8 / max(len(groups), 1)
    ticks = np.arange(n) + height * (len(groups) - 1) / 2
    for row, metric in enumerate(metrics):
        for col, key in enumerate((metric, f"{metric}_diff_{ref}")):
            ax = axes[row][col]
            for k, g in enumerate(groups):
                y = np.arange(n) + k * height
                recs = [main[g].get(m, {}) for m in methods]
                v = np.array([np.nan if r.get(key) is None else r[key] for r in recs], dtype=float)
                ci = [r.get(f"{key}_ci") for r in recs]
                lo = np.array([v[i] - c[0] if c else 0.0 for i, c in enumerate(ci)])
                hi = np.array([c[1] - v[i] if c else 0.0 for i, c in enumerate(ci)])
                lo, hi = np.nan_to_num(lo), np.nan_to_num(hi)
                ax.errorbar(v, y, xerr=[lo, hi], fmt="o", ms=3.5, capsize=2, lw=0.9, color=f"C{k}",
                            label=f"{g} ({main[g][methods[0]]['n_models']} models)" if methods else g)
            ax.axvline(0.5 if (col == 0 and metric == "pair_acc") else 0.0, color="0.4", lw=0.8, ls=":")
            ax.set_xlabel(METRIC_LABELS.get(metric, metric) if col == 0
                          else f"Δ {METRIC_LABELS.get(metric, metric)} vs {_label(ref).split(' (')[0].lower()}")
            if row == 0:
                ax.set_title("value on the test models" if col == 0 else "paired difference (same resamples)")
        axes[row][0].set_yticks(ticks, [_label(m) for m in methods])
    axes[0][0].invert_yaxis()                                  # shared y: registry order from the top
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, title="test models", loc="upper center", ncol=len(groups),
               bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def learning_curve(protocol: dict):
    """Validation loss over Adam steps (mean over the folds; one line per seed) with each seed's
    chosen step marked; the training loss of the folds dashed."""
    curve = protocol["curve"]
    steps = np.array(curve["step"])
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 2.5))
    chosen = protocol["chosen_steps"].get(curve["method"], [])
    for s, (val, train) in enumerate(zip(curve["val_loss"], curve["train_loss"])):
        val = np.array([np.nan if v is None else v for v in val], dtype=float)
        train = np.array([np.nan if v is None else v for v in train], dtype=float)
        ax.plot(steps, val, color="C0", lw=0.9, alpha=0.8, label="validation (mean of folds)" if s == 0 else None)
        ax.plot(steps, train, color="C1", lw=0.8, ls="--", alpha=0.8,
                label="training (mean of folds)" if s == 0 else None)
        if s < len(chosen) and chosen[s] in steps:
            i = int(np.flatnonzero(steps == chosen[s])[0])
            ax.plot(steps[i], val[i], "o", color="C3", ms=4, label="chosen step" if s == 0 else None)
    ax.axvline(0, color="0.5", lw=0.6, ls=":")
    ax.set_xlabel("Adam steps (0 = plain accuracy)")
    ax.set_ylabel(f"{protocol.get('loss', 'ranking')} loss")
    med = int(np.median(chosen)) if chosen else None
    ax.set_title(f"{protocol['folds']}-fold cross-validation: step {med} chosen (median of seeds)"
                 if med is not None else "cross-validation over the source models")
    ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def weight_hist(item_benchmark, weights: list[np.ndarray]):
    """Distribution of the learned item weights (seed mean) by benchmark."""
    W = np.mean(np.array(weights), axis=0)
    item_benchmark = np.asarray(item_benchmark)
    names = list(dict.fromkeys(item_benchmark.tolist()))
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 2.4))
    bins = np.linspace(W.min(), W.max(), 41) if np.ptp(W) > 0 else 10
    for b in names:
        ax.hist(W[item_benchmark == b], bins=bins, alpha=0.6, label=f"{b} (Σ={W[item_benchmark == b].sum():.2f})")
    ax.axvline(1.0 / len(W), color="0.3", lw=0.8, ls="--", label="uniform")
    ax.set_yscale("log")                       # a spike of near-zero weights and long tails
    ax.xaxis.set_major_locator(plt.MaxNLocator(5))
    ax.set_xlabel("learned item weight (normalised)")
    ax.set_ylabel("items (log scale)")
    ax.set_title("BenchAlign item weights (mean over seeds)")
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    return fig


def ablation_bars(df: pd.DataFrame):
    """Spearman rho by ranking loss and test group (mean ± std over seeds)."""
    agg = df.groupby(["loss", "group"], sort=False)["spearman"].agg(["mean", "std"]).unstack("group")
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 2.3))
    agg["mean"].plot.bar(yerr=agg["std"], ax=ax, capsize=2, rot=0)
    ax.set_ylabel("Spearman ρ (test models)")
    ax.set_xlabel("ranking loss (same protocol)")
    ax.set_title("Loss ablation")
    top = float(np.nanmax((agg["mean"] + agg["std"].fillna(0)).to_numpy())) if len(agg) else 1.0
    ax.set_ylim(min(0.0, float(np.nanmin(agg["mean"].to_numpy())) - 0.05) if len(agg) else 0.0,
                max(top, 0.05) * 1.3)
    ax.legend(title=None, ncol=len(agg["mean"].columns), loc="upper center")
    fig.tight_layout()
    return fig


def needs_curves(df: pd.DataFrame, group: str):
    """Rho on ``group`` against the number of source models (each selection of :data:`SELECTIONS`)
    and of items (random subsets), BenchAlign next to no alignment (mean ± std over seeds)."""
    fig, axes = plt.subplots(1, 2, figsize=(plots.WIDTH_DOUBLE, 3.3), sharey=True)
    sub = df[df.group == group]
    ax = axes[0]
    for k, kind in enumerate(SELECTIONS):
        d = sub[(sub.kind == kind) & (sub.method == "benchalign")].groupby("n")["spearman"].agg(["mean", "std"])
        if len(d):
            ax.errorbar(d.index * (1 + 0.03 * (k - 1)), d["mean"], yerr=d["std"], fmt="-o", ms=3, capsize=2,
                        color=f"C{k}", label=f"BenchAlign, {SELECTION_LABELS.get(kind, kind)}")
    plain = sub[(sub.kind.isin(list(SELECTIONS))) & (sub.method == "no_alignment")]
    if len(plain):
        ax.axhline(plain.spearman.mean(), color="0.3", ls="--", lw=0.9, label="no alignment")
    ax.set_title("k source models, chosen three ways")
    ax.set_xlabel("number of source models")
    d_items = sub[sub.kind == "items"]
    for method, style, color in (("benchalign", "-o", "C0"), ("no_alignment", "--s", "0.3")):
        d = d_items[d_items.method == method].groupby("n")["spearman"].agg(["mean", "std"])
        if len(d):
            axes[1].errorbar(d.index, d["mean"], yerr=d["std"], fmt=style, ms=3, capsize=2, color=color,
                             label="BenchAlign" if method == "benchalign" else "no alignment (same items)")
    axes[1].set_title("Random item subsets (all source models)")
    axes[1].set_xlabel("number of items")
    for a, kinds in ((axes[0], list(SELECTIONS)), (axes[1], ["items"])):
        ns = sorted(sub[sub.kind.isin(kinds)].n.unique())
        a.set_xscale("log")
        if ns:
            a.set_xticks(ns, [str(n) for n in ns])
        a.xaxis.set_minor_locator(plt.NullLocator())
        a.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    axes[0].set_ylabel(f"Spearman ρ ({group})")
    fig.tight_layout()
    return fig


def cross_weights(weights: dict[str, dict]):
    """Learned weight of each direct-evaluation benchmark (mean ± std over seeds)."""
    s = pd.DataFrame(weights).T.sort_values("mean")
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 0.15 * len(s) + 1.0))
    ax.barh(s.index, s["mean"], xerr=s["std"], capsize=1.5, color=np.where(s["mean"] < 0, "C3", "C0"))
    ax.axvline(1.0 / len(s), color="0.3", lw=0.8, ls="--", label="uniform (plain mean)")
    ax.set_xlabel("learned weight (normalised)")
    ax.set_title("Direct-eval benchmarks → train-before-test ranking")
    ax.legend(loc="center left")
    fig.tight_layout()
    return fig
