"""Figures of the pipeline notebooks (01 selection, 02 fine-tuning, 03 direct evaluation).

Each function takes the table its notebook already wrote and returns a matplotlib figure sized for
a two-column paper (:data:`lib.plots.WIDTH_SINGLE` / :data:`lib.plots.WIDTH_DOUBLE`), with a title
that says what it shows, axis labels that need no caption to be read, a caption
(:func:`lib.plots.set_caption`), legends under the panels and models in their family's colour
(sizes as shades; ``store`` gives the metadata of self-built models). Figures with one line or point
per model stay readable with any number of models (the mini world may grow to 30-40).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from .. import plots

SELECTED, REJECTED, CORPUS = "#1f4e79", "#999999", "#55a868"
ROLE_MARKERS = {SELECTED: "o", REJECTED: "x", CORPUS: "s"}     # apart in greyscale too


def _count(x: float, _pos=None) -> str:
    """Tick labels of a count axis: 60, 1,000, 50k (never 6x10^1)."""
    if x >= 10_000:
        return f"{x / 1000:,.0f}k"
    return f"{x:,.0f}"


def train_sizes(table: pd.DataFrame, min_train: int):
    """Training documents per task of notebook 01's selection ``table`` (log scale, a dot per task: a
    bar's length means nothing on a log axis), the ``min_train`` threshold as a dashed line."""
    sizes = table["n_train"].astype(float).fillna(0)
    role = table["role"] if "role" in table else pd.Series("benchmark", index=table.index)
    colors = [CORPUS if r == "corpus" else SELECTED if s else REJECTED
              for r, s in zip(role, table["selected"].astype(bool))]
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 0.2 * len(table) + 1.6), layout="constrained")
    lowest = max(1.0, min([v for v in sizes if v > 0] + [float(min_train)]) / 2)
    for c in dict.fromkeys(colors):
        rows = [i for i, ci in enumerate(colors) if ci == c]
        ax.scatter(np.maximum(sizes.iloc[rows], lowest), rows, color=c, marker=ROLE_MARKERS[c], s=18, zorder=3)
    ax.axvline(min_train, color="0.2", ls="--", lw=1)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(_count))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(lowest, max(sizes.max(), min_train) * 1.6)
    ax.set_xlabel("documents in the training split (log scale)")
    ax.set_yticks(np.arange(len(table)), plots.displays(table.index))
    ax.set_ylim(len(table) - 0.5, -0.5)
    ax.set_ylabel("task")
    handles = [plt.Line2D([], [], color=c, marker=ROLE_MARKERS[c], lw=0, ms=4.5) for c in (SELECTED, REJECTED, CORPUS)]
    labels = ["selected", "rejected", "perplexity corpus"]
    keep = [i for i, c in enumerate((SELECTED, REJECTED, CORPUS)) if c in colors]
    handles = [handles[i] for i in keep] + [plt.Line2D([], [], color="0.2", ls="--", lw=1)]
    labels = [labels[i] for i in keep] + [f"min_train = {min_train:,}"]
    plots.legend_below(fig, handles, labels, ncol=2)
    plots.title(fig, "Training split size per task")
    return plots.set_caption(fig, (
        "Documents in each task's training split (log scale, one dot per task): benchmarks selected for "
        "train-before-test, rejected ones and perplexity corpora; a benchmark needs at least "
        f"min_train = {min_train:,} training documents "
        "(dashed)."))


def _panels(n: int, panel_h: float, extra_h: float, width: float = plots.WIDTH_DOUBLE, cols_max: int = 4):
    cols = min(cols_max, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width if cols > 2 else plots.WIDTH_SINGLE, panel_h * rows + extra_h),
                             squeeze=False, layout="constrained")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    return fig, axes


