"""Figures of the analysis notebooks (04-06), drawn in the shared style of :mod:`lib.plots`.

Each function takes plain DataFrames/Series and returns a matplotlib Figure with a caption
(:func:`lib.plots.set_caption`); saving is left to ``lib.plots.savefig`` in the notebook. Every
figure carries a title that can serve as its caption's first line, and a figure that shows a headline
number shows its 95 % interval (``[lo, hi]``, a bootstrap over models, :mod:`lib.analysis.uncertainty`)
next to it. Figures are one column (:data:`lib.plots.WIDTH_SINGLE`) or the full width
(:data:`lib.plots.WIDTH_DOUBLE`) wide, their text at least 7 pt, legends outside the data, names as
the paper writes them (:func:`lib.plots.display`), and models coloured by family
(:func:`lib.plots.model_colors`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection
from matplotlib.lines import Line2D

from .. import plots
from ..plots import PROTOCOL_COLORS, PROTOCOL_LABELS, WIDTH_DOUBLE, WIDTH_SINGLE, protocol_label

TAU_CMAP = "viridis"     # Kendall tau, every heat map: one sequential scale from TAU_VMIN to 1
TAU_VMIN = -0.2
ANNOT = 7                # pt, numbers printed in cells
CELL_MIN_IN = 0.3        # a cell narrower than this gets no number (it would run into its neighbour)
MARK_COLORS = ("black", "0.45")   # models a figure marks (the rank plot's highlighted ones), in turn
MIN_CI_MODELS = 8        # a family with fewer models gets no bootstrap interval for its PC1 share


def ci_text(ci) -> str:
    """``" [0.45, 0.57]"`` for a finite interval, else ``""``."""
    if ci is None or len(ci) != 2 or not all(np.isfinite(ci)):
        return ""
    return f" [{ci[0]:.2f},\u00a0{ci[1]:.2f}]"          # no line break inside the interval


def tau_range(values) -> float:
    """The lower end of the tau colour scale: :data:`TAU_VMIN`, or lower when some tau is lower."""
    v = np.asarray(values, float)
    low = np.nanmin(v) if np.isfinite(v).any() else TAU_VMIN
    return float(min(TAU_VMIN, np.floor(low * 10) / 10))


def _label_width(names) -> float:
    return max((plots.text_width_in(n) for n in names), default=0.3)


def _lines_in(text: str, size: float) -> float:
    """Height of a (possibly multi-line) text, inches."""
    return (str(text).count("\n") + 1) * size * 1.3 / 72.0


def _heatmap_height(side: float, xlab: float, titles: list[str], title: str, width: float) -> float:
    """Figure height for square heat maps of ``side`` inches: tick labels ``xlab`` high, an axis label,
    a colour bar under them (with its label), the panel titles and the wrapped figure title."""
    panel = max(_lines_in(t, plots.FONT["title"]) for t in titles)
    sup = _lines_in(plots.wrap(title, width - 0.1, plots.FONT["suptitle"]), plots.FONT["suptitle"])
    return side + xlab + 0.3 + 0.65 + panel + sup + 0.25


def _wrap_category(name: str, width: int = 13) -> str:
    return textwrap.fill(str(name).replace("/", "/ "), width).replace("/ ", "/").replace("/\n", "/\n")


def _label_heatmap(ax, j: int, title: str, xlabel: str, ylabel: str) -> None:
    """Panel ``j`` of a row of heat maps: small tick labels, x upright, y (and its label) on the first only."""
    ax.tick_params(length=0, labelsize=plots.FONT["small"])
    ax.set_xticklabels(ax.get_xticklabels(), rotation=90)
    if j == 0:
        ax.set_yticklabels(ax.get_yticklabels(), rotation=0)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel if j == 0 else "")


def tau_heatmaps(mats: Mapping[str, pd.DataFrame], cis: Mapping[str, list] | None = None, n_models: int | None = None):
    """Side-by-side benchmark x benchmark Kendall tau heatmaps, one per protocol, each titled with
    its mean tau and interval (``cis``: {protocol: [lo, hi]}); one colour bar underneath. Cells get
    their number when wide enough for it; up to about 26 benchmarks every one is named."""
    import seaborn as sns  # here, not at the top: importing it costs a kernel 0.9 s
    first = next(iter(mats.values()))
    n, k = len(first), len(mats)
    names = plots.displays(first.index)
    lab = _label_width(names) + 0.3                          # tick labels + axis label
    side = min((WIDTH_DOUBLE - lab - 0.1 - 0.1 * k) / k, max(1.5, 0.34 * n))
    cell = side / max(n, 1)
    annotate = cell >= CELL_MIN_IN
    step = 1 if cell * 72 >= 7.8 else int(np.ceil(7.8 / (cell * 72)))       # 7-pt labels need 7.8-pt rows
    vmin = tau_range([m.to_numpy() for m in mats.values()])
    titles = {}
    for p, mat in mats.items():
        mean = np.nanmean(mat.to_numpy()[~np.eye(len(mat), dtype=bool)]) if len(mat) > 1 else np.nan
        titles[p] = plots.wrap(f"{protocol_label(p)}\nmean τ {mean:.2f}{ci_text((cis or {}).get(p))}", side)
    who = f" ({n_models} models)" if n_models else ""
    title = f"Kendall τ between the model rankings of every benchmark pair{who}"
    width = lab + k * (side + 0.1) + 0.1
    height = _heatmap_height(side, _label_width(names), list(titles.values()), title, width)
    fig, axes = plt.subplots(1, k, figsize=(width, height), squeeze=False, layout="constrained")
    for j, (ax, (p, mat)) in enumerate(zip(axes[0], mats.items())):
        labels = [t if i % step == 0 else "" for i, t in enumerate(plots.displays(mat.index))]
        sns.heatmap(mat, ax=ax, vmin=vmin, vmax=1, cmap=TAU_CMAP, square=True, annot=annotate, fmt=".2f",
                    cbar=False, xticklabels=labels, yticklabels=labels if j == 0 else False,
                    annot_kws={"fontsize": ANNOT})
        _label_heatmap(ax, j, titles[p], "benchmark", "benchmark")
    fig.colorbar(axes[0][0].collections[0], ax=list(axes[0]), location="bottom", shrink=min(0.6, 2.5 / k / side),
                 aspect=30, label="Kendall τ", pad=0.02)
    plots.title(fig, title)
    return plots.set_caption(fig, (
        f"Kendall τ between the rankings of the same models by every pair of benchmarks{who}, under direct "
        "evaluation (left) and train-before-test (right); one colour scale, the diagonal is 1 by definition. "
        "Panel titles: mean τ over all pairs with its 95 % bootstrap interval over models."))


def _paired_barh(ax, labels: list[str], values: Mapping[str, np.ndarray], errors: Mapping[str, np.ndarray] | None):
    """Horizontal bars, one colour per protocol, with optional [lo, hi] whiskers (errors[p]: n x 2);
    returns the bar handles for a figure legend."""
    y = np.arange(len(labels))
    height = 0.8 / max(1, len(values))
    handles = []
    for k, (p, v) in enumerate(values.items()):
        pos = y - 0.4 + height * (k + 0.5)
        v = np.asarray(v, float)
        handles.append(ax.barh(pos, v, height=height, color=PROTOCOL_COLORS.get(p, f"C{k}"), label=protocol_label(p)))
        if errors is not None and p in errors:
            e = np.asarray(errors[p], float)
            ok = np.isfinite(e).all(axis=1) & np.isfinite(v)
            ax.errorbar(v[ok], pos[ok], xerr=np.abs(np.vstack([v[ok] - e[ok, 0], e[ok, 1] - v[ok]])), fmt="none",
                        ecolor="0.2", elinewidth=0.7, capsize=1.5)
    ax.set_yticks(y, labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    return handles


def per_benchmark_bars(per_benchmark: pd.DataFrame, cis: Mapping[str, pd.DataFrame] | None = None):
    """Each benchmark's mean tau against the others, both protocols (horizontal bars with intervals;
    ``cis``: {protocol: benchmark x [lo, hi]}); one column wide."""
    height = max(2.0, 0.17 * len(per_benchmark) + 1.2)
    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE, height), layout="constrained")
    errors = {p: cis[p].reindex(per_benchmark.index).to_numpy(float) for p in per_benchmark} if cis else None
    handles = _paired_barh(ax, plots.displays(per_benchmark.index),
                           {p: per_benchmark[p].to_numpy(float) for p in per_benchmark}, errors)
    ax.set_xlabel("mean Kendall τ against the others")
    ax.set_ylabel("benchmark")
    plots.title(fig, "Each benchmark against the others")
    plots.legend_above(ax, handles, [h.get_label() for h in handles])
    return plots.set_caption(fig, (
        "Mean Kendall τ of each benchmark's model ranking against every other benchmark's, under both protocols "
        "(whiskers: 95 % bootstrap intervals over models); benchmarks ordered by their direct-evaluation value."))


def category_heatmaps(mats: Mapping[str, pd.DataFrame], within: Mapping[str, tuple[float, list]] | None = None,
                      counts: pd.DataFrame | None = None):
    """Category x category mean-tau heatmaps, one per protocol, with one colour bar; ``within``:
    {protocol: (within-category mean tau, [lo, hi])} for the panel titles; ``counts``: the number of
    benchmark pairs behind each cell (:func:`lib.analysis.agreement.category_counts`), printed under
    its tau, so a cell that rests on a single pair shows it. Empty cells (a category with a single
    benchmark has no pair inside it) are left grey."""
    import seaborn as sns
    first = next(iter(mats.values()))
    n, k = len(first), len(mats)
    names = [_wrap_category(c) for c in first.index]
    lab = _label_width(names) + 0.15
    side = min((WIDTH_DOUBLE - lab - 0.75 - 0.15 * k) / k, max(1.6, 0.45 * n))
    vmin = tau_range([m.to_numpy() for m in mats.values()])
    annotate = side / max(n, 1) >= CELL_MIN_IN
    titles = {}
    for p, mat in mats.items():
        title = protocol_label(p)
        if within and p in within and np.isfinite(within[p][0]):
            cells = int(np.isfinite(np.diag(mat.to_numpy(float))).sum())
            title += f"\nmean of the {cells} diagonal cells {within[p][0]:.2f}{ci_text(within[p][1])}"
        titles[p] = plots.wrap(title, side)
    heading = "Mean Kendall τ of benchmark pairs by category"
    width = lab + k * (side + 0.15) + 0.75
    height = _heatmap_height(side, _label_width(names), list(titles.values()), heading, width) - 0.5
    fig, axes = plt.subplots(1, k + 1, figsize=(width, height), squeeze=False,
                             layout="constrained", gridspec_kw={"width_ratios": [1] * k + [0.06]})
    cbar_ax = axes[0][-1]
    for j, (ax, (p, mat)) in enumerate(zip(axes[0][:-1], mats.items())):
        annot = annotate
        if annotate and counts is not None:
            n_pairs = counts.reindex(index=mat.index, columns=mat.columns)
            annot = np.vectorize(lambda t, c: "" if not np.isfinite(t) else f"{t:.2f}\n({c:.0f})")(
                mat.to_numpy(float), n_pairs.to_numpy(float))
        sns.heatmap(mat, ax=ax, vmin=vmin, vmax=1, cmap=TAU_CMAP, annot=annot, fmt=".2f" if annot is True else "",
                    square=True, cbar=j == 0, cbar_ax=cbar_ax if j == 0 else None,
                    cbar_kws={"label": "mean Kendall τ"}, annot_kws={"fontsize": ANNOT},
                    xticklabels=names, yticklabels=names if j == 0 else False)
        ax.set_facecolor("0.9")                      # NaN cells
        ax.grid(False)
        _label_heatmap(ax, j, titles[p], "category", "category")
    plots.title(fig, heading)
    empty = any(np.isnan(m.to_numpy(float)).any() for m in mats.values())
    single = [c for c in first.index if counts is not None and c in counts.index and counts.loc[c, c] == 1]
    parts = ["Mean Kendall τ over the benchmark pairs of each pair of categories, under both protocols; the diagonal "
             "holds pairs within one category"]
    if empty:
        parts.append(" (grey: a category with a single benchmark has none)")
    if counts is not None and annotate:
        parts.append(". In brackets: the number of benchmark pairs a cell averages")
        if single:
            parts.append(f"; {', '.join(single)} {'rests' if len(single) == 1 else 'rest'} on a single pair")
    parts.append(". Panel titles: the mean of the diagonal cells with its 95 % bootstrap interval over models.")
    return plots.set_caption(fig, "".join(parts))


def rank_plot(data: Mapping[str, pd.DataFrame], a: str, b: str, taus: Mapping[str, float] | None = None,
              cis: Mapping[str, list] | None = None, highlight: list[str] | tuple = ()):
    """The paper's opening figure: each model's rank on ``a`` (left) joined to its rank on ``b``
    (right), one panel per protocol; crossing lines are disagreements. Ranks run from 1 (best, top);
    the ``highlight`` models are drawn thick (:data:`MARK_COLORS`) and named in a legend below."""
    fig, axes = plt.subplots(1, len(data), figsize=(WIDTH_DOUBLE * 0.8, 3.3), squeeze=False, sharey=True,
                             layout="constrained")
    n = max(len(df) for df in data.values())
    da, db = plots.display(a), plots.display(b)
    for ax, (p, df) in zip(axes[0], data.items()):
        color = PROTOCOL_COLORS.get(p, "C0")
        ra, rb = df["rank_a"].to_numpy(float), df["rank_b"].to_numpy(float)
        ax.add_collection(LineCollection(np.stack([np.column_stack([np.zeros_like(ra), ra]),
                                                   np.column_stack([np.ones_like(rb), rb])], axis=1),
                                         colors=color, alpha=0.55, linewidths=0.9))
        ax.scatter(np.r_[np.zeros_like(ra), np.ones_like(rb)], np.r_[ra, rb], s=6, color=color, alpha=0.55,
                   edgecolors="none")
        for k, row in enumerate(df[df["model"].isin(highlight)].itertuples()):
            ax.plot([0, 1], [row.rank_a, row.rank_b], color=MARK_COLORS[k % len(MARK_COLORS)], lw=2, marker="D",
                    ms=5, zorder=3)
        ax.set_xticks([0, 1], [da, db])
        ax.set_xlim(-0.1, 1.1)
        ax.set_xlabel("benchmark")
        title = protocol_label(p)
        if taus and p in taus and np.isfinite(taus[p]):
            title += f"\nτ = {taus[p]:.2f}{ci_text((cis or {}).get(p))}"
        ax.set_title(title)
        ax.grid(axis="x", visible=False)
    step = max(1, int(np.ceil(n / 6 / 5) * 5)) if n > 10 else 1
    axes[0][0].set_yticks([1] + list(range(step, n + 1, step)) if step > 1 else list(range(1, n + 1)))
    axes[0][0].set_ylim(n + 0.5, 1 - max(0.5, 0.04 * n))      # room above rank 1: a line there is no frame
    axes[0][0].set_ylabel("rank (1 = best)")
    plots.title(fig, f"Model ranks on {da} and {db} ({n} models)")
    marked = [plots.display(m) for m in highlight]
    if marked:
        plots.legend_below(fig, [Line2D([], [], color=MARK_COLORS[k % len(MARK_COLORS)], lw=2, marker="D", ms=5)
                                 for k in range(len(marked))], marked, ncol=len(marked))
    mark = f" Thick: {', '.join(marked)}." if marked else ""
    return plots.set_caption(fig, (
        f"Each line joins a model's rank on {da} (left) to its rank on {db} (right), under direct evaluation and "
        "under train-before-test; crossing lines are models the two benchmarks order differently. Titles: Kendall τ "
        f"with its 95 % bootstrap interval over models.{mark}"))


def ceiling_plot(pairs: pd.DataFrame, per_benchmark: pd.DataFrame, protocols: tuple[str, ...]):
    """Noise ceiling: left, every benchmark pair's tau against the tau noise alone would leave (its "ceiling";
    on the diagonal all of the disagreement is noise); right, each benchmark's mean tau (filled) and mean
    noise-only tau (hollow)."""
    n = len(per_benchmark)
    fig, (left, right) = plt.subplots(1, 2, figsize=(WIDTH_DOUBLE, max(3.0, 0.16 * n + 1.6)), layout="constrained",
                                      gridspec_kw={"width_ratios": [1, 1]})
    above = {}
    for p in protocols:
        ok = pairs.dropna(subset=[f"tau_{p}", f"ceiling_{p}"])
        over = ok[f"tau_{p}"] > ok[f"ceiling_{p}"]
        above[p] = (int(over.sum()), len(ok))
        left.scatter(ok[f"ceiling_{p}"], ok[f"tau_{p}"], s=9, alpha=0.6, color=PROTOCOL_COLORS.get(p),
                     marker=plots.PROTOCOL_MARKERS.get(p, "o"), edgecolors="none")
    lo = float(np.nanmin([0.0] + [pairs[f"tau_{p}"].min() for p in protocols]))
    left.plot([lo, 1], [lo, 1], color="0.3", lw=0.8, ls="--")
    left.set_xlabel("τ expected from noise alone (estimate)")
    left.set_ylabel("Kendall τ of the pair")
    left.set_title("Each benchmark pair")
    order = per_benchmark.sort_values(f"tau_{protocols[0]}").index
    y = np.arange(len(order))
    for k, p in enumerate(protocols):
        off = (k - (len(protocols) - 1) / 2) * 0.3
        t = per_benchmark.loc[order, f"tau_{p}"].to_numpy(float)
        c = per_benchmark.loc[order, f"ceiling_{p}"].to_numpy(float)
        color = PROTOCOL_COLORS.get(p)
        right.hlines(y + off, t, c, color=color, lw=0.8, alpha=0.7)
        right.scatter(t, y + off, s=12, color=color, marker=plots.PROTOCOL_MARKERS.get(p, "o"))
        right.scatter(c, y + off, s=14, facecolors="none", edgecolors=color, marker=plots.PROTOCOL_MARKERS.get(p, "o"))
    right.set_yticks(y, plots.displays(order))
    right.set_ylim(len(order) - 0.5, -0.5)
    right.set_xlabel("Kendall τ against the other benchmarks")
    right.set_ylabel("benchmark")
    right.set_title("Each benchmark: mean τ, noise-only τ")
    handles = [Line2D([], [], color=PROTOCOL_COLORS.get(p), marker=plots.PROTOCOL_MARKERS.get(p, "o"), lw=0, ms=4)
               for p in protocols]
    labels = [f"{protocol_label(p)} ({above[p][0]} of {above[p][1]} pairs above the line)" for p in protocols]
    handles += [Line2D([], [], color="0.3", marker="o", lw=0, ms=4),
                Line2D([], [], color="0.3", marker="o", mfc="none", lw=0, ms=4),
                Line2D([], [], color="0.3", ls="--", lw=0.8)]
    labels += ["mean τ (right)", "mean noise-only τ (right)", "τ = noise-only τ (left)"]
    plots.legend_below(fig, handles, labels, ncol=2)
    plots.title(fig, "Agreement against the agreement noise alone would leave")
    return plots.set_caption(fig, (
        "The noise-only τ (often called a noise ceiling; an estimate, so pairs can lie above it) is the Kendall τ two "
        "benchmarks would show if they ranked the models identically and differed only by measurement noise; it is "
        "estimated from each benchmark's split-half reliability (lib.analysis.noise). Left: every benchmark pair's τ "
        "against its noise-only τ (on the dashed diagonal all disagreement is noise). Both are estimates, so a pair "
        "whose disagreement is all noise falls above the line "
        "about half the time; a benchmark whose pairs lie well above it has its reliability underestimated, as "
        "where halves are drawn from standard errors that treat each model's noise as independent of the others' "
        "although all models answer the same items, which matters most where models differ by little more than "
        "that noise (a benchmark near its noise-only τ). Right: each benchmark's "
        "mean τ against the others (filled) and its mean noise-only τ (hollow), both protocols (circles: direct "
        "evaluation, squares: train-before-test)."))


def forest(table: pd.DataFrame, xlabel: str, title: str):
    """Forest plot: one row per subset with its point estimate and interval, the full sample's value
    dashed and zero solid (a gain whose interval stays right of zero holds without that subset)."""
    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE, max(1.9, 0.22 * len(table) + 1.1)), layout="constrained")
    y = np.arange(len(table))
    v, low, high = (table[c].to_numpy(float) for c in ("gain", "gain_lo", "gain_hi"))
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
    names = [f"{_subset(r['subset'])} ({int(r['n_models'])})" if "n_models" in table else _subset(r["subset"])
             for r in table.to_dict("records")]
    ax.set_yticks(y, names)
    ax.set_ylim(len(table) - 0.5, -0.5)
    ax.set_xlabel(plots.wrap(xlabel, WIDTH_SINGLE * 0.6, plots.FONT["base"]))
    ax.set_ylabel("models (number)")
    plots.title(fig, title)
    return plots.set_caption(fig, (
        f"{title}: the estimate on each subset of models with its paired 95 % bootstrap interval; dashed: all "
        "models, solid: no gain. A subset whose interval stays right of zero keeps the gain without the models "
        "it leaves out."))


def _subset(text) -> str:
    """``without gpt_neox`` -> ``without GPT-NeoX``: family names in subset labels as figures show them."""
    head, _, rest = str(text).partition(" ")
    return f"{head} {plots.display(rest)}" if head == "without" and rest else str(text)


def budget_plot(table: pd.DataFrame, references: Mapping[str, tuple[float, list]] | None = None):
    """Mean tau over benchmark pairs after each epoch (validation scores), one line per learning rate
    and the best-so-far selection (thick), with interval bands; ``references``: {label: (value, [lo,
    hi])} from the test split (direct evaluation drawn at epoch 0, train-before-test dashed)."""
    from .budget import BEST

    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE, 3.0), layout="constrained")
    lrs = [c for c in table["curve"].unique() if c != BEST]
    curves = lrs + ([BEST] if BEST in set(table["curve"]) else [])
    shades = plt.get_cmap("viridis")(np.linspace(0.3, 0.8, max(1, len(lrs))))
    markers = "os^Dvp"          # four or more rates are too many shades to tell apart in greyscale print
    for k, curve in enumerate(curves):
        g = table[table["curve"] == curve].sort_values("epoch")
        best = curve == BEST
        color = "0.1" if best else shades[k]
        ax.plot(g["epoch"], g["mean_tau"], marker="o" if best else markers[k % len(markers)], ms=3,
                lw=3.5 if best else 1, color="0.7" if best else color, zorder=1.5 if best else 2,
                label=f"{curve.replace('lr=', 'lr = ')} (validation)")   # best: under
        ax.fill_between(g["epoch"], g["lo"], g["hi"], color=color, alpha=0.1 if best else 0.06, lw=0)
    label_colors = {PROTOCOL_LABELS.get(p): color for p, color in PROTOCOL_COLORS.items()}
    for label, (value, ci) in (references or {}).items():
        if not np.isfinite(value):
            continue
        is_direct = label.lower().startswith("direct")
        color = label_colors.get(label, "0.4")
        if is_direct:
            err = None if not np.isfinite(ci).all() else [[value - ci[0]], [ci[1] - value]]
            ax.errorbar([0], [value], yerr=err, fmt="s", ms=4, color=color, capsize=2, label=f"{label} (test)")
        else:
            ax.axhline(value, color=color, ls="--", lw=1, label=f"{label} (test)")
            if np.isfinite(ci).all():
                ax.axhspan(ci[0], ci[1], color=color, alpha=0.06, lw=0)
    epochs = sorted(set(table["epoch"]) | {0})
    ax.set_xticks(epochs)
    ax.set_xlabel("fine-tuning epochs (0: none)")
    ax.set_ylabel("mean Kendall τ\nover benchmark pairs")      # one line is taller than the panel
    handles, labels = ax.get_legend_handles_labels()
    plots.legend_below(fig, handles, labels, ncol=2)
    plots.title(fig, "Agreement against fine-tuning budget")
    return plots.set_caption(fig, (
        "Mean Kendall τ over benchmark pairs when models are ranked after each fine-tuning epoch, for each learning "
        "rate and for the best checkpoint so far (thick grey, under the learning rate it follows). Per-epoch points "
        "rank models by validation scores (the "
        "test split is scored once, at the selected checkpoint); direct evaluation (epoch 0) and the final "
        "train-before-test value are from the test split. Bands: 95 % bootstrap intervals over models."))


def _family_styles(models, store):
    """(colour per model, family per model) from lib.metadata; without metadata one neutral colour."""
    styles = plots.model_styles(models, store)
    return styles["color"].to_dict(), styles["family"].dropna().to_dict()


_KIND_LABELS = {"base": "base model", "instruct": "instruction-tuned", "prepared": "prepared for the test tasks"}


def scatter_grid(frames: Mapping[str, pd.DataFrame], x: str, y: str, hue: str | None = None,
                 xlabel: str | None = None, ylabel: str | None = None, titles: Mapping[str, str] | None = None,
                 logx: bool = False, suptitle: str | None = None, store=None, xfactor: float = 1.0,
                 statistic: str = "Kendall τ"):
    """One scatter panel per entry of ``frames`` (e.g. one per protocol), sharing both axes; a point per
    model (column ``model``) in its family's colour (sizes as shades, :func:`lib.plots.model_colors`;
    ``store`` holds the metadata of self-built models), hollow where ``hue`` (e.g. ``type``:
    :func:`lib.metadata.model_types`) is not its first value (``base``). ``xfactor`` scales x (e.g. 1e21
    to show FLOPs from ``flops_1e21``); ``statistic`` names what the panel titles give, for the caption."""
    k = len(frames)
    fig, axes = plt.subplots(1, k, figsize=(WIDTH_DOUBLE if k > 1 else WIDTH_SINGLE, 2.9), squeeze=False,
                             sharex=True, sharey=True, layout="constrained")
    def names(df):
        return list(df["model"]) if "model" in df else list(df.index)

    models = [m for df in frames.values() for m in names(df)]
    colors, family = _family_styles(models, store)
    kinds = sorted({v for df in frames.values() if hue and hue in df for v in df[hue].dropna()},
                   key=lambda v: (v != "base", str(v)))
    for ax, (key, df) in zip(axes[0], frames.items()):
        if df.empty:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        else:
            for kind_i, kind in enumerate(kinds or [None]):
                part = df if kind is None else df[df[hue] == kind]
                shapes = [plots.family_marker(family.get(m)) for m in names(part)]
                for shape in dict.fromkeys(shapes):
                    one = part[[s == shape for s in shapes]]
                    c = [colors.get(m, "0.35") for m in names(one)]
                    ax.scatter(one[x] * xfactor, one[y], s=16, linewidths=0.9, marker=shape,
                               facecolors=c if kind_i == 0 else "none", edgecolors=c)
        if logx:
            ax.set_xscale("log")
            _narrow_log_ticks(ax, [v * xfactor for df in frames.values() if x in df for v in df[x].dropna()])
        ax.set_xlabel(xlabel or x)
        ax.set_title(plots.wrap((titles or {}).get(key, protocol_label(key)), fig.get_figwidth() / k - 0.2))
    axes[0][0].set_ylabel(ylabel or y)
    fams = sorted({family[m] for m in models if m in family}, key=plots.display)
    handles, labels = plots.family_handles(fams)
    for kind_i, kind in enumerate(kinds):
        handles.append(Line2D([], [], marker="o", lw=0, color="0.1", mfc="0.1" if kind_i == 0 else "none", ms=5))
        labels.append(_KIND_LABELS.get(kind, str(kind)))
    if handles:
        plots.legend_below(fig, handles, labels)
    if suptitle:
        plots.title(fig, suptitle)
    shades = " (sizes as shades: darker is larger)" if fams else ""
    kind_text = (f"; filled: {_KIND_LABELS.get(kinds[0], kinds[0])}, hollow: "
                 f"{', '.join(_KIND_LABELS.get(k, str(k)) for k in kinds[1:])}" if len(kinds) > 1 else "")
    return plots.set_caption(fig, (
        f"{suptitle or 'Scatter per setting'}: one point per model, coloured by model family{shades}{kind_text}. "
        f"Panel titles: the setting with its {statistic} and 95 % bootstrap interval over models."))


def _narrow_log_ticks(ax, values) -> None:
    """A log axis whose values span less than a decade gets three plain ticks, and one spanning less
    than three decades no minor tick labels (matplotlib labels the minor ticks of a narrow log axis,
    and the labels run into each other)."""
    import matplotlib.ticker as mticker

    values = [v for v in values if v > 0]
    if values and max(values) / min(values) < 10:
        ax.xaxis.set_major_locator(mticker.MaxNLocator(nbins=3))
        ax.xaxis.set_major_formatter(mticker.StrMethodFormatter("{x:.3g}"))   # a lambda cannot be pickled
    if values and max(values) / min(values) < 1000:   # under three decades matplotlib labels minor ticks too
        ax.xaxis.set_minor_formatter(mticker.NullFormatter())


def explained_variance(curves: Mapping[str, pd.Series], max_components: int = 10,
                       pc1_cis: Mapping[str, list] | None = None):
    """Explained-variance ratio per principal component, one line per protocol; PC1 with its interval."""
    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE, 2.8), layout="constrained")
    handles, labels = [], []
    for k, (p, ratio) in enumerate(curves.items()):
        r = ratio.iloc[:max_components]
        color = PROTOCOL_COLORS.get(p)
        ci = (pc1_cis or {}).get(p)
        labels.append(f"{protocol_label(p)}: PC1 {r.iloc[0]:.2f}{ci_text(ci)}" if len(r) else protocol_label(p))
        handles += ax.plot(np.arange(1, len(r) + 1), r.to_numpy(), marker="o", ms=3, color=color)
        if ci is not None and np.isfinite(ci).all():     # drawn as it is: a percentile interval over few
            x = 1 + 0.08 * (k - 0.5)                       # models need not hold its estimate
            ax.plot([x, x], ci, color=color, lw=1, marker="_", ms=5)
    ax.set_xlabel("principal component")
    ax.set_ylabel("explained variance ratio")
    ax.set_ylim(0, 1)
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    plots.legend_below(fig, handles, labels, ncol=1)
    plots.title(fig, "Variance explained per principal component")
    return plots.set_caption(fig, (
        "Share of the variance of the model × benchmark score matrix (columns standardised) explained by each "
        "principal component, under both protocols; PC1 with its 95 % bootstrap interval over models."))


def corpus_benchmark_heatmap(mats: Mapping[str, pd.DataFrame], titles: Mapping[str, str] | None = None):
    """Kendall tau of every downstream benchmark (rows) against every perplexity corpus (columns),
    one panel per setting, with one shared colour bar (the tau scale of every heat map); the
    ``average`` row and column are set off."""
    import seaborn as sns
    first = next(iter(mats.values())).T
    n_rows, n_cols = first.shape
    rows = plots.displays(first.index)
    cols = plots.displays(first.columns)
    lab = _label_width(rows) + 0.15
    k = len(mats)
    cell = min(0.42, (WIDTH_DOUBLE - lab - 0.8 - 0.12 * k) / max(1, k * n_cols))
    col_h = _label_width(cols) + 0.15
    vmin = tau_range([m.to_numpy() for m in mats.values()])
    annotate = cell >= CELL_MIN_IN
    fig, axes = plt.subplots(1, k + 1, figsize=(lab + k * (cell * n_cols + 0.12) + 0.8,
                                                max(2.2, 0.17 * n_rows + col_h + 1.0)),
                             squeeze=False, layout="constrained",
                             gridspec_kw={"width_ratios": [n_cols] * k + [0.3]})
    cbar_ax = axes[0][-1]
    for j, (ax, (key, mat)) in enumerate(zip(axes[0][:-1], mats.items())):
        t = mat.T
        sns.heatmap(t, ax=ax, vmin=vmin, vmax=1, cmap=TAU_CMAP, annot=annotate, fmt=".2f",
                    annot_kws={"fontsize": ANNOT}, cbar=j == 0, cbar_ax=cbar_ax if j == 0 else None,
                    cbar_kws={"label": "Kendall τ"}, xticklabels=plots.displays(t.columns),
                    yticklabels=plots.displays(t.index) if j == 0 else False, linewidths=0.3, linecolor="white")
        if "average" in t.index:
            ax.axhline(list(t.index).index("average"), color="white", lw=2)
        if "average" in t.columns:
            ax.axvline(list(t.columns).index("average"), color="white", lw=2)
        title = plots.wrap((titles or {}).get(key, protocol_label(key)), cell * n_cols + 0.1, plots.FONT["title"])
        _label_heatmap(ax, j, title, "perplexity corpus", "downstream benchmark")
    plots.title(fig, "Perplexity against each downstream benchmark")
    return plots.set_caption(fig, (
        "Kendall τ between the model ranking by bits per byte on each perplexity corpus (lower ranks higher) and "
        "the ranking by each downstream benchmark, in three settings: both before fine-tuning, both after, and "
        "perplexity before against downstream scores after; ‘average’ rows and columns use the mean over "
        "benchmarks or corpora."))


def family_pc1_bars(family: pd.DataFrame, n_benchmarks: int):
    """06's PC1 share within each model family (:func:`lib.analysis.structure.by_group`'s table with
    intervals), each family with its number of models and the share its PC1 has by construction: the
    centred scores of n models on k benchmarks have at most min(n - 1, k) components, so PC1 carries at
    least 1 / min(n - 1, k) of the variance (GPT-2's 4 models: a third)."""
    groups = list(dict.fromkeys(family["group"]))
    size = family.drop_duplicates("group").set_index("group")["n_models"]
    floor = [1 / max(1, min(int(size[g]) - 1, n_benchmarks)) for g in groups]
    few = family["n_models"] < MIN_CI_MODELS          # a bootstrap over a handful of models says little
    family = family.assign(lo=family["lo"].mask(few), hi=family["hi"].mask(few))
    values, errors = {}, {}
    for p, g in family.groupby("protocol", sort=False):
        g = g.set_index("group").reindex(groups)
        values[p], errors[p] = g["pc1"].to_numpy(float), g[["lo", "hi"]].to_numpy(float)
    labels = [f"{label} ({int(size[g])})" for label, g in zip(plots.displays(groups), groups)]
    fig, ax = plt.subplots(figsize=(WIDTH_SINGLE, max(1.9, 0.3 * len(groups) + 1.3)), layout="constrained")
    handles = _paired_barh(ax, labels, values, errors)
    handles += ax.plot(floor, list(range(len(groups))), lw=0, marker="|", ms=11, mew=1.6, color="0.15",
                       label="lowest possible")
    ax.set_xlabel("PC1 explained variance ratio")
    ax.set_ylabel("model family (models)")
    ax.set_xlim(0, 1)
    plots.legend_above(ax, handles, [h.get_label() for h in handles])
    plots.title(fig, "PC1 share within each model family")
    return plots.set_caption(fig, (
        "PC1 share within each model family: PC1 explained variance ratio per model family (number of models in "
        "brackets), under both protocols (whiskers: 95 % bootstrap intervals). A family of n models has at most "
        "n − 1 components, so its PC1 share is at least 1 / (n − 1) by construction (the black ticks); compare the "
        f"families with that floor in mind. Families of fewer than {MIN_CI_MODELS} models get no interval."))
