"""Figures of notebook 07 (shared style from :mod:`lib.plots`; the notebook saves them)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import plots
from .experiments import METHODS


def method_bars(main: dict, metrics=("spearman", "pair_acc")):
    """One panel per metric: methods x test groups, bars = seed mean, whiskers = 95% interval."""
    groups = list(main)
    methods = [m for m in METHODS if any(m in main[g] for g in groups)]
    fig, axes = plt.subplots(1, len(metrics), figsize=(plots.WIDTH_DOUBLE, 0.3 * len(methods) + 1.2),
                             sharey=True, squeeze=False)
    height = 0.8 / max(len(groups), 1)
    for ax, metric in zip(axes[0], metrics):
        for k, g in enumerate(groups):
            y = np.arange(len(methods)) + k * height
            vals = [main[g].get(m, {}).get(metric) for m in methods]
            cis = [main[g].get(m, {}).get(f"{metric}_ci") for m in methods]
            v = np.array([np.nan if x is None else x for x in vals], dtype=float)
            lo = np.array([v[i] - c[0] if c else 0 for i, c in enumerate(cis)])
            hi = np.array([c[1] - v[i] if c else 0 for i, c in enumerate(cis)])
            ax.barh(y, v, height=height, xerr=[lo, hi], label=g, capsize=2, error_kw={"lw": 0.8})
        ax.set_yticks(np.arange(len(methods)) + height * (len(groups) - 1) / 2, [METHODS[m].label for m in methods])
        ax.axvline(0.5 if metric == "pair_acc" else 0.0, color="0.4", lw=0.8, ls=":")
        ax.set_xlabel({"spearman": "Spearman ρ (test models)", "pair_acc": "pairwise accuracy"}.get(metric, metric))
        ax.invert_yaxis()
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.legend(handles, labels, title="test models", loc="upper center", ncol=len(groups),
               bbox_to_anchor=(0.5, 1.0), frameon=False)
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
    ax.set_xlabel("learned item weight (normalised)")
    ax.set_ylabel("items")
    ax.legend()
    fig.tight_layout()
    return fig


def ablation_bars(df: pd.DataFrame):
    """Spearman rho by ranking loss and test group (mean ± std over seeds)."""
    agg = df.groupby(["loss", "group"])["spearman"].agg(["mean", "std"]).unstack("group")
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 2.2))
    agg["mean"].plot.bar(yerr=agg["std"], ax=ax, capsize=2, rot=0)
    ax.set_ylabel("Spearman ρ (test models)")
    ax.set_xlabel("ranking loss")
    ax.legend(title="test models")
    fig.tight_layout()
    return fig


def needs_curves(df: pd.DataFrame, group: str):
    """Rho on ``group`` against the number of source models and of items (mean ± std over seeds)."""
    fig, axes = plt.subplots(1, 2, figsize=(plots.WIDTH_DOUBLE, 2.4), sharey=True)
    sub = df[df.group == group]
    for ax, kinds, label in ((axes[0], ("source_random",), "source models"), (axes[1], ("items",), "items")):
        for method, style in (("benchalign", "-o"), ("no_alignment", "--s")):
            d = sub[(sub.kind.isin(kinds)) & (sub.method == method)].groupby("n")["spearman"].agg(["mean", "std"])
            if len(d):
                ax.errorbar(d.index, d["mean"], yerr=d["std"], fmt=style, ms=3, capsize=2, label=method)
        ns = sorted(sub[sub.kind.isin(kinds)].n.unique())
        ax.set_xscale("log")
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xlabel(f"number of {label}")
    spread = sub[(sub.kind == "source_spread") & (sub.method == "benchalign")]
    if len(spread):
        axes[0].errorbar(spread.n.iloc[:1], [spread.spearman.mean()], yerr=[spread.spearman.std()], fmt="D",
                         color="C3", ms=4, capsize=2, label="benchalign, spread selection")
    axes[0].set_ylabel(f"Spearman ρ ({group})")
    axes[0].legend()
    fig.tight_layout()
    return fig


def cross_weights(weights: dict[str, dict]):
    """Learned weight of each direct-evaluation benchmark (mean ± std over seeds)."""
    s = pd.DataFrame(weights).T.sort_values("mean")
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 0.16 * len(s) + 0.8))
    ax.barh(s.index, s["mean"], xerr=s["std"], capsize=1.5, color=np.where(s["mean"] < 0, "C3", "C0"))
    ax.axvline(1.0 / len(s), color="0.3", lw=0.8, ls="--", label="uniform")
    ax.set_xlabel("learned weight (normalised)")
    ax.legend()
    fig.tight_layout()
    return fig
