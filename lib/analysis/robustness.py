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


STATISTICS = {  # statistic(models x columns matrix, weights or None, min_models) -> one value per draw
    "tau": uncertainty.mean_pair_tau,                # mean Kendall tau over benchmark pairs (04)
    "pc1": lambda x, w, min_models: uncertainty.pca_draws(x, w, min_models=min_models)["pc1"],  # PC1 share (06)
}


def gain(matrices: dict[str, pd.DataFrame], subsets: dict[str, list[str]], statistic: str,
         n_boot: int = uncertainty.N_BOOT, seed: int = 0, level: float = uncertainty.LEVEL, min_models: int = 3,
         protocols=store.PROTOCOLS) -> pd.DataFrame:
    """A :data:`STATISTICS` entry per protocol, and the gain with its paired interval, per subset.
    ``matrices``: {protocol: oriented model x benchmark matrix}, same columns."""
    stat = STATISTICS[statistic]
    first, second = protocols
    rows = []
    for label, members in subsets.items():
        w = uncertainty.draws(len(members), n_boot, seed)
        point, boot = {}, {}
        for p in protocols:
            x = matrices[p].reindex(members).to_numpy(float)
            point[p], boot[p] = float(stat(x, None, min_models)[0]), stat(x, w, min_models)
        lo, hi = uncertainty.interval(boot[second] - boot[first], level)
        rows.append({"subset": label, "n_models": len(members), first: point[first], second: point[second],
                     "gain": point[second] - point[first], "gain_lo": lo, "gain_hi": hi})
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> dict:
    """``{subset: {n_models, <protocols>, gain, gain_ci}}`` for summary.json."""
    out = {}
    for r in table.to_dict("records"):
        out[r["subset"]] = {k: v for k, v in r.items() if k not in ("subset", "gain_lo", "gain_hi")}
        out[r["subset"]]["gain_ci"] = [r["gain_lo"], r["gain_hi"]]
    return out
