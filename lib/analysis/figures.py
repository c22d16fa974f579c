"""Figures of the analysis notebooks (04-06), drawn in the shared style of :mod:`lib.plots`.

Each function takes plain DataFrames/Series and returns a matplotlib Figure; saving is left to
``lib.plots.savefig`` in the notebook. Every figure carries a title that can serve as its caption's
first line, and a figure that shows a headline number shows its 95 % interval (``[lo, hi]``, a
bootstrap over models, :mod:`lib.analysis.uncertainty`) next to it. Sizes are set for a two-column
paper (:data:`lib.plots.WIDTH_SINGLE`, :data:`lib.plots.WIDTH_DOUBLE`); no text is smaller than 6.5 pt.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.collections import LineCollection
from matplotlib.colors import LinearSegmentedColormap

from ..plots import PROTOCOL_COLORS, PROTOCOL_LABELS, WIDTH_DOUBLE, WIDTH_SINGLE

# Kendall tau from -1 (red) through 0 (white) to 1 (blue), without RdBu's darkest ends, so black cell
# numbers stay readable on every cell (contrast at least 7:1).
TAU_CMAP = LinearSegmentedColormap.from_list("tau", plt.get_cmap("RdBu")(np.linspace(0.12, 0.88, 256)))
ANNOT = 7                # pt, numbers printed in cells


def _label(p: str) -> str:
    return PROTOCOL_LABELS.get(p, p)


def ci_text(ci) -> str:
    """``" [0.45, 0.57]"`` for a finite interval, else ``""``."""
    if ci is None or len(ci) != 2 or not all(np.isfinite(ci)):
        return ""
    return f" [{ci[0]:.2f}, {ci[1]:.2f}]"


def _suptitle(fig, text: str) -> None:
    fig.suptitle(text, fontsize=10)


def tau_heatmaps(mats: Mapping[str, pd.DataFrame], annotate: bool | None = None, vmin: float = -0.2,
                 cis: Mapping[str, list] | None = None, n_models: int | None = None):
    """Side-by-side benchmark x benchmark Kendall tau heatmaps, one per protocol, each titled with
    its mean tau and interval (``cis``: {protocol: [lo, hi]})."""
    n = len(next(iter(mats.values())))
    annotate = n <= 12 if annotate is None else annotate
    side = min(WIDTH_DOUBLE / 2, 0.9 + 0.15 * n)
    fig, axes = plt.subplots(1, len(mats) + 1, figsize=(side * len(mats) + 0.8, side + 0.7), squeeze=False,
                             gridspec_kw={"width_ratios": [1] * len(mats) + [0.04]})
    cbar_ax = axes[0][-1]
    for ax, (p, mat) in zip(axes[0][:-1], mats.items()):
        sns.heatmap(mat, ax=ax, vmin=vmin, vmax=1, cmap="viridis", square=True, annot=annotate, fmt=".2f",
                    cbar=True, cbar_ax=cbar_ax, cbar_kws={"label": "Kendall τ"},
                    xticklabels=True, yticklabels=ax is axes[0][0], annot_kws={"fontsize": ANNOT})
        mean = np.nanmean(mat.to_numpy()[~np.eye(len(mat), dtype=bool)]) if len(mat) > 1 else np.nan
        ax.set_title(f"{_label(p)}\nmean τ {mean:.2f}{ci_text((cis or {}).get(p))}")
        ax.tick_params(labelsize=6.5 if n > 12 else 8)
    who = f" ({n_models} models)" if n_models else ""
    _suptitle(fig, f"Kendall τ between the model rankings of every benchmark pair{who}")
    fig.tight_layout()
    return fig


def _paired_barh(ax, labels: list[str], values: Mapping[str, np.ndarray], errors: Mapping[str, np.ndarray] | None):
    """Horizontal bars, one colour per protocol, with optional [lo, hi] whiskers (errors[p]: n x 2)."""
    y = np.arange(len(labels))
    height = 0.8 / max(1, len(values))
    for k, (p, v) in enumerate(values.items()):
        pos = y - 0.4 + height * (k + 0.5)
        v = np.asarray(v, float)
        ax.barh(pos, v, height=height, color=PROTOCOL_COLORS.get(p, f"C{k}"), label=_label(p))
        if errors is not None and p in errors:
            e = np.asarray(errors[p], float)
            ok = np.isfinite(e).all(axis=1) & np.isfinite(v)
            ax.errorbar(v[ok], pos[ok], xerr=np.abs(np.vstack([v[ok] - e[ok, 0], e[ok, 1] - v[ok]])), fmt="none",
                        ecolor="0.2", elinewidth=0.7, capsize=1.5)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.legend(title="", loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)


def per_benchmark_bars(per_benchmark: pd.DataFrame, cis: Mapping[str, pd.DataFrame] | None = None):
    """Each benchmark's mean tau against the others, both protocols (horizontal bars with intervals;
    ``cis``: {protocol: benchmark x [lo, hi]})."""
    height = max(2.0, 0.17 * len(per_benchmark) + 1.1)
    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE, height))
    errors = {p: cis[p].reindex(per_benchmark.index).to_numpy(float) for p in per_benchmark} if cis else None
    _paired_barh(ax, list(per_benchmark.index), {p: per_benchmark[p].to_numpy(float) for p in per_benchmark}, errors)
    ax.set_xlabel("mean Kendall τ against the other benchmarks")
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title("Each benchmark against the others (95 % intervals)", pad=22)
    fig.tight_layout()
    return fig


def category_heatmaps(mats: Mapping[str, pd.DataFrame], within: Mapping[str, tuple[float, list]] | None = None):
    """Category x category mean-tau heatmaps, one per protocol; ``within``: {protocol: (within-category
    mean tau, [lo, hi])} for the panel titles."""
    fig, axes = plt.subplots(1, len(mats), figsize=(WIDTH_DOUBLE, WIDTH_DOUBLE / len(mats) + 0.6), squeeze=False,
                             sharey=True)
    for ax, (p, mat) in zip(axes[0], mats.items()):
        sns.heatmap(mat, ax=ax, vmin=0, vmax=1, cmap="viridis", annot=True, fmt=".2f", square=True,
                    cbar=False, annot_kws={"fontsize": ANNOT}, yticklabels=ax is axes[0][0])
        title = _label(p)
        if within and p in within and np.isfinite(within[p][0]):
            title += f"\nwithin categories {within[p][0]:.2f}{ci_text(within[p][1])}"
        ax.set_title(title)
        ax.tick_params(labelsize=7)
    _suptitle(fig, "Mean Kendall τ of benchmark pairs by category (diagonal: pairs within a category)")
    fig.tight_layout()
    return fig


def rank_plot(data: Mapping[str, pd.DataFrame], a: str, b: str, taus: Mapping[str, float] | None = None,
              label_top: int = 0, cis: Mapping[str, list] | None = None):
    """The paper-style opening figure: each model's rank on ``a`` (left) joined to its rank on ``b``
    (right), one panel per protocol; crossing lines are disagreements. Ranks run from 1 (best, top)."""
    fig, axes = plt.subplots(1, len(data), figsize=(WIDTH_DOUBLE * 0.8, 3.4), squeeze=False, sharey=True)
    n = max(len(df) for df in data.values())
    for ax, (p, df) in zip(axes[0], data.items()):
        color = PROTOCOL_COLORS.get(p, "C0")
        ra, rb = df["rank_a"].to_numpy(float), df["rank_b"].to_numpy(float)
        ax.add_collection(LineCollection(np.stack([np.column_stack([np.zeros_like(ra), ra]),
                                                   np.column_stack([np.ones_like(rb), rb])], axis=1),
                                         colors=color, alpha=0.55, linewidths=0.9))
        ax.scatter(np.r_[np.zeros_like(ra), np.ones_like(rb)], np.r_[ra, rb], s=6, color=color, alpha=0.55,
                   edgecolors="none")
        if label_top:
            for row in df.nsmallest(label_top, "rank_a").itertuples():
                ax.annotate(str(row.model).split("/")[-1], (0, row.rank_a), xytext=(-4, 0),
                            textcoords="offset points", ha="right", va="center", fontsize=6.5)
        ax.set_xticks([0, 1], [a, b])
        ax.set_xlim(-0.35 if label_top else -0.1, 1.1)
        title = _label(p)
        if taus and p in taus and np.isfinite(taus[p]):
            title += f"\nτ = {taus[p]:.2f}{ci_text((cis or {}).get(p))}"
        ax.set_title(title)
        ax.grid(axis="x", visible=False)
    step = max(1, int(np.ceil(n / 6 / 5) * 5)) if n > 10 else 1
    axes[0][0].set_yticks([1] + list(range(step, n + 1, step)) if step > 1 else list(range(1, n + 1)))
    axes[0][0].set_ylim(n + 0.5, 0.5)
    axes[0][0].set_ylabel("rank (1 = best)")
    _suptitle(fig, f"Model ranks on {a} and {b} ({n} models)")
    fig.tight_layout()
    return fig


def ceiling_plot(pairs: pd.DataFrame, per_benchmark: pd.DataFrame, protocols: tuple[str, ...]):
    """Noise ceiling: left, every benchmark pair's tau against its ceiling (on the diagonal: all of the
    disagreement is noise); right, each benchmark's mean tau (dot) and mean ceiling (ring)."""
    n = len(per_benchmark)
    fig, (left, right) = plt.subplots(1, 2, figsize=(WIDTH_DOUBLE, max(2.8, 0.17 * n + 1.3)),
                                      gridspec_kw={"width_ratios": [1, 1]})
    for p in protocols:
        ok = pairs.dropna(subset=[f"tau_{p}", f"ceiling_{p}"])
        left.scatter(ok[f"ceiling_{p}"], ok[f"tau_{p}"], s=9, alpha=0.6, color=PROTOCOL_COLORS.get(p),
                     label=_label(p), edgecolors="none")
    lo = float(np.nanmin([0.0] + [pairs[f"tau_{p}"].min() for p in protocols]))
    left.plot([lo, 1], [lo, 1], color="0.3", lw=0.8, ls="--")
    left.text(0.97, 0.99, "τ = ceiling", transform=left.transAxes, ha="right", va="top", fontsize=7, color="0.3")
    left.set_xlabel("noise ceiling of the pair")
    left.set_ylabel("Kendall τ of the pair")
    left.legend(loc="upper left", fontsize=7)
    left.set_title("Each benchmark pair")
    order = per_benchmark.sort_values(f"tau_{protocols[0]}").index
    y = np.arange(len(order))
    for k, p in enumerate(protocols):
        off = (k - (len(protocols) - 1) / 2) * 0.3
        t = per_benchmark.loc[order, f"tau_{p}"].to_numpy(float)
        c = per_benchmark.loc[order, f"ceiling_{p}"].to_numpy(float)
        color = PROTOCOL_COLORS.get(p)
        right.hlines(y + off, t, c, color=color, lw=0.8, alpha=0.7)
        right.scatter(t, y + off, s=12, color=color, label=f"{_label(p)}: mean τ")
        right.scatter(c, y + off, s=14, facecolors="none", edgecolors=color, label="noise ceiling")
    right.set_yticks(y, order)
    right.tick_params(axis="y", labelsize=7)
    right.invert_yaxis()
    right.set_xlabel("Kendall τ against the other benchmarks")
    right.set_title("Each benchmark: mean τ (dot), mean ceiling (ring)")
    _suptitle(fig, "Agreement against its noise ceiling (the τ identical true rankings would show)")
    fig.tight_layout()
    return fig


