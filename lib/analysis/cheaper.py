"""What do cheaper protocols buy? Each one as a candidate ranking of every benchmark, against train-before-test.

A *candidate* is an oriented model x benchmark matrix over the downstream benchmarks
(:func:`candidates`): every protocol of the store other than train-before-test (zero-shot direct
evaluation today; a protocol added later under its own name joins without a change here), and
*perplexity alone*: the models' mean bits-per-byte over the perplexity corpora before any
fine-tuning (the perplexity side of :data:`lib.analysis.perplexity.SETTINGS` ``pre_ft_ppl_vs_tbt``,
averaged by :func:`lib.analysis.perplexity.with_average`), one ranking used for every benchmark.

Per candidate (:func:`comparison_report`): its mean Kendall tau between benchmarks (undefined for
perplexity alone, 1 by construction), its tau with train-before-test on each benchmark and their
mean, each with a bootstrap interval over the models both rank (:mod:`lib.analysis.uncertainty`);
the seconds and FLOPs its units recorded (:func:`recorded_cost`); and, where the store's metadata records
which model was prepared for which task (the mini world), the share of the prepared models' rank
lead that it removes (:func:`lead_removed`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import plots, store
from . import uncertainty
from .agreement import MIN_MODELS, ranks, split_benchmarks
from .perplexity import AVERAGE, SETTINGS, with_average

PERPLEXITY = "perplexity_alone"
LABELS = {PERPLEXITY: "Perplexity alone (before fine-tuning)"}
BY_CONSTRUCTION = "1 by construction: one ranking for every benchmark"
PPL_PROTOCOL = SETTINGS["pre_ft_ppl_vs_tbt"][0]      # where the perplexity before fine-tuning is stored
SECONDS_KEYS = ("eval_seconds", "train_seconds")     # what a unit records of its time (lib.pipeline.evaluate)


def label(name: str) -> str:
    return LABELS.get(name, plots.protocol_label(name))


def candidates(df: pd.DataFrame, downstream: list[str], corpora: list[str]) -> dict[str, pd.DataFrame]:
    """{candidate: oriented model x downstream-benchmark matrix}: the store's protocols other than
    train-before-test (direct evaluation first), then :data:`PERPLEXITY` when there are corpora
    (``downstream`` and ``corpora``: :func:`lib.analysis.agreement.split_benchmarks`)."""
    dirs = store.directions(df)
    present = set(df["protocol"]) - {store.TBT}
    out = {}
    for p in [q for q in store.PROTOCOLS if q in present] + sorted(present - set(store.PROTOCOLS)):
        mat = store.matrix(df, p).reindex(columns=downstream)
        if mat.notna().any().any():
            out[p] = store.orient(mat, dirs)
    if corpora and PPL_PROTOCOL in set(df["protocol"]):
        ppl = with_average(store.orient(store.matrix(df, PPL_PROTOCOL).reindex(columns=corpora), dirs))[AVERAGE]
        out[PERPLEXITY] = pd.DataFrame({b: ppl for b in downstream}, index=ppl.index)
    return out


def unit_flops(prov: dict) -> float:
    """FLOPs of one unit from the tokens it recorded (:mod:`lib.pipeline.evaluate`,
    :mod:`lib.pipeline.protocols`): 2 N per scored token (test, validation), 6 N per trained token when
    every parameter trains and 4 N with LoRA (no weight gradients of the base: the preflight's
    rule, :func:`lib.pipeline.launch.preflight.unit_flops`); NaN when the unit recorded no tokens."""
    n, scored = prov.get("n_params"), prov.get("eval_tokens")
    if not n or scored is None:
        return np.nan
    method = ((prov.get("config") or {}).get("recipe") or {}).get("method", "lora")
    trained = (6 if method == "full" else 4) * prov.get("train_tokens", 0)
    return float(n) * (2 * scored + trained + 2 * prov.get("validation_tokens", 0))


def recorded_cost(df: pd.DataFrame, downstream: list[str], corpora: list[str]) -> pd.DataFrame:
    """Per candidate and train-before-test: the units behind its ranking (``n_units``), how many
    record their seconds (``n_recorded``), their sum (``seconds``: evaluation plus training and
    validation, as the units wrote them into the provenance) and ``flops`` (:func:`unit_flops`);
    each sum NaN unless every unit recorded it."""
    rows = {p: df[(df["protocol"] == p) & df["benchmark"].isin(downstream)] for p in set(df["protocol"])}
    if corpora and PPL_PROTOCOL in rows:
        rows[PERPLEXITY] = df[(df["protocol"] == PPL_PROTOCOL) & df["benchmark"].isin(corpora)]

    def total(values: list[float]) -> float:
        values = np.asarray(values, float)
        return float(values.sum()) if len(values) and np.isfinite(values).all() else np.nan

    out = []
    for name, part in rows.items():
        secs = [sum(float(prov[k]) for k in SECONDS_KEYS if prov.get(k) is not None)
                if any(prov.get(k) is not None for k in SECONDS_KEYS) else np.nan for prov in part["provenance"]]
        recorded = int(np.isfinite(np.asarray(secs, float)).sum())
        out.append({"protocol": name, "n_units": len(part), "n_recorded": recorded, "seconds": total(secs),
                    "flops": total([unit_flops(p) for p in part["provenance"]])})
    return pd.DataFrame(out, columns=["protocol", "n_units", "n_recorded", "seconds", "flops"]).set_index("protocol")


def lead_removed(rankings: dict[str, pd.DataFrame], prepared: dict[str, dict], twins: dict[str, str]) -> pd.Series:
    """Share of the prepared models' rank lead that each ranking removes, against zero-shot direct
    evaluation (where preparation shows in full): ``1 - lead / lead_direct``, with ``lead`` the mean
    over (prepared twin, task it was prepared for) of the twin's rank advantage over its base on
    that task (ranks among all models the ranking scores; 1 = best). Direct evaluation is 0 by
    construction; NaN where no twin and base are both ranked."""
    def lead(mat: pd.DataFrame) -> float:
        gaps = []
        for model, tasks in prepared.items():
            base = twins.get(model)
            for task in tasks:
                if base is None or task not in mat.columns:
                    continue
                r = ranks(mat[task].dropna())
                if model in r.index and base in r.index:
                    gaps.append(r[base] - r[model])
        return float(np.mean(gaps)) if gaps else np.nan

    leads = {name: lead(mat) for name, mat in rankings.items()}
    ref = leads.get(store.DIRECT, np.nan)
    return pd.Series({name: 1 - v / ref if ref and np.isfinite(ref) else np.nan for name, v in leads.items()})


@uncertainty.one_blas_thread
def comparison_report(df: pd.DataFrame, store_root=None, min_models: int = MIN_MODELS,
                      n_boot: int = uncertainty.N_BOOT, seed: int = 0, level: float = uncertainty.LEVEL,
                      prepared: dict | None = None, twins: dict | None = None) -> dict:
    """``table`` (one row per candidate and train-before-test: mean tau between benchmarks, mean tau
    with train-before-test, their intervals, models, the lowest and highest benchmark tau, recorded
    cost, and ``lead_removed`` when ``prepared`` is given), ``per_benchmark`` (candidate x benchmark
    tau with train-before-test), ``summary`` (the same under plain keys) and ``notes``."""
    downstream, corpora = split_benchmarks(sorted(df["benchmark"].unique()), store_root)
    if store.TBT not in set(df["protocol"]):
        raise store.StoreError("the comparison needs train-before-test results; the store has "
                               f"{sorted(set(df['protocol']))}")
    tbt = store.orient(store.matrix(df, store.TBT).reindex(columns=downstream), store.directions(df))
    cands = candidates(df, downstream, corpora)
    k = len(downstream)
    s: dict = {"candidates": list(cands), "benchmarks": downstream, "mean_tau_between": {}, "mean_tau_between_ci": {},
               "tau_with_tbt_mean": {}, "tau_with_tbt_mean_ci": {}, "tau_with_tbt": {}, "tau_with_tbt_ci": {},
               "n_models": {}}
    for name, mat in {**cands, store.TBT: tbt}.items():
        own = mat.dropna(how="all")
        if name == PERPLEXITY:                      # the same ranking for every benchmark
            s["mean_tau_between"][name], s["mean_tau_between_ci"][name] = None, None
        else:
            x = own.to_numpy(float)
            s["mean_tau_between"][name] = float(uncertainty.mean_pair_tau(x, None, min_models)[0])
            s["mean_tau_between_ci"][name] = uncertainty.interval(
                uncertainty.mean_pair_tau(x, uncertainty.draws(len(own), n_boot, seed), min_models), level)
        if name == store.TBT:
            continue
        models = sorted(set(own.index) & set(tbt.dropna(how="all").index))
        x = np.hstack([mat.reindex(models).to_numpy(float), tbt.reindex(models).to_numpy(float)])
        pairs = [(b, k + b) for b in range(k)]
        point = uncertainty.weighted_tau(x, pairs, None, min_models)[0]
        boot = uncertainty.weighted_tau(x, pairs, uncertainty.draws(len(models), n_boot, seed), min_models)
        s["n_models"][name] = len(models)
        s["tau_with_tbt"][name] = dict(zip(downstream, map(float, point)))
        s["tau_with_tbt_ci"][name] = dict(zip(downstream, uncertainty.intervals(boot, level).tolist()))
        s["tau_with_tbt_mean"][name] = float(np.nanmean(point)) if np.isfinite(point).any() else np.nan
        s["tau_with_tbt_mean_ci"][name] = uncertainty.interval(uncertainty.nanmean_rows(boot), level)
    s["minus_direct"], s["minus_direct_ci"], s["n_models_paired"] = paired_against_direct(
        cands, tbt, min_models, n_boot, seed, level)
    notes = [f"{label(PERPLEXITY)}: mean tau between benchmarks is {BY_CONSTRUCTION} (not reported)"] \
        if PERPLEXITY in cands else []
    cost = recorded_cost(df, downstream, corpora)
    names = list(cands) + [store.TBT]
    for key in ("seconds", "flops"):
        s[key] = {n: (float(cost.loc[n, key]) if n in cost.index else np.nan) for n in names}
    s["n_units"] = {n: (int(cost.loc[n, "n_units"]) if n in cost.index else 0) for n in names}
    if not any(np.isfinite(v) for v in s["seconds"].values()):
        notes.append("cost: not recorded (no unit of this store records its seconds)")
    elif not all(np.isfinite(v) for v in s["flops"].values()):
        notes.append("FLOPs: not recorded for every protocol (units made before tokens were recorded, or none)")
    if prepared:
        s["lead_removed"] = lead_removed({**cands, store.TBT: tbt}, prepared, twins or {}).to_dict()
    else:
        notes.append("share of the prepared models' lead removed: not computed (no model's metadata records "
                     "test-task preparation; only the mini world's zoo does)")
    s["bootstrap"] = {"unit": "models", "n_boot": n_boot, "seed": seed, "level": level}
    s["min_models"] = min_models
    s["notes"] = notes
    per_benchmark = pd.DataFrame(s["tau_with_tbt"]).T.reindex(columns=downstream)
    rows = []
    for n in names:
        ci_b, ci_t = s["mean_tau_between_ci"].get(n) or [np.nan] * 2, s["tau_with_tbt_mean_ci"].get(n, [np.nan] * 2)
        taus = per_benchmark.loc[n] if n in per_benchmark.index else pd.Series(dtype=float)
        row = {"protocol": label(n), "mean_tau_between": s["mean_tau_between"].get(n),
               "between_lo": ci_b[0], "between_hi": ci_b[1],
               "tau_with_tbt": s["tau_with_tbt_mean"].get(n, 1.0 if n == store.TBT else np.nan),
               "with_tbt_lo": ci_t[0], "with_tbt_hi": ci_t[1],
               "n_models": s["n_models"].get(n, len(tbt.dropna(how="all"))),
               "lowest": taus.idxmin() if taus.notna().any() else None, "lowest_tau": taus.min(),
               "highest_tau": taus.max(), "minus_direct": s["minus_direct"].get(n),
               "minus_direct_lo": s["minus_direct_ci"].get(n, [np.nan] * 2)[0],
               "minus_direct_hi": s["minus_direct_ci"].get(n, [np.nan] * 2)[1], "seconds": s["seconds"][n],
               "flops": s["flops"][n]}
        if prepared:
            row["lead_removed"] = s["lead_removed"].get(n)
        rows.append(row)
    table = pd.DataFrame(rows).set_index("protocol")
    return {"table": table, "per_benchmark": per_benchmark, "summary": s, "notes": notes}


def paired_against_direct(cands: dict[str, pd.DataFrame], tbt: pd.DataFrame, min_models: int, n_boot: int,
                          seed: int, level: float) -> tuple[dict, dict, dict]:
    """Each candidate's mean tau with train-before-test minus zero-shot direct evaluation's, both on
    the models the two candidates and train-before-test all rank, under the same bootstrap draws
    (a paired difference; benchmarks where either tau is undefined are left out of both means).
    ({candidate: difference}, {candidate: [lo, hi]}, {candidate: models}); empty without direct."""
    diff, ci, n_models = {}, {}, {}
    if store.DIRECT not in cands:
        return diff, ci, n_models
    direct, k = cands[store.DIRECT], tbt.shape[1]
    for name, mat in cands.items():
        if name == store.DIRECT:
            continue
        models = sorted(set(mat.dropna(how="all").index) & set(direct.dropna(how="all").index)
                        & set(tbt.dropna(how="all").index))
        x = np.hstack([m.reindex(models).to_numpy(float) for m in (mat, direct, tbt)])
        pairs = [(b, 2 * k + b) for b in range(k)] + [(k + b, 2 * k + b) for b in range(k)]

        def mean_diff(taus: np.ndarray) -> np.ndarray:
            a, d = taus[:, :k], taus[:, k:]
            both = np.isfinite(a) & np.isfinite(d)
            return np.where(both.any(axis=1), np.where(both, a - d, 0.0).sum(axis=1) / np.maximum(both.sum(axis=1), 1),
                            np.nan)

        diff[name] = float(mean_diff(uncertainty.weighted_tau(x, pairs, None, min_models))[0])
        ci[name] = uncertainty.interval(mean_diff(uncertainty.weighted_tau(
            x, pairs, uncertainty.draws(len(models), n_boot, seed), min_models)), level)
        n_models[name] = len(models)
    return diff, ci, n_models


def plot_comparison(summary: dict):
    """Mean tau with train-before-test (with its interval) against the cost on a log axis: FLOPs where
    every protocol's units recorded their tokens, else their recorded seconds; without either, the
    agreement alone, and the figure says so."""
    import matplotlib.pyplot as plt

    names = summary["candidates"] + [store.TBT]
    cost, unit = next(((summary[k], what) for k, what in (("flops", "FLOPs"), ("seconds", "seconds"))
                       if all(np.isfinite(summary.get(k, {}).get(n, np.nan)) and summary[k][n] > 0 for n in names)),
                      (None, None))
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 2.8), layout="constrained")
    colors = {**plots.PROTOCOL_COLORS, PERPLEXITY: "#55a868"}
    spare = iter(["#8172b3", "#937860", "#da8bc3", "#ccb974", "#64b5cd"])
    markers = {**plots.PROTOCOL_MARKERS, PERPLEXITY: "^"}
    spare_markers = iter(["D", "v", "P", "X", "h"])         # apart in greyscale, whatever the hues print as
    handles = []
    for i, n in enumerate(names):
        tau = summary["tau_with_tbt_mean"].get(n, 1.0)
        lo, hi = summary["tau_with_tbt_mean_ci"].get(n, [tau, tau])
        handles.append(ax.errorbar([cost[n] if cost else i], [tau], yerr=[[tau - lo], [hi - tau]], ms=4,
                                   fmt=markers.get(n) or next(spare_markers, "o"), capsize=2,
                                   color=colors.get(n) or next(spare, "0.35")))
    if cost:
        ax.set_xscale("log")
        ax.set_xlabel(f"{unit} recorded by the units (log)")
        caption = f", against the {unit} its units recorded (log axis)"
    else:
        ax.set_xticks(range(len(names)), [""] * len(names))
        ax.set_xlabel("cost not recorded in this store: agreement only")
        caption = "; this store records no cost, so the figure shows agreement only"
    ax.set_ylabel("mean τ with\ntrain-before-test")
    plots.legend_below(fig, handles, [label(n) for n in names])
    plots.title(fig, "Cheaper protocols against train-before-test")
    return plots.set_caption(fig, (
        "Each protocol's mean Kendall tau with the train-before-test ranking over the downstream benchmarks, with its "
        f"95 % bootstrap interval over models{caption}; train-before-test itself is 1 by definition."))


def tex_numbers(summary: dict) -> dict:
    """``cheaper/<candidate>/tau_with_tbt`` with ``.../lo`` and ``.../hi``, and ``cheaper/<candidate>/between``
    (perplexity alone has none: 1 by construction); ``cheaper/<protocol>/seconds`` and ``.../flops``
    where recorded (train-before-test's too)."""
    out = {}
    for n in summary["candidates"] + [store.TBT]:
        for key in ("seconds", "flops"):
            value = summary.get(key, {}).get(n)
            if value is not None and np.isfinite(value):
                out[f"cheaper/{n}/{key}"] = value
    for n in summary["candidates"]:
        key = f"cheaper/{n}/tau_with_tbt"
        out[key] = summary["tau_with_tbt_mean"][n]
        out[f"{key}/lo"], out[f"{key}/hi"] = summary["tau_with_tbt_mean_ci"][n]
        if summary["mean_tau_between"].get(n) is not None:
            out[f"cheaper/{n}/between"] = summary["mean_tau_between"][n]
    return out
