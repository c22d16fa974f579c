"""Figures of the pipeline notebooks (01 selection, 02 fine-tuning, 03 direct evaluation).

Each function takes the table its notebook already wrote and returns a matplotlib figure sized for
a two-column paper (:data:`lib.plots.WIDTH_SINGLE` / :data:`lib.plots.WIDTH_DOUBLE`), with a title
that says what it shows and axis labels that need no caption to be read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator

from .. import plots

SELECTED, REJECTED, CORPUS = "#4c72b0", "#bbbbbb", "#55a868"


def _count(x: float, _pos=None) -> str:
    """Tick labels of a count axis: 60, 1,000, 50k (never 6x10^1)."""
    if x >= 10_000:
        return f"{x / 1000:,.0f}k"
    return f"{x:,.0f}"


def train_sizes(table: pd.DataFrame, min_train: int):
    """Training documents per task (log scale): selected benchmarks, rejected ones and perplexity
    corpora in three colours, the ``min_train`` threshold as a dashed line. ``table`` is notebook
    01's selection table (index: task; columns ``n_train``, ``selected``, optional ``role``)."""
    sizes = table["n_train"].astype(float).fillna(0)
    role = table["role"] if "role" in table else pd.Series("benchmark", index=table.index)
    colors = [CORPUS if r == "corpus" else SELECTED if s else REJECTED
              for r, s in zip(role, table["selected"].astype(bool))]
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 0.28 * len(table) + 1.6))
    lowest = max(1.0, min([v for v in sizes if v > 0] + [float(min_train)]) / 2)
    ax.barh(table.index, np.maximum(sizes, lowest) - lowest, left=lowest, color=colors)
    ax.axvline(min_train, color="#c44e52", ls="--", lw=1)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(_count))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
    ax.set_xlim(lowest, max(sizes.max(), min_train) * 1.6)
    ax.set_xlabel("documents in the training split (log scale)")
    ax.invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in (SELECTED, REJECTED, CORPUS)]
    labels = ["selected", "rejected", "perplexity corpus"]
    keep = [i for i, c in enumerate((SELECTED, REJECTED, CORPUS)) if c in colors]
    handles = [handles[i] for i in keep] + [plt.Line2D([], [], color="#c44e52", ls="--", lw=1)]
    labels = [labels[i] for i in keep] + [f"min_train = {min_train:,}"]
    fig.legend(handles, labels, loc="lower center", ncol=2, frameon=False, bbox_to_anchor=(0.5, 0.0))
    ax.set_title("Training split size per task")
    fig.tight_layout(rect=(0, 0.5 / (0.28 * len(table) + 1.6), 1, 1))
    return fig


def val_curves(curves: pd.DataFrame, benchmarks: Iterable[str], corpora: Iterable[str] = (),
               value: str = "val_score"):
    """The validation value the best epoch is chosen on (``val_score`` or ``val_loss``) after each
    epoch, one panel per benchmark, a line per (model, learning rate). ``curves`` has columns
    ``model``, ``benchmark``, ``lr``, ``epoch`` and ``value``."""
    label = "validation loss" if value == "val_loss" else "validation score"
    benchmarks, corpora = list(benchmarks), set(corpora)
    cols = min(4, len(benchmarks))
    rows = math.ceil(len(benchmarks) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(plots.WIDTH_DOUBLE, 1.75 * rows + 0.9), squeeze=False)
    models = sorted(curves["model"].unique())
    lrs = sorted(curves["lr"].unique())
    colors = dict(zip(models, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4))
    styles = dict(zip(lrs, ["-", "--", ":", "-."] * 4))
    for ax, bench in zip(axes.flat, benchmarks):
        sub = curves[curves["benchmark"] == bench]
        for (model, lr), line in sub.groupby(["model", "lr"]):
            line = line.sort_values("epoch")
            ax.plot(line["epoch"], line[value], color=colors[model], ls=styles[lr], marker="o", ms=2.5, lw=1)
        ax.set_title(bench + (" (bits/byte, lower is better)" if bench in corpora and value == "val_score"
                              else ""), fontsize=8)
        ax.set_xticks(sorted(sub["epoch"].unique()))
        ax.set_xlabel("epoch")
    for ax in axes[:, 0]:
        ax.set_ylabel(label)
    for ax in list(axes.flat)[len(benchmarks):]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=colors[m], lw=1.5) for m in models]
    handles += [plt.Line2D([], [], color="0.3", ls=styles[lr], lw=1) for lr in lrs]
    labels = list(models) + [f"lr = {lr:g}" for lr in lrs]
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(f"Train-before-test: {label} after each epoch (the best epoch and learning rate is "
                 "scored on test)", fontsize=9)
    fig.tight_layout(rect=(0, 0.06 + 0.04 * math.ceil(len(labels) / 4), 1, 1))
    return fig


def direct_vs_tbt(both: pd.DataFrame, benchmarks: Iterable[str], corpora: Iterable[str] = ()):
    """Each model's test score under direct evaluation (x) against train-before-test (y), one panel
    per benchmark, with the diagonal (no change). ``both`` has columns ``benchmark``, ``model``,
    ``direct_eval`` and (where notebook 02 ran) ``train_before_test``."""
    benchmarks, corpora = list(benchmarks), set(corpora)
    cols = min(4, len(benchmarks))
    rows = math.ceil(len(benchmarks) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(plots.WIDTH_DOUBLE if cols > 2 else plots.WIDTH_SINGLE * cols / 1.6,
                                                  1.85 * rows + 0.5), squeeze=False)
    tbt = both["train_before_test"] if "train_before_test" in both else pd.Series(np.nan, index=both.index)
    for ax, bench in zip(axes.flat, benchmarks):
        mask = both["benchmark"] == bench
        x, y = both.loc[mask, "direct_eval"], tbt[mask]
        ax.scatter(x, y, s=14, color=plots.PROTOCOL_COLORS["train_before_test"])
        values = pd.concat([x, y]).dropna()
        if len(values):                     # the same range on both axes: the diagonal means "no change"
            lo, hi = values.min(), values.max()
            pad = 0.08 * (hi - lo or 1.0)
            ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="#999999", lw=0.8, ls="--")
            ax.set_xlim(lo - pad, hi + pad)
            ax.set_ylim(lo - pad, hi + pad)
            ax.set_aspect("equal", adjustable="box")
        ax.set_title(bench + (" (bits/byte, lower is better)" if bench in corpora else ""), fontsize=8)
        ax.set_xlabel("direct evaluation")
    for ax in axes[:, 0]:
        ax.set_ylabel("train-before-test")
    for ax in list(axes.flat)[len(benchmarks):]:
        ax.set_visible(False)
    fig.suptitle("Test score of each model: direct evaluation vs train-before-test (dashed: no change)",
                 fontsize=9)
    fig.tight_layout()
    return fig
