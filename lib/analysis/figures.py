"""Figures of the analysis notebooks (04-06), drawn in the shared style of :mod:`lib.plots`.

Each function takes plain DataFrames/Series and returns a matplotlib Figure; saving is left to
``lib.plots.savefig`` in the notebook.
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..plots import PROTOCOL_COLORS, PROTOCOL_LABELS, WIDTH_DOUBLE, WIDTH_SINGLE


def _label(p: str) -> str:
    return PROTOCOL_LABELS.get(p, p)


def tau_heatmaps(mats: Mapping[str, pd.DataFrame], annotate: bool | None = None, vmin: float = -0.2):
    """Side-by-side benchmark x benchmark Kendall tau heatmaps, one per protocol."""
    n = len(next(iter(mats.values())))
    annotate = n <= 12 if annotate is None else annotate
    side = min(WIDTH_DOUBLE / 2, 0.9 + 0.15 * n)
    fig, axes = plt.subplots(1, len(mats) + 1, figsize=(side * len(mats) + 0.8, side + 0.4), squeeze=False,
                             gridspec_kw={"width_ratios": [1] * len(mats) + [0.04]})
    cbar_ax = axes[0][-1]
    for ax, (p, mat) in zip(axes[0][:-1], mats.items()):
        sns.heatmap(mat, ax=ax, vmin=vmin, vmax=1, cmap="viridis", square=True, annot=annotate, fmt=".2f",
                    cbar=True, cbar_ax=cbar_ax, cbar_kws={"label": "Kendall τ"},
                    xticklabels=True, yticklabels=ax is axes[0][0], annot_kws={"fontsize": 6})
        mean = np.nanmean(mat.to_numpy()[~np.eye(len(mat), dtype=bool)]) if len(mat) > 1 else np.nan
        ax.set_title(f"{_label(p)} (mean τ {mean:.2f})")
        ax.tick_params(labelsize=6 if n > 12 else 8)
    fig.tight_layout()
    return fig


def per_benchmark_bars(per_benchmark: pd.DataFrame):
    """Each benchmark's mean tau against the others, both protocols (horizontal bars)."""
    data = per_benchmark.reset_index(names="benchmark").melt("benchmark", var_name="protocol", value_name="tau")
    data["protocol"] = data["protocol"].map(_label)
    height = max(1.8, 0.16 * len(per_benchmark) + 0.8)
    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE, height))
    sns.barplot(data=data, y="benchmark", x="tau", hue="protocol", ax=ax, orient="h",
                palette={_label(k): v for k, v in PROTOCOL_COLORS.items()})
    ax.set_xlabel("mean Kendall τ against the other benchmarks")
    ax.set_ylabel("")
    ax.legend(title="", loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def category_heatmaps(mats: Mapping[str, pd.DataFrame]):
    """Category x category mean-tau heatmaps, one per protocol."""
    fig, axes = plt.subplots(1, len(mats), figsize=(WIDTH_DOUBLE, WIDTH_DOUBLE / len(mats) + 0.3), squeeze=False,
                             sharey=True)
    for ax, (p, mat) in zip(axes[0], mats.items()):
        sns.heatmap(mat, ax=ax, vmin=0, vmax=1, cmap="viridis", annot=True, fmt=".2f", square=True,
                    cbar=False, annot_kws={"fontsize": 7}, yticklabels=ax is axes[0][0])
        ax.set_title(_label(p))
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    return fig


def rank_plot(data: Mapping[str, pd.DataFrame], a: str, b: str, taus: Mapping[str, float] | None = None,
              label_top: int = 0):
    """The paper-style opening figure: each model's rank on ``a`` (left) joined to its rank on ``b``
    (right), one panel per protocol; crossing lines are disagreements."""
    fig, axes = plt.subplots(1, len(data), figsize=(WIDTH_DOUBLE * 0.8, 3.2), squeeze=False, sharey=True)
    for ax, (p, df) in zip(axes[0], data.items()):
        color = PROTOCOL_COLORS.get(p, "C0")
        for ra, rb in df[["rank_a", "rank_b"]].itertuples(index=False):
            ax.plot([0, 1], [ra, rb], color=color, alpha=0.55, lw=0.9, marker="o", ms=2.5)
        if label_top:
            for row in df.nsmallest(label_top, "rank_a").itertuples():
                ax.annotate(str(row.model).split("/")[-1], (0, row.rank_a), xytext=(-4, 0),
                            textcoords="offset points", ha="right", va="center", fontsize=5)
        ax.set_xticks([0, 1], [a, b])
        ax.set_xlim(-0.35 if label_top else -0.1, 1.1)
        title = _label(p)
        if taus and p in taus and np.isfinite(taus[p]):
            title += f" (τ = {taus[p]:.2f})"
        ax.set_title(title)
        ax.grid(axis="x", visible=False)
    axes[0][0].invert_yaxis()
    axes[0][0].set_ylabel("rank (1 = best)")
    fig.tight_layout()
    return fig


def scatter_grid(frames: Mapping[str, pd.DataFrame], x: str, y: str, hue: str | None = None,
                 xlabel: str | None = None, ylabel: str | None = None, titles: Mapping[str, str] | None = None,
                 logx: bool = False):
    """One scatter panel per entry of ``frames`` (e.g. one per protocol), sharing axes labels."""
    fig, axes = plt.subplots(1, len(frames), figsize=(WIDTH_DOUBLE * 0.4 * len(frames), 2.8), squeeze=False)
    for ax, (key, df) in zip(axes[0], frames.items()):
        if df.empty:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        else:
            sns.scatterplot(data=df, x=x, y=y, hue=hue, ax=ax, s=18, legend=ax is axes[0][-1])
        if logx:
            ax.set_xscale("log")
        ax.set_xlabel(xlabel or x)
        ax.set_ylabel(ylabel or y)
        ax.set_title((titles or {}).get(key, _label(key)))
    leg = axes[0][-1].get_legend()
    if leg is not None:
        leg.set_bbox_to_anchor((1.02, 1))
        leg._loc = 2
    fig.tight_layout()
    return fig


def explained_variance(curves: Mapping[str, pd.Series], max_components: int = 10):
    """Explained-variance ratio per principal component, one line per protocol."""
    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE, 2.4))
    for p, ratio in curves.items():
        r = ratio.iloc[:max_components]
        ax.plot(np.arange(1, len(r) + 1), r.to_numpy(), marker="o", ms=3, label=_label(p),
                color=PROTOCOL_COLORS.get(p))
    ax.set_xlabel("principal component")
    ax.set_ylabel("explained variance ratio")
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    return fig