def forest(table: pd.DataFrame, xlabel: str, title: str, value: str = "gain", lo: str = "gain_lo",
           hi: str = "gain_hi", label: str = "subset"):
    """Forest plot: one row per subset with its point estimate and interval, the full sample's value
    dashed and zero solid (a gain whose interval stays right of zero holds without that subset)."""
    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE * 1.3, max(1.8, 0.24 * len(table) + 1.0)))
    y = np.arange(len(table))
    v, low, high = (table[c].to_numpy(float) for c in (value, lo, hi))
    ok = np.isfinite(low) & np.isfinite(high)
    ax.errorbar(v[ok], y[ok], xerr=np.abs(np.vstack([v[ok] - low[ok], high[ok] - v[ok]])), fmt="o", ms=3.5,
                color="0.15", ecolor="0.35", elinewidth=1, capsize=2)
    ax.plot(v[~ok], y[~ok], "o", ms=3.5, color="0.15")
    ax.axvline(0, color="0.2", lw=0.8)
    if len(table):
        ax.axvline(v[0], color="0.5", lw=0.8, ls="--")
        ends = np.concatenate([v[np.isfinite(v)], low[ok], high[ok], [0.0]])
        pad = 0.08 * (ends.max() - ends.min() or 1.0)
        ax.set_xlim(ends.min() - pad, ends.max() + pad)
    names = [f"{r[label]} ({int(r['n_models'])})" if "n_models" in table else str(r[label])
             for r in table.to_dict("records")]
    ax.set_yticks(y, names)
    ax.tick_params(axis="y", labelsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def budget_plot(table: pd.DataFrame, references: Mapping[str, tuple[float, list]] | None = None):
    """Mean tau over benchmark pairs after each epoch (validation scores), one line per learning rate
    and the best-so-far selection (thick), with interval bands; ``references``: {label: (value, [lo,
    hi])} from the test split (direct evaluation drawn at epoch 0, train-before-test dashed)."""
    from .budget import BEST

    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE, 3.4))
    lrs = [c for c in table["curve"].unique() if c != BEST]
    curves = lrs + ([BEST] if BEST in set(table["curve"]) else [])
    shades = plt.get_cmap("viridis")(np.linspace(0.35, 0.8, max(1, len(lrs))))
    for k, curve in enumerate(curves):
        g = table[table["curve"] == curve].sort_values("epoch")
        best = curve == BEST
        color = "0.1" if best else shades[k]
        ax.plot(g["epoch"], g["mean_tau"], marker="o", ms=3, lw=2 if best else 1, color=color,
                label=f"{curve} (validation)")
        ax.fill_between(g["epoch"], g["lo"], g["hi"], color=color, alpha=0.12 if best else 0.08, lw=0)
    for label, (value, ci) in (references or {}).items():
        if not np.isfinite(value):
            continue
        is_direct = label.lower().startswith("direct")
        color = PROTOCOL_COLORS.get(store_protocol(label), "0.4")
        if is_direct:
            err = None if not np.isfinite(ci).all() else [[value - ci[0]], [ci[1] - value]]
            ax.errorbar([0], [value], yerr=err, fmt="s", ms=4, color=color, capsize=2, label=f"{label} (test)")
        else:
            ax.axhline(value, color=color, ls="--", lw=1, label=f"{label} (test)")
            if np.isfinite(ci).all():
                ax.axhspan(ci[0], ci[1], color=color, alpha=0.08, lw=0)
    epochs = sorted(set(table["epoch"]) | {0})
    ax.set_xticks(epochs)
    ax.set_xlabel("fine-tuning epochs (0: none)")
    ax.set_ylabel("mean Kendall τ over benchmark pairs")
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    ax.set_title("Agreement against fine-tuning budget")
    fig.text(0.01, 0.005, "Per-epoch points rank models by validation scores (the test split is scored once,\n"
             "at the selected checkpoint); bands: 95 % bootstrap intervals over models.", fontsize=6.5,
             ha="left", va="bottom", color="0.3")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def store_protocol(label: str) -> str | None:
    """The protocol whose label (:data:`lib.plots.PROTOCOL_LABELS`) is ``label``, if any."""
    return next((p for p, text in PROTOCOL_LABELS.items() if text == label), None)


