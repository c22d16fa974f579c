"""Does an effect hinge on a few models? The tau gain (04) and the PC1 gain (06) on subsets of models.

The subsets (:func:`model_subsets`): all models; each model family left out in turn; base models
only; instruction-tuned models only; the models with a result on every benchmark of the store
(no missing cell, perplexity corpora included). A subset with fewer than ``min_models`` models is
skipped and named in the notes. Each gain (train-before-test minus direct evaluation) gets a
paired bootstrap interval over the subset's models (:mod:`lib.analysis.uncertainty`), so the
table and its forest plot show whether the gain stays clear of zero without any one family.
"""

from __future__ import annotations

import pandas as pd

from .. import store
from . import uncertainty

ALL = "all models"
COMPLETE = "models with every result"


def model_subsets(models: pd.DataFrame, complete: list[str],
                  min_models: int = 3) -> tuple[dict[str, list[str]], list[str]]:
    """``({label: models}, notes)`` from a :func:`lib.metadata.models_frame` (family, instruct)."""
    names = list(models.index)
    wanted = {ALL: names}
    for fam in sorted(models["family"].unique()):
        wanted[f"without {fam}"] = [m for m in names if models.loc[m, "family"] != fam]
    wanted["base models only"] = [m for m in names if not models.loc[m, "instruct"]]
    wanted["instruct models only"] = [m for m in names if models.loc[m, "instruct"]]
    wanted[COMPLETE] = [m for m in names if m in set(complete)]
    keep = {k: v for k, v in wanted.items() if len(v) >= min_models}
    small = [f"{k} ({len(v)})" for k, v in wanted.items() if len(v) < min_models]
    notes = [f"robustness: subsets with fewer than {min_models} models skipped: {', '.join(small)}"] if small else []
    return keep, notes


def complete_models(df: pd.DataFrame, protocols=store.PROTOCOLS) -> list[str]:
    """Models with a result on every benchmark of the store under every protocol."""
    sub = df[df["protocol"].isin(protocols)]
    need = sub["benchmark"].nunique() * len(protocols)
    counts = sub.groupby("model").size()
    return sorted(counts.index[counts == need])


def _row(label: str, n: int, point: dict, boot: dict, level: float, protocols) -> dict:
    first, second = protocols
    gain = boot[second] - boot[first]
    lo, hi = uncertainty.interval(gain, level)
    return {"subset": label, "n_models": n, first: point[first], second: point[second],
            "gain": point[second] - point[first], "gain_lo": lo, "gain_hi": hi}


def tau_gain(matrices: dict[str, pd.DataFrame], subsets: dict[str, list[str]], n_boot: int = uncertainty.N_BOOT,
             seed: int = 0, level: float = uncertainty.LEVEL, min_models: int = 3,
             protocols=store.PROTOCOLS) -> pd.DataFrame:
    """Mean Kendall tau over benchmark pairs per protocol, and the gain with its paired interval, per
    subset. ``matrices``: {protocol: oriented model x benchmark matrix}, same columns."""
    cols = list(next(iter(matrices.values())).columns)
    rows = []
    for label, members in subsets.items():
        w = uncertainty.draws(len(members), n_boot, seed)
        pt, bt = {}, {}
        for p in protocols:
            x = matrices[p].reindex(index=members, columns=cols).to_numpy(float)
            pt[p] = float(uncertainty.mean_pair_tau(x, None, min_models)[0])
            bt[p] = uncertainty.mean_pair_tau(x, w, min_models)
        rows.append(_row(label, len(members), pt, bt, level, protocols))
    return pd.DataFrame(rows)


def pc1_gain(matrices: dict[str, pd.DataFrame], subsets: dict[str, list[str]], n_boot: int = uncertainty.N_BOOT,
             seed: int = 0, level: float = uncertainty.LEVEL, min_models: int = 3,
             protocols=store.PROTOCOLS) -> pd.DataFrame:
    """PC1 share (standardised columns) per protocol, and the gain with its paired interval, per subset."""
    rows = []
    for label, members in subsets.items():
        w = uncertainty.draws(len(members), n_boot, seed)
        pt, bt = {}, {}
        for p in protocols:
            x = matrices[p].reindex(members).to_numpy(float)
            pt[p] = float(uncertainty.pca_draws(x, None, min_models=min_models)["pc1"][0])
            bt[p] = uncertainty.pca_draws(x, w, min_models=min_models)["pc1"]
        rows.append(_row(label, len(members), pt, bt, level, protocols))
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> dict:
    """``{subset: {n_models, <protocols>, gain, gain_ci}}`` for summary.json."""
    out = {}
    for r in table.to_dict("records"):
        out[r["subset"]] = {k: v for k, v in r.items() if k not in ("subset", "gain_lo", "gain_hi")}
        out[r["subset"]]["gain_ci"] = [r["gain_lo"], r["gain_hi"]]
    return out
