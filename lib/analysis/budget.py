"""How much fine-tuning does it take before benchmarks agree? Agreement along the validation curves.

Stage 02 records, for every (model, benchmark, learning rate), the validation value the recipe
chooses on after each epoch (:func:`lib.layout.curves_frame`): the benchmark's score when it
selects on the metric, the validation loss when it selects on the loss as the paper did (then lower
loss ranks higher). **Only validation values exist per epoch**: the test split is scored once, at
the checkpoint chosen on validation. So the curves rank models by that validation value:

- ``lr=<value>``: the model x benchmark matrix of validation scores after ``epoch`` epochs at one
  learning rate;
- ``best so far``: each (model, benchmark)'s best validation score over every learning rate and
  every epoch up to ``epoch`` (what the recipe would select with that budget; the last epoch is
  the full recipe's selection).

Each point is the mean Kendall tau over benchmark pairs with a bootstrap interval over models. The
references come from the test split (the store): direct evaluation (no fine-tuning, drawn at
epoch 0) and train-before-test at the selected checkpoint. Perplexity corpora are left out (their
agreement is notebook 05's question).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import uncertainty

BEST = "best so far"
COLUMNS = ["curve", "epoch", "n_models", "n_pairs", "mean_tau", "lo", "hi"]


def curve_matrices(curves: pd.DataFrame, benchmarks: list[str]) -> dict[tuple[str, int], pd.DataFrame]:
    """``{(curve, epoch): model x benchmark validation matrix}`` for every lr and for BEST (higher is
    better: a validation loss is negated)."""
    out = {}
    if curves.empty:
        return out
    cur = curves[curves["benchmark"].isin(benchmarks)].copy()
    value = pd.to_numeric(cur["val_score"], errors="coerce")
    if "criterion" in cur:                 # a unit chosen on the validation loss ranks by it, lower first
        value = value.where(cur["criterion"] != "val_loss", -pd.to_numeric(cur["val_loss"], errors="coerce"))
    cur["val_score"] = value
    cur = cur.dropna(subset=["val_score"])
    for lr, g in cur.groupby("lr"):
        for epoch, e in g.groupby("epoch"):
            out[(f"lr={lr:g}", int(epoch))] = e.pivot_table(index="model", columns="benchmark", values="val_score",
                                                            aggfunc="first").reindex(columns=benchmarks)
    for epoch in sorted(cur["epoch"].unique()):
        upto = cur[cur["epoch"] <= epoch]
        out[(BEST, int(epoch))] = upto.pivot_table(index="model", columns="benchmark", values="val_score",
                                                   aggfunc="max").reindex(columns=benchmarks)
    return out


def budget_table(curves: pd.DataFrame, benchmarks: list[str], n_boot: int = uncertainty.N_BOOT, seed: int = 0,
                 level: float = uncertainty.LEVEL, min_models: int = 3) -> pd.DataFrame:
    """Mean tau over benchmark pairs per (curve, epoch) with its interval (columns :data:`COLUMNS`)."""
    mats = curve_matrices(curves, benchmarks)
    models = sorted(set().union(*(m.index for m in mats.values()))) if mats else []
    if not models:
        return pd.DataFrame(columns=COLUMNS)
    k = len(benchmarks)
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    x = np.hstack([m.reindex(models).to_numpy(float) for m in mats.values()])
    every = [(a + g * k, b + g * k) for g in range(len(mats)) for a, b in pairs]
    point = uncertainty.weighted_tau(x, every, None, min_models)[0]
    boot = uncertainty.weighted_tau(x, every, uncertainty.draws(len(models), n_boot, seed), min_models)
    rows = []
    m = len(pairs)
    for g, ((curve, epoch), mat) in enumerate(mats.items()):
        cols = slice(g * m, (g + 1) * m)
        mean = float(uncertainty.nanmean_rows(point[None, cols])[0])
        draws = uncertainty.nanmean_rows(boot[:, cols])
        lo, hi = uncertainty.interval(draws, level)
        rows.append({"curve": curve, "epoch": epoch, "n_models": int(mat.notna().any(axis=1).sum()),
                     "n_pairs": int(np.isfinite(point[cols]).sum()), "mean_tau": mean, "lo": lo, "hi": hi})
    return pd.DataFrame(rows, columns=COLUMNS)


def summary(table: pd.DataFrame) -> dict:
    """``{curve: {epoch: {"mean_tau", "ci"}}}`` for summary.json."""
    out: dict = {}
    for r in table.to_dict("records"):
        out.setdefault(r["curve"], {})[str(r["epoch"])] = {"mean_tau": r["mean_tau"], "ci": [r["lo"], r["hi"]]}
    return out