def rect_heatmaps(mats: Mapping[str, pd.DataFrame], titles: Mapping[str, str] | None = None,
                  label: str = "Kendall τ", vmin: float = -0.2):
    """Rectangular heatmaps stacked vertically (e.g. corpus x benchmark tau, one per setting)."""
    first = next(iter(mats.values()))
    width = min(WIDTH_DOUBLE, 1.6 + 0.28 * first.shape[1])
    height = 0.6 + 0.22 * first.shape[0]
    fig, axes = plt.subplots(len(mats), 1, figsize=(width, height * len(mats) + 0.6), squeeze=False)
    for ax, (key, mat) in zip(axes[:, 0], mats.items()):
        sns.heatmap(mat, ax=ax, vmin=vmin, vmax=1, cmap="viridis", annot=mat.shape[1] <= 30, fmt=".2f",
                    cbar_kws={"label": label}, annot_kws={"fontsize": 5}, xticklabels=ax is axes[-1, 0])
        ax.set_title((titles or {}).get(key, _label(key)))
        ax.set_xlabel("")
        ax.set_ylabel("")
        ax.tick_params(labelsize=6)
    fig.tight_layout()
    return fig


def group_bars(table: pd.DataFrame, group: str, value: str, hue: str = "protocol", xlabel: str | None = None):
    """Horizontal bars of ``value`` per ``group``, one colour per protocol (NaN groups left empty)."""
    data = table.copy()
    data[hue] = data[hue].map(_label)
    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE, max(1.6, 0.3 * data[group].nunique() + 0.8)))
    sns.barplot(data=data, y=group, x=value, hue=hue, ax=ax, orient="h",
                palette={_label(k): v for k, v in PROTOCOL_COLORS.items()})
    ax.set_xlabel(xlabel or value)
    ax.set_ylabel("")
    ax.set_xlim(0, 1)
    ax.legend(title="", loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    fig.tight_layout()
    return fig
