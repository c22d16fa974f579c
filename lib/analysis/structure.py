"""Low-dimensional structure of the model x benchmark matrix: PCA with standardised columns.

If one latent "general ability" explains model scores, the first principal component carries
most of the variance; the paper finds that it does so far more under train-before-test, and that
PC1 tracks pre-training compute. Pure functions on matrices from :func:`lib.store.matrix`.

Conventions: columns are z-scored (scikit-learn's ``StandardScaler``: population standard
deviation) and decomposed by scikit-learn's ``PCA``; models missing any benchmark are dropped (PCA
needs a complete matrix) and so are constant columns; the sign of each component is fixed so that
its loadings sum to a positive number (PC1 then grows with better scores).

Every headline number (PC1 share per protocol and its gain, PC1 share per family, r of PC1 with log
compute) gets a bootstrap interval over models (:func:`bootstrap_pca`, :mod:`lib.analysis.uncertainty`;
the same draws for both protocols, so the gain is paired), and the gain is recomputed on subsets
of models (:mod:`lib.analysis.robustness`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from . import uncertainty


@dataclass
class PCAResult:
    explained: pd.Series          # explained-variance ratio, index PC1..PCk
    scores: pd.DataFrame          # model x component
    loadings: pd.DataFrame        # benchmark x component (unit vectors)
    n_models: int
    dropped_models: list[str] = field(default_factory=list)
    dropped_benchmarks: list[str] = field(default_factory=list)


def pca(matrix: pd.DataFrame, min_models: int = 3) -> PCAResult | None:
    """PCA of the standardised complete part of ``matrix``; None when fewer than ``min_models``
    complete models or fewer than two non-constant benchmarks remain."""
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import StandardScaler

    complete = matrix.dropna(axis=0, how="any")
    dropped_models = sorted(set(matrix.index) - set(complete.index))
    varying = [c for c in complete.columns if complete[c].nunique() > 1]
    dropped_b = [c for c in complete.columns if c not in varying]
    complete = complete[varying]
    if len(complete) < max(2, min_models) or complete.shape[1] < 2:
        return None
    z = StandardScaler().fit_transform(complete.to_numpy(float))
    fit = PCA(svd_solver="full").fit(z)
    signs = np.sign(fit.components_.sum(axis=1))
    signs[signs == 0] = 1
    components = fit.components_ * signs[:, None]
    names = [f"PC{i + 1}" for i in range(len(components))]
    explained = pd.Series(fit.explained_variance_ratio_, index=names, name="explained_variance_ratio")
    scores = pd.DataFrame(fit.transform(z) * signs[None, :], index=complete.index, columns=names)
    loadings = pd.DataFrame(components.T, index=complete.columns, columns=names)
    return PCAResult(explained, scores, loadings, len(complete), dropped_models, dropped_b)


def by_group(matrix: pd.DataFrame, groups: pd.Series, min_models: int = 3) -> pd.DataFrame:
    """PC1 (and PC2) explained-variance ratio within each group (e.g. family) with enough models.

    Columns: group, n_models, pc1, pc2 (NaN for groups too small to analyse).
    """
    rows = []
    for name, members in groups.groupby(groups).groups.items():
        res = pca(matrix.loc[list(members)], min_models)
        rows.append({"group": name, "n_models": len(members),
                     "pc1": float(res.explained.iloc[0]) if res else np.nan,
                     "pc2": float(res.explained.iloc[1]) if res and len(res.explained) > 1 else np.nan})
    return pd.DataFrame(rows, columns=["group", "n_models", "pc1", "pc2"])


def pc1_vs_compute(scores: pd.Series, flops: pd.Series, min_models: int = 3) -> dict:
    """Correlation of PC1 score with log10 pre-training FLOPs on the models where both are known:
    {"n_models", "pearson_r", "spearman_rho", "slope"} (NaN when fewer than ``min_models``)."""
    both = pd.concat({"pc1": scores, "flops": flops}, axis=1, join="inner").dropna()
    both = both[both["flops"] > 0]
    n = len(both)
    if n < max(3, min_models):
        return {"n_models": n, "pearson_r": float("nan"), "spearman_rho": float("nan"), "slope": float("nan")}
    x = np.log10(both["flops"].to_numpy(float))
    y = both["pc1"].to_numpy(float)
    fit = stats.linregress(x, y)
    return {"n_models": n, "pearson_r": float(fit.rvalue),
            "spearman_rho": float(stats.spearmanr(x, y).statistic), "slope": float(fit.slope)}


def bootstrap_pca(matrices: dict[str, pd.DataFrame], models: pd.DataFrame, n_boot: int = uncertainty.N_BOOT,
                  seed: int = 0, level: float = uncertainty.LEVEL, min_models: int = 3) -> dict:
    """Intervals of :func:`pca_report`'s numbers: ``pc1_explained_ci`` {protocol}, ``pc1_gain_ci``
    (last protocol minus first, paired), ``pc1_vs_log_compute_r_ci`` {protocol: {all, base}} and
    ``family_pc1_ci`` {protocol: {family}} (resampling within the family).

    ``matrices``: {protocol: oriented model x benchmark matrix}; ``models``: a
    :func:`lib.metadata.models_frame` of (at least) their models.
    """
    names = sorted(set().union(*(m.index for m in matrices.values())))
    w = uncertainty.draws(len(names), n_boot, seed)
    flops = models.reindex(names)["flops_1e21"].to_numpy(float)
    log_flops = np.where(flops > 0, np.log10(np.where(flops > 0, flops, 1.0)), np.nan)
    base = ~models.reindex(names)["instruct"].fillna(False).to_numpy(bool)
    rows = {"all": np.ones(len(names), bool), "base": base}
    ci = lambda v: uncertainty.interval(v, level)
    out: dict = {"pc1_explained_ci": {}, "pc1_vs_log_compute_r_ci": {}, "family_pc1_ci": {}}
    pc1 = {}
    for p, mat in matrices.items():
        res = uncertainty.pca_draws(mat.reindex(names).to_numpy(float), w, log_flops, rows, min_models)
        pc1[p] = res["pc1"]
        out["pc1_explained_ci"][p] = ci(res["pc1"])
        out["pc1_vs_log_compute_r_ci"][p] = {k: ci(v) for k, v in res["r"].items()}
        fam = {}
        for family, members in models.reindex(list(mat.index)).groupby("family").groups.items():
            x = mat.loc[list(members)].to_numpy(float)
            fam[family] = ci(uncertainty.pca_draws(x, uncertainty.draws(len(x), n_boot, seed),
                                                   min_models=min_models)["pc1"]) if len(x) >= min_models \
                else [float("nan"), float("nan")]
        out["family_pc1_ci"][p] = fam
    if len(pc1) == 2:
        first, second = list(pc1)
        out["pc1_gain_ci"] = ci(pc1[second] - pc1[first])
    return out


@uncertainty.one_blas_thread
def pca_report(df: pd.DataFrame, store_root=None, min_models: int = 3, max_components: int = 10,
               n_boot: int = uncertainty.N_BOOT, seed: int = 0, level: float = uncertainty.LEVEL) -> dict:
    """Everything notebook 06 shows, from a tidy store frame (downstream benchmarks only).

    Returns ``fits`` ({protocol: :class:`PCAResult` or None}), ``explained`` (component x protocol
    ratios), ``family`` (:func:`by_group` per protocol, with ``lo``/``hi`` of its PC1 share),
    ``scores`` (PC1 per model and protocol), ``frames`` ({protocol: flops, pc1, type} for the compute
    scatter), ``compute`` (:func:`pc1_vs_compute` for all and base models, with ``r_lo``/``r_hi``),
    ``robustness`` (:func:`lib.analysis.robustness.gain`), ``notes`` and ``summary`` (plain
    numbers; every interval under its number's name + ``_ci``). ``n_boot`` draws of models with
    ``seed`` give the ``level`` percentile intervals.
    """
    from .. import metadata, store
    from . import robustness
    from .agreement import split_benchmarks

    downstream, _ = split_benchmarks(sorted(df["benchmark"].unique()), store_root)
    protocols = [p for p in store.PROTOCOLS if p in set(df["protocol"])]
    dirs = store.directions(df)
    matrices = {p: store.orient(store.matrix(df, p).reindex(columns=downstream), dirs) for p in protocols}
    models = metadata.models_frame(sorted(df["model"].unique()), store_root, need_compute=True)
    notes: list[str] = []

    # PCA of each protocol's model x benchmark matrix, and its bootstrap over models
    fits = {p: pca(m, min_models) for p, m in matrices.items()}
    notes += _fit_notes(fits)
    explained = pd.DataFrame({p: f.explained.iloc[:max_components] for p, f in fits.items() if f})
    boot = bootstrap_pca(matrices, models, n_boot, seed, level, min_models)

    # within each model family, and against pre-training compute
    family = _families(matrices, models, boot, min_models, notes)
    scores, frames, compute = _compute_section(fits, models, boot, min_models, notes)

    # robustness: the gain in PC1 share on subsets of models
    subsets, sub_notes = robustness.model_subsets(models, robustness.complete_models(df, tuple(protocols)),
                                                  min_models)
    notes += sub_notes
    robust = robustness.gain(matrices, subsets, "pc1", n_boot, seed, level, min_models, tuple(protocols)) \
        if len(protocols) == 2 else pd.DataFrame()

    summary = {
        "n_benchmarks": len(downstream), "min_models": min_models,
        "n_models": {p: (f.n_models if f else 0) for p, f in fits.items()},
        "explained_variance": {p: explained[p].dropna().tolist() for p in explained},
        "pc1_explained": {p: float(explained[p].iloc[0]) for p in explained},
        "family_pc1": {p: dict(zip(g["group"], g["pc1"])) for p, g in family.groupby("protocol")},
        "pc1_vs_log_compute": {p: {r["models"]: {k: r[k] for k in ("n_models", "pearson_r", "spearman_rho", "slope")}
                                   for r in g.to_dict("records")} for p, g in compute.groupby("protocol")},
        **boot,
        "bootstrap": {"unit": "models", "n_models": len(models), "n_boot": n_boot, "seed": seed, "level": level},
        "notes": notes,
    }
    if len(summary["pc1_explained"]) == 2 and "pc1_gain_ci" in boot:
        first, second = protocols
        summary["pc1_gain"] = summary["pc1_explained"][second] - summary["pc1_explained"][first]
        lo, hi = boot["pc1_gain_ci"]
        summary["pc1_gain_excludes_zero"] = bool(np.isfinite(lo) and (lo > 0 or hi < 0))
    summary["robustness"] = robustness.summary(robust) if len(robust) else {}
    return {"fits": fits, "explained": explained, "family": family, "scores": scores, "frames": frames,
            "compute": compute, "robustness": robust, "notes": notes, "summary": summary}


def _fit_notes(fits: dict[str, PCAResult | None]) -> list[str]:
    """Why a protocol has no PCA, and which models and benchmarks each fit left out."""
    notes = [f"{p}: too few complete models or benchmarks for PCA" for p, f in fits.items() if f is None]
    notes += [f"{p}: dropped incomplete models {f.dropped_models}" for p, f in fits.items() if f and f.dropped_models]
    notes += [f"{p}: dropped constant benchmarks {f.dropped_benchmarks}"
              for p, f in fits.items() if f and f.dropped_benchmarks]
    return notes


def _families(matrices: dict[str, pd.DataFrame], models: pd.DataFrame, boot: dict, min_models: int,
              notes: list[str]) -> pd.DataFrame:
    """PC1 share within each model family per protocol (:func:`by_group`), with its interval."""
    family = pd.concat([by_group(m, models.loc[m.index, "family"], min_models).assign(protocol=p)
                        for p, m in matrices.items()], ignore_index=True)
    family["lo"] = [boot["family_pc1_ci"][r.protocol].get(r.group, [np.nan] * 2)[0] for r in family.itertuples()]
    family["hi"] = [boot["family_pc1_ci"][r.protocol].get(r.group, [np.nan] * 2)[1] for r in family.itertuples()]
    small = sorted(family.loc[family["pc1"].isna(), "group"].unique())
    if small:
        notes.append(f"families too small for PCA (NaN): {small}")
    return family


def _compute_section(fits: dict[str, PCAResult | None], models: pd.DataFrame, boot: dict, min_models: int,
                     notes: list[str]) -> tuple[pd.DataFrame, dict[str, pd.DataFrame], pd.DataFrame]:
    """PC1 scores per model, the scatter frames against pre-training compute, and the correlation of
    PC1 with log compute for all and for base models, with its interval."""
    scores = pd.DataFrame({p: f.scores["PC1"] for p, f in fits.items() if f})
    from .. import metadata

    instruct = models.loc[scores.index, "instruct"]
    kind = metadata.model_types(models).loc[scores.index]
    frames = {p: pd.DataFrame({"flops_1e21": models.loc[scores.index, "flops_1e21"], "pc1": scores[p],
                               "type": kind}).dropna() for p in scores}
    compute = pd.DataFrame([{"protocol": p, "models": grp,
                             **pc1_vs_compute(scores[p] if grp == "all" else scores[p][~instruct],
                                              models["flops_1e21"], min_models)}
                            for p in scores for grp in ("all", "base")])
    if len(compute):
        compute["r_lo"] = [boot["pc1_vs_log_compute_r_ci"][r.protocol][r.models][0] for r in compute.itertuples()]
        compute["r_hi"] = [boot["pc1_vs_log_compute_r_ci"][r.protocol][r.models][1] for r in compute.itertuples()]
    if not any(len(f) for f in frames.values()):
        notes.append("no model with known pre-training compute: PC1 vs compute skipped")
    return scores, frames, compute


def headline_table(summary: dict) -> pd.DataFrame:
    """PC1 share per protocol, its gain and r(PC1, log compute) with their intervals: rows (number,
    protocol), columns estimate, lo, hi."""
    rows = []
    for p, v in summary["pc1_explained"].items():
        rows.append(("pc1_explained", p, v, *summary["pc1_explained_ci"][p]))
    if "pc1_gain" in summary:
        first, second = list(summary["pc1_explained"])
        rows.append(("pc1_gain", f"{second} - {first}", summary["pc1_gain"], *summary["pc1_gain_ci"]))
    for p, groups in summary["pc1_vs_log_compute"].items():
        for grp, rec in groups.items():
            rows.append((f"r(PC1, log compute), {grp} ({rec['n_models']} models)", p, rec["pearson_r"],
                         *summary["pc1_vs_log_compute_r_ci"][p][grp]))
    return pd.DataFrame(rows, columns=["number", "protocol", "estimate", "lo", "hi"]).set_index(["number", "protocol"])


def tex_numbers(summary: dict) -> dict:
    """The numbers of a 06 summary for ``numbers.tex`` (intervals as ``..._lo`` / ``..._hi``)."""
    out = {}
    for p, v in summary["pc1_explained"].items():
        out[f"pc1_explained_{p}"] = v
        out[f"pc1_explained_{p}_lo"], out[f"pc1_explained_{p}_hi"] = summary["pc1_explained_ci"][p]
        r = summary["pc1_vs_log_compute"].get(p, {}).get("all", {})
        out[f"r_compute_{p}"] = r.get("pearson_r", float("nan"))
        out[f"r_compute_{p}_lo"], out[f"r_compute_{p}_hi"] = summary["pc1_vs_log_compute_r_ci"][p]["all"]
    if "pc1_gain" in summary:
        out["pc1_gain"] = summary["pc1_gain"]
        out["pc1_gain_lo"], out["pc1_gain_hi"] = summary["pc1_gain_ci"]
    return out