def val_curves(curves: pd.DataFrame, benchmarks: Iterable[str], corpora: Iterable[str] = (),
               value: str = "val_score", store=None):
    """The validation ``value`` the best epoch is chosen on after each epoch, one panel per benchmark:
    a thin line per (model, learning rate), the learning rate as line style, and the median over
    models per learning rate in black, so the panels stay readable with any number of models."""
    label = "validation loss" if value == "val_loss" else "validation score"
    benchmarks, corpora = list(benchmarks), set(corpora)
    fig, axes = _panels(len(benchmarks), 1.55, 1.1)
    models = sorted(curves["model"].unique())
    lrs = sorted(curves["lr"].unique())
    styles = plots.model_styles(models, store)
    dashes = dict(zip(lrs, ["-", "--", ":", "-."] * 4))
    for ax, bench in zip(axes.flat, benchmarks):
        sub = curves[curves["benchmark"] == bench]
        for (model, lr), line in sub.groupby(["model", "lr"]):
            line = line.sort_values("epoch")
            ax.plot(line["epoch"], line[value], color=styles.loc[model, "color"], ls=dashes[lr], lw=0.7, alpha=0.7,
                    marker=styles.loc[model, "marker"], ms=2)
        for lr, g in sub.groupby("lr"):
            med = g.groupby("epoch")[value].median()
            ax.plot(med.index, med.to_numpy(), color="0.05", ls=dashes[lr], lw=1.6, marker="o", ms=2.5)
        unit = ", bits/byte" if bench in corpora and value == "val_score" else ""
        ax.set_title(plots.display(bench) + unit)
        ax.set_xticks(sorted(sub["epoch"].unique()))
    fams = sorted(styles["family"].dropna().unique(), key=plots.display)
    handles, labels = plots.family_handles(fams, lines=True)
    handles += [plt.Line2D([], [], color="0.4", ls=dashes[lr], lw=1) for lr in lrs]
    labels += [f"lr = {lr:g}" for lr in lrs]
    handles.append(plt.Line2D([], [], color="0.05", lw=1.6, marker="o", ms=2.5))
    labels.append("median over models")
    plots.legend_below(fig, handles, labels)
    for ax in axes.flat:
        ax.set_xlabel("epoch")
    fig.supylabel(label)
    plots.title(fig, f"Train-before-test: {label} after each epoch")
    lower = "lower is better" if value == "val_loss" else "higher is better, bits/byte: lower"
    return plots.set_caption(fig, (
        f"The {label} ({lower}) after each fine-tuning epoch, one panel per benchmark: a thin line per model and "
        f"learning rate ({len(models)} models, coloured by family, darker shades larger), the learning rate as line "
        "style, in black the median over models. The best (learning rate, epoch) on validation is the checkpoint "
        "scored once on test."))


def direct_vs_tbt(both: pd.DataFrame, benchmarks: Iterable[str], corpora: Iterable[str] = (), store=None):
    """Each model's test score under direct evaluation (x) against train-before-test (y), one panel
    per benchmark, with the diagonal (no change); a point per model in its family colour (hollow:
    prepared or instruction-tuned; ``store`` holds the metadata of self-built models). ``both`` has
    columns ``benchmark``, ``model``, ``direct_eval`` and (where notebook 02 ran) ``train_before_test``."""
    benchmarks, corpora = list(benchmarks), set(corpora)
    fig, axes = _panels(len(benchmarks), 1.7, 1.2)
    tbt = both["train_before_test"] if "train_before_test" in both else pd.Series(np.nan, index=both.index)
    styles = plots.model_styles(both["model"].unique(), store)
    for ax, bench in zip(axes.flat, benchmarks):
        mask = both["benchmark"] == bench
        x, y = both.loc[mask, "direct_eval"], tbt[mask]
        st = styles.loc[both.loc[mask, "model"]]
        filled = ~st["instruct"].to_numpy(bool)
        for (marker, face), part in st.assign(face=filled, x=x.to_numpy(), y=y.to_numpy()).groupby(["marker", "face"]):
            ax.scatter(part["x"], part["y"], s=14, linewidths=0.9, marker=marker,
                       facecolors=part["color"] if face else "none", edgecolors=part["color"])
        values = pd.concat([x, y]).dropna()
        if len(values):                     # the same range on both axes: the diagonal means "no change"
            lo, hi = values.min(), values.max()
            pad = 0.08 * (hi - lo or 1.0)
            ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="#999999", lw=0.8, ls="--")
            ax.set_xlim(lo - pad, hi + pad)
            ax.set_ylim(lo - pad, hi + pad)
            ax.set_aspect("equal", adjustable="box")
            ax.xaxis.set_major_locator(plt.MaxNLocator(4))
            ax.yaxis.set_major_locator(plt.MaxNLocator(4))
        # a corpus's title in two short lines, neither wider than its panel
        ax.set_title(plots.display(bench) + (", bits/byte\nlower is better" if bench in corpora else ""))
    fams = sorted(styles["family"].dropna().unique(), key=plots.display)
    handles, labels = plots.family_handles(fams)
    if styles["instruct"].any():
        handles += [plt.Line2D([], [], marker="o", lw=0, color="0.1", ms=5),
                    plt.Line2D([], [], marker="o", lw=0, color="0.1", mfc="none", ms=5)]
        labels += ["base model", "prepared / instruct"]
    handles.append(plt.Line2D([], [], color="#999999", lw=0.8, ls="--"))
    labels.append("no change")
    plots.legend_below(fig, handles, labels)
    for ax in axes.flat:
        ax.set_xlabel("direct evaluation")
    fig.supylabel("train-before-test")
    plots.title(fig, "Test score of each model: direct evaluation against train-before-test")
    return plots.set_caption(fig, (
        "Each model's test score under direct evaluation (x) and under train-before-test (y), one panel per "
        "benchmark (perplexity corpora in bits per byte, lower is better); points above the dashed diagonal gained "
        "from fine-tuning (below it, for corpora). Colours: model families, darker shades larger models."))