def scatter_grid(frames: Mapping[str, pd.DataFrame], x: str, y: str, hue: str | None = None,
                 xlabel: str | None = None, ylabel: str | None = None, titles: Mapping[str, str] | None = None,
                 logx: bool = False, suptitle: str | None = None):
    """One scatter panel per entry of ``frames`` (e.g. one per protocol), sharing axes labels."""
    fig, axes = plt.subplots(1, len(frames), figsize=(WIDTH_DOUBLE * 0.4 * len(frames), 3.0), squeeze=False)
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
    if suptitle:
        _suptitle(fig, suptitle)
    fig.tight_layout()
    return fig


def explained_variance(curves: Mapping[str, pd.Series], max_components: int = 10,
                       pc1_cis: Mapping[str, list] | None = None):
    """Explained-variance ratio per principal component, one line per protocol; PC1 with its interval."""
    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE, 2.6))
    for k, (p, ratio) in enumerate(curves.items()):
        r = ratio.iloc[:max_components]
        color = PROTOCOL_COLORS.get(p)
        ci = (pc1_cis or {}).get(p)
        label = f"{_label(p)}: PC1 {r.iloc[0]:.2f}{ci_text(ci)}" if len(r) else _label(p)
        ax.plot(np.arange(1, len(r) + 1), r.to_numpy(), marker="o", ms=3, label=label, color=color)
        if ci is not None and np.isfinite(ci).all():
            ax.errorbar([1 + 0.08 * (k - 0.5)], [r.iloc[0]], yerr=[[r.iloc[0] - ci[0]], [ci[1] - r.iloc[0]]],
                        fmt="none", ecolor=color, capsize=2, elinewidth=1)
    ax.set_xlabel("principal component")
    ax.set_ylabel("explained variance ratio")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    ax.set_title("Variance explained per component (standardised columns)")
    fig.tight_layout()
    return fig


