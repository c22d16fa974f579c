"""Figures of notebook 07 in the shared style of :mod:`lib.plots` (the notebook saves them), methods
named by their registry labels, benchmarks and losses as the papers name them."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .. import plots
from ..outputs import est, f
from .experiments import METHODS, SELECTIONS
from .methods import PAPER_RHO, method_label

METRIC_LABELS = {"spearman": "Spearman ρ", "pair_acc": "pairwise accuracy"}
SELECTION_LABELS = {"source_random": "random", "source_kcenter": "k-center (label-free)",
                    "source_spread": "spread over target (uses labels)"}
# Test groups (larger and larger models) and source selections: greys and one qualitative set that
# no model family uses, so these colours never read as families or protocols. Each group and each
# selection also has its own marker (and, for bars, hatch), so they stay apart in greyscale print.
GROUP_COLORS = ("#1a1a1a", "#7a7a7a", "#4d4d4d", "#b0b0b0")
GROUP_MARKERS = ("o", "s", "^", "D")
GROUP_FILLS = ("full", "none", "full", "none")
GROUP_HATCHES = ("", "////", "....", "xxxx")
GROUP_BARS = tuple({"facecolor": face, "edgecolor": "0.15", "hatch": hatch}
                   for face, hatch in zip(("#1a1a1a", "white", "#c8c8c8", "white"), GROUP_HATCHES))
SELECTION_COLORS = ("#1b9e77", "#d95f02", "#7570b3")
SELECTION_MARKERS = ("o", "s", "^")
SELECTION_LINES = ("-", "--", ":")
PAPER_COLOR = "#c44e52"
NEUTRAL = "#5f6f7f"


def _group_style(k: int) -> dict:
    """Marker, fill and colour of the k-th test group (errorbar / Line2D keywords)."""
    color = GROUP_COLORS[k % len(GROUP_COLORS)]
    fill = GROUP_FILLS[k % len(GROUP_FILLS)]
    return {"color": color, "marker": GROUP_MARKERS[k % len(GROUP_MARKERS)], "mec": color,
            "mfc": color if fill == "full" else "white"}


def method_bars(main: dict, metrics=("spearman", "pair_acc"), ref: str = "no_alignment"):
    """Rows: metrics; left column: each method's value on each test group (mean over seeds, whiskers
    = 95 % bootstrap interval over test models); right column: its paired difference to ``ref``
    (same bootstrap resamples; whiskers = 95 % interval)."""
    groups = list(main)[::-1]                                     # largest test models first
    methods = [m for m in METHODS if any(m in main[g] for g in groups)]
    n = len(methods)
    fig, axes = plt.subplots(len(metrics), 2, figsize=(plots.WIDTH_DOUBLE, 0.26 * n * len(metrics) + 1.6),
                             sharey=True, squeeze=False, layout="constrained")
    height = 0.8 / max(len(groups), 1)
    ticks = np.arange(n) + height * (len(groups) - 1) / 2
    ref_label = method_label(ref).split(" (")[0].lower()
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
                ax.errorbar(v, y, xerr=[lo, hi], fmt="none", capsize=2, lw=0.9, ecolor=_group_style(k)["color"])
                ax.plot(v, y, lw=0, ms=4, **_group_style(k))
                if col == 0 and metric == "spearman":                 # the paper's value, where it reports one
                    paper = [(i, PAPER_RHO.get(g, {}).get(m)) for i, m in enumerate(methods)]
                    paper = [(i, p) for i, p in paper if p is not None]
                    if paper:
                        ax.plot([p for _, p in paper], [y[i] for i, _ in paper], lw=0, marker="*", ms=7,
                                color=PAPER_COLOR, mec="0.1", mew=0.4)
            ax.axvline(0.5 if (col == 0 and metric == "pair_acc") else 0.0, color="0.4", lw=0.8, ls=":")
            ax.set_xlabel(METRIC_LABELS.get(metric, metric) if col == 0
                          else f"Δ {METRIC_LABELS.get(metric, metric)} vs {ref_label}")
            if row == 0:
                ax.set_title("value on the test models" if col == 0 else "paired difference (same resamples)")
        axes[row][0].set_yticks(ticks, [method_label(m) for m in methods])
        axes[row][0].set_ylabel("method")
        for ax in axes[row]:                     # BenchAlign's rows set off: the method the figure is about
            for i in (i for i, m in enumerate(methods) if m == "benchalign"):
                ax.axhspan(i - 0.4, i + height * (len(groups) - 1) + 0.4, color="0.9", lw=0, zorder=0)
    for label in (t for row in axes for t in row[0].get_yticklabels()):
        label.set_fontweight("bold" if label.get_text() == method_label("benchalign") else "normal")
    axes[0][0].set_ylim(n - 0.5 + height * (len(groups) - 1), -0.5)      # shared y: registry order from the top
    handles = [Line2D([], [], ms=4, lw=0.9, **_group_style(k)) for k in range(len(groups))]
    labels = [f"{g} ({main[g][methods[0]]['n_models']} models)" if methods else g for g in groups]
    if any(PAPER_RHO.get(g) for g in groups):
        handles.append(Line2D([], [], lw=0, marker="*", ms=7, color=PAPER_COLOR, mec="0.1", mew=0.4))
        labels.append("the paper's rho (its data and target)")
    plots.legend_below(fig, handles, labels, title="test models")
    plots.title(fig, "BenchAlign and the baselines on the unseen larger models")
    return plots.set_caption(fig, (
        "Each method's rank agreement with the target ranking on the test models (BenchAlign in bold on grey; left: "
        "value, mean over seeds; "
        f"right: paired difference to {ref_label} on the same bootstrap resamples), in Spearman ρ (top) and pairwise "
        "accuracy (bottom); whiskers: 95 % bootstrap intervals over the test models; dotted: no agreement (left) or "
        "no difference (right). Stars: the paper's rho where it reports one (reward-model preferences on its own "
        "4,364 models; ours: the IFEval ranking)."))


def learning_curve(protocol: dict):
    """Validation loss over Adam steps (mean over the folds; one line per seed) with each seed's
    chosen step marked; the training loss of the folds dashed."""
    curve = protocol["curve"]
    steps = np.array(curve["step"])
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 2.7), layout="constrained")
    chosen = protocol["chosen_steps"].get(curve["method"], [])
    for s, (val, train) in enumerate(zip(curve["val_loss"], curve["train_loss"])):
        val = np.array([np.nan if v is None else v for v in val], dtype=float)
        train = np.array([np.nan if v is None else v for v in train], dtype=float)
        ax.plot(steps, val, color=NEUTRAL, lw=0.9, alpha=0.85)
        ax.plot(steps, train, color="#d95f02", lw=0.8, ls="--", alpha=0.85)
        if s < len(chosen) and chosen[s] in steps:
            i = int(np.flatnonzero(steps == chosen[s])[0])
            ax.plot(steps[i], val[i], "o", color="0.1", ms=4)
    ax.axvline(0, color="0.5", lw=0.6, ls=":")
    ax.set_xlabel("Adam steps (0 = plain accuracy)")
    loss = plots.display(protocol.get("loss", "ranking"))
    ax.set_ylabel(f"{loss} loss")
    med = int(np.median(chosen)) if chosen else None
    handles = [Line2D([], [], color=NEUTRAL, lw=0.9), Line2D([], [], color="#d95f02", lw=0.8, ls="--"),
               Line2D([], [], color="0.1", marker="o", lw=0, ms=4)]
    plots.legend_below(fig, handles, ["validation (mean of folds)", "training (mean of folds)", "chosen step"])
    plots.title(fig, f"{protocol['folds']}-fold cross-validation of the number of Adam steps ({len(chosen)} seeds, "
                     f"median chosen step {med})" if med is not None else "Cross-validation over the source models")
    return plots.set_caption(fig, (
        f"How BenchAlign's number of Adam steps is chosen: the {loss} loss on the held-out folds of the source "
        "models (solid, mean over folds, one line per seed) and on the training folds (dashed) after each step; "
        "dots mark each seed's chosen step (seeds that chose the same step share a dot; the title gives the median "
        "over seeds), step 0 is plain accuracy."))


def weight_hist(item_benchmark, weights: list[np.ndarray]):
    """The learned item weights (seed mean) by benchmark: one row per benchmark, a box (quartiles,
    whiskers at the 5th and 95th percentiles) over every item drawn as a dot, the benchmark's total
    weight in its label, and the uniform weight (1 / items) dashed."""
    W = np.mean(np.array(weights), axis=0)
    item_benchmark = np.asarray(item_benchmark)
    names = list(dict.fromkeys(item_benchmark.tolist()))
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 0.42 * len(names) + 1.3), layout="constrained")
    rng = np.random.default_rng(0)
    for i, b in enumerate(names):
        w = W[item_benchmark == b]
        ax.scatter(w, i + rng.uniform(-0.28, 0.28, len(w)), s=3, color=NEUTRAL, alpha=0.35, edgecolors="none",
                   rasterized=len(w) > 2000)
        ax.boxplot([w], positions=[i], orientation="horizontal", widths=0.6, whis=(5, 95), showfliers=False,
                   patch_artist=True,
                   boxprops={"facecolor": "none", "edgecolor": "0.1", "lw": 0.9},
                   medianprops={"color": "0.1", "lw": 1.2}, whiskerprops={"color": "0.1", "lw": 0.9},
                   capprops={"color": "0.1", "lw": 0.9})
    ax.axvline(0.0, color="0.6", lw=0.6)
    ax.set_yticks(range(len(names)), [f"{plots.display(b)}\nΣ = {f(W[item_benchmark == b].sum())}" for b in names])
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.xaxis.set_major_locator(plt.MaxNLocator(5))
    ax.set_xlabel(f"learned item weight w / d (seed mean)\nuniform weight: 1 / {len(W):,}")
    ax.set_ylabel("benchmark (Σ its weights)")
    plots.title(fig, f"BenchAlign item weights by benchmark (all items: Σ = {f(W.sum())}, "
                        f"Σ|w| = {np.abs(W).sum():.1f})")
    return plots.set_caption(fig, (
        "The weight BenchAlign learns for each item (mean over seeds), one row per benchmark: every item a dot, the "
        "box its quartiles, whiskers the 5th and 95th percentiles; Σ is the benchmark's summed weight (0.00: under "
        "0.005 either way); plain accuracy's uniform weight, 1 / items, is in the axis label (at this scale it lies "
        "on zero). Weights are divided by d = √(((Σw)² + 0.01 (Σ|w|)²) / 1.01), which is Σw "
        "for non-negative weights but not in general: these do not sum to 1 (the title gives their sums)."))


def ablation_bars(ablation: dict):
    """Spearman rho by ranking loss and test group (``{group: {loss: record}}`` of the summary: the
    mean over seeds, whiskers = 95 % bootstrap interval over the test models), horizontal bars told
    apart by grey and hatch."""
    groups = list(ablation)[::-1]                                 # largest test models first
    losses = sorted(ablation[groups[0]], key=lambda loss: -ablation[groups[0]][loss]["spearman"]) if groups else []
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 0.3 * len(losses) * max(1, len(groups)) * 0.8 + 1.6),
                           layout="constrained")
    height = 0.8 / max(1, len(groups))
    handles, lows, ends = [], [0.0], [1.0]
    for k, g in enumerate(groups):
        y = np.arange(len(losses)) - 0.4 + height * (k + 0.5)
        recs = [ablation[g].get(loss, {}) for loss in losses]
        mean = np.array([np.nan if r.get("spearman") is None else r["spearman"] for r in recs], dtype=float)
        ci = [r.get("spearman_ci") for r in recs]
        lo = np.nan_to_num([mean[i] - c[0] if c else 0.0 for i, c in enumerate(ci)])
        hi = np.nan_to_num([c[1] - mean[i] if c else 0.0 for i, c in enumerate(ci)])
        style = GROUP_BARS[k % len(GROUP_BARS)]
        handles.append(Patch(**style))
        ax.barh(y, mean, height=height, xerr=[lo, hi], capsize=2, lw=0.8, error_kw={"elinewidth": 0.8, "ecolor": "0.1"},
                **style)
        lows.append(float(np.nanmin(mean - lo)) if np.isfinite(mean).any() else 0.0)
        ends.append(float(np.nanmax(mean + hi)) if np.isfinite(mean).any() else 1.0)
    ax.set_yticks(np.arange(len(losses)), plots.displays(losses))
    ax.set_ylim(len(losses) - 0.5, -0.5)
    ax.set_xlim(min(lows) - 0.05, max(ends) + 0.02)
    ax.axvline(0, color="0.3", lw=0.7)
    ax.set_xlabel("Spearman ρ on the test models")
    ax.set_ylabel("ranking loss")
    plots.legend_below(fig, handles, [str(g) for g in groups], title="test models")
    plots.title(fig, "Which ranking loss? (same protocol)")
    return plots.set_caption(fig, (
        "BenchAlign trained with each ranking loss under the same protocol: Spearman ρ with the target ranking on "
        "each group of test models (bars: mean over seeds; whiskers: 95 % bootstrap interval over the test models, "
        "the same resamples as the method comparison)."))


def needs_curves(df: pd.DataFrame, group: str, references: dict[str, float] | None = None):
    """Rho on ``group`` against the number of source models (each selection of :data:`SELECTIONS`)
    and of items (random subsets), BenchAlign next to no alignment (mean ± std over seeds);
    ``references`` (label -> rho, e.g. the flag baselines of the main comparison) as dash-dotted lines."""
    fig, axes = plt.subplots(1, 2, figsize=(plots.WIDTH_DOUBLE, 3.4), sharey=True, layout="constrained")
    sub = df[df.group == group]
    for k, (label, value) in enumerate((references or {}).items()):
        if value is not None:
            for a in axes:
                a.axhline(value, color="0.15", lw=0.9, ls=(0, (5, 2, 1, 2)) if k == 0 else (0, (1, 1)),
                          label=label if a is axes[0] else None)
    ax = axes[0]
    for k, kind in enumerate(SELECTIONS):
        d = sub[(sub.kind == kind) & (sub.method == "benchalign")].groupby("n")["spearman"].agg(["mean", "std"])
        if len(d):
            ax.errorbar(d.index * (1 + 0.03 * (k - 1)), d["mean"], yerr=d["std"], ms=3.5, capsize=2,
                        marker=SELECTION_MARKERS[k % 3], ls=SELECTION_LINES[k % 3],
                        color=SELECTION_COLORS[k % len(SELECTION_COLORS)],
                        label=f"BenchAlign, {SELECTION_LABELS.get(kind, kind)}")
    plain = sub[(sub.kind.isin(list(SELECTIONS))) & (sub.method == "no_alignment")]
    if len(plain):
        ax.axhline(plain.spearman.mean(), color="0.3", ls="--", lw=0.9, label="no alignment")
    ax.set_title("k source models, chosen three ways")
    ax.set_xlabel("number of source models")
    d_items = sub[sub.kind == "items"]
    for method, style, color in (("benchalign", "-o", SELECTION_COLORS[0]), ("no_alignment", "--s", "0.3")):
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
        handles, labels = a.get_legend_handles_labels()
        if handles:
            a.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
    axes[0].set_ylabel(f"Spearman ρ ({group})")
    plots.title(fig, f"How much data BenchAlign needs (test models: {group})")
    return plots.set_caption(fig, (
        f"Spearman ρ with the target ranking on the test models ({group}) as BenchAlign gets more data: left, k "
        "source models chosen at random, by k-center selection on their item responses (before any label is known) "
        "or spread over the target's range (which uses the labels); right, random subsets of items with all source "
        "models, next to plain accuracy on the same items. Mean ± one standard deviation over seeds."))


def cross_weights(weights: dict[str, dict], comparison: dict | None = None):
    """Learned weight of each direct-evaluation benchmark (mean ± std over seeds), the plain mean's
    uniform weight dashed; with ``comparison`` (07's cross-paper records) each one's Spearman rho on
    the test models in the legend."""
    s = pd.DataFrame(weights).T.sort_values("mean", ascending=False)
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 0.15 * len(s) + 1.5), layout="constrained")
    ax.barh(np.arange(len(s)), s["mean"], xerr=s["std"], capsize=1.5, color=NEUTRAL,
            error_kw={"elinewidth": 0.8, "ecolor": "0.1"})
    ax.set_yticks(np.arange(len(s)), plots.displays(s.index))
    ax.set_ylim(len(s) - 0.5, -0.5)
    ax.axvline(0.0, color="0.3", lw=0.7)
    uniform = 1.0 / len(s)
    ax.axvline(uniform, color="0.1", lw=0.9, ls="--")
    rho = {m: f": test rho {est(r['spearman'], r['spearman_ci'])}" for m, r in (comparison or {}).items()}
    ax.set_xlabel(f"learned weight w / d (Σ = {s['mean'].sum():.2f})")
    ax.set_ylabel("direct-evaluation benchmark")
    plots.legend_below(fig, [Patch(color=NEUTRAL), Line2D([], [], color="0.1", lw=0.9, ls="--")],
                       [f"learned weights{rho.get('benchalign', '')}",
                        f"plain mean (1/{len(s)} = {uniform:.3f}){rho.get('no_alignment', '')}"], ncol=1)
    plots.title(fig, "Direct-evaluation benchmarks weighted to predict the train-before-test ranking")
    return plots.set_caption(fig, (
        "BenchAlign across the two papers: the weight learned for each benchmark's direct-evaluation score so that "
        "the weighted mean reproduces the train-before-test ranking (mean ± one standard deviation over seeds; "
        "weights are divided by d = √(((Σw)² + 0.01 (Σ|w|)²) / 1.01), not by their sum, so they need not sum to 1: "
        "the axis label gives their sum; dashed: the plain mean's uniform weight). The legend gives how well each "
        "ranks the held-out test models (Spearman rho with its 95 % bootstrap interval over models)."))


def noise_figure(study: dict, group: str):
    """Test rho against the share of flipped pairs, one line per pairs-per-model level (markers and
    dashes differ, so greyscale print tells them apart), whiskers = 95 % bootstrap intervals over the
    test models; plain accuracy and random weights as horizontal references."""
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 3.2), layout="constrained")
    summ = study["summary"][group]
    levels = list(dict.fromkeys(c["pairs_per_model"] for c in study["conditions"].values()))
    styles = [("o", "-", "0.05"), ("s", "--", "0.3"), ("^", "-.", "0.5"), ("D", (0, (5, 1, 1, 1, 1, 1)), "0.15")]
    for k, ((marker, dash, grey), ppm) in enumerate(zip(styles * 2, levels)):
        names = [n for n, c in study["conditions"].items() if c["pairs_per_model"] == ppm]
        x = np.array([study["conditions"][n]["flip"] * 100 for n in names]) + 0.8 * (k - (len(levels) - 1) / 2)
        y = np.array([summ[n]["spearman"] for n in names], dtype=float)
        ci = np.array([summ[n]["spearman_ci"] or [np.nan, np.nan] for n in names], dtype=float)
        ax.errorbar(x, y, yerr=[y - ci[:, 0], ci[:, 1] - y], marker=marker, ls=dash, ms=3.5, capsize=2, color=grey,
                    lw=1, label=f"BenchAlign, {f'{ppm} pairs per model' if ppm else 'all pairs'}")
    # the flag's solid line first and darker: where it equals plain accuracy, the dots show on it
    for name, ls, grey, label in (("flag_accuracy", "-", "0.3", "instruction-tuned flag, ties by accuracy"),
                                  ("no_alignment", ":", "0.55", "plain accuracy"),
                                  ("random", (0, (6, 3)), "0.55", "random weights")):
        if name in summ and summ[name]["spearman"] is not None:
            ax.axhline(summ[name]["spearman"], color=grey, lw=1, ls=ls, label=label)
    ax.set_xlabel("preference pairs flipped (%)")
    ax.set_ylabel(f"Spearman ρ with the true\npreference ranking ({group})")
    handles, labels = ax.get_legend_handles_labels()
    plots.legend_below(fig, handles, labels)
    plots.title(fig, f"BenchAlign on noisy, sparse preferences ({group})")
    return plots.set_caption(fig, (
        f"Spearman ρ with the latent score on the unseen test models ({group}) of BenchAlign fitted to "
        f"Bradley-Terry pairs (β = {study['beta']:g} on the standardised latent) among the source models, a share of "
        "the pairs flipped and only some pairs per model observed; mean over "
        f"{study['seeds']} seeds, whiskers: 95 % bootstrap intervals over the test models (points of a flip level "
        "set apart slightly). Grey lines: plain accuracy, random weights and the instruction-tuned flag (instruction-"
        "tuned models first, ties broken by plain accuracy), which use no preferences."))