def corpus_benchmark_heatmap(mats: Mapping[str, pd.DataFrame], titles: Mapping[str, str] | None = None,
                             label: str = "Kendall τ"):
    """Kendall tau of every downstream benchmark (rows) against every perplexity corpus (columns),
    one panel per setting, with one shared colour bar; the ``average`` row and column are set off."""
    first = next(iter(mats.values())).T
    n_rows, n_cols = first.shape
    width = min(WIDTH_DOUBLE, 1.5 + len(mats) * (0.42 * n_cols + 0.15) + 0.5)
    fig, axes = plt.subplots(1, len(mats) + 1, figsize=(width, 0.19 * n_rows + 1.9), squeeze=False,
                             gridspec_kw={"width_ratios": [n_cols] * len(mats) + [0.25]})
    cbar_ax = axes[0][-1]
    for k, (ax, (key, mat)) in enumerate(zip(axes[0][:-1], mats.items())):
        t = mat.T
        sns.heatmap(t, ax=ax, vmin=-1, vmax=1, center=0, cmap=TAU_CMAP, annot=True, fmt=".2f",
                    annot_kws={"fontsize": ANNOT, "color": "black"}, cbar=k == 0, cbar_ax=cbar_ax if k == 0 else None,
                    cbar_kws={"label": label}, yticklabels=k == 0, linewidths=0.3, linecolor="white")
        if "average" in t.index:
            ax.axhline(list(t.index).index("average"), color="0.2", lw=1.2)
        if "average" in t.columns:
            ax.axvline(list(t.columns).index("average"), color="0.2", lw=1.2)
        ax.set_title(textwrap.fill((titles or {}).get(key, _label(key)), 20), fontsize=8)
        ax.set_xlabel("")
        ax.set_ylabel("")
        ax.tick_params(labelsize=7)
        ax.set_xticklabels(ax.get_xticklabels(), rotation=90)
    _suptitle(fig, "Perplexity (bits per byte, lower ranks higher) against each downstream benchmark")
    fig.tight_layout()
    return fig


def group_bars(table: pd.DataFrame, group: str, value: str, hue: str = "protocol", xlabel: str | None = None,
               lo: str | None = None, hi: str | None = None, title: str | None = None):
    """Horizontal bars of ``value`` per ``group``, one colour per protocol (NaN groups left empty),
    with [``lo``, ``hi``] whiskers when given."""
    groups = list(dict.fromkeys(table[group]))
    values, errors = {}, {} if lo and hi else None
    for p, g in table.groupby(hue, sort=False):
        g = g.set_index(group).reindex(groups)
        values[p] = g[value].to_numpy(float)
        if errors is not None:
            errors[p] = g[[lo, hi]].to_numpy(float)
    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE, max(1.8, 0.32 * len(groups) + 1.1)))
    _paired_barh(ax, groups, values, errors)
    ax.set_xlabel(xlabel or value)
    ax.set_xlim(0, 1)
    if title:
        ax.set_title(title, pad=22)
    fig.tight_layout()
    return fig
