"""Place new models among a reference's: train-before-test for the new models only, ranked against
the reference's results, after a check that this run reproduces the reference.

A *placement profile* (``reference:`` in its params file, :mod:`lib.params`) names new models and a
reference: ``published`` (the paper's 61 models, both protocols, from ``all_results.json``) or a
finished profile (e.g. ``mini``). Its stages 02 and 03 run the new models and the reference's
*calibration models* with the reference's recipe, split rule, benchmarks and metrics; notebook 08
then reads this module, in this order:

1. :func:`calibration_check`: the calibration models' scores here next to the reference's. Direct
   evaluation must lie within two of the reference's standard errors (``|z| <= 2``, the rule of
   ``python -m runner.published --compare``): the same documents scored by the same weights differ
   only by arithmetic, so a larger gap is a difference of set-up, not noise. Train-before-test must
   lie within :func:`tbt_bound` standard errors: a fine-tuning run on other hardware or software is
   another draw of the fine-tuned model, and two draws scored on the same ``n`` items differ by at
   most ``sqrt(2)`` times one score's item-sampling error when their per-item outcomes are
   independent (less when they agree, as two runs of one recipe mostly do); with ``m`` such checks
   at once, a Bonferroni two-sided 95 % bound ``sqrt(2) * z(1 - 0.05 / (2 m))`` keeps the chance
   that a run as good as the reference fails any of them below 5 % (``m = 48``, the paper's 24
   benchmarks x 2 models: 4.64 standard errors; ``m = 8``: 3.86). Checks without a standard error
   (perplexity corpora; a score of 0 or 1, whose binomial error is 0) are reported but decide
   nothing. A run that fails is *not comparable*: the report says on which benchmarks, by how much,
   what usually causes it, and ranks nothing.
2. :func:`placement_report`: for each new model its rank among the reference models and the new
   models, per benchmark and as a mean rank over benchmarks with two bootstrap intervals (over
   benchmarks; over reference models), under both protocols; the shift between them; whether adding
   it changes the benchmarks' mean Kendall tau; its position on the reference's first principal
   component (the reference's PCA, the new model projected onto it); and that position against
   pre-training compute where its FLOPs are known. The reference's own numbers are computed from
   the reference alone, so no table about the reference changes because new models are present.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from . import metadata, params, paths, published, store
from .analysis import agreement, structure, uncertainty
from .util import jsonable, note_read

DIRECT_BOUND = 2.0          # |z| of a calibration model's direct-evaluation score (runner.published.compare's rule)
ALPHA = 0.05                # family-wise error of the train-before-test checks
# what usually makes a run differ from its reference, in the words of the failure lines
CAUSES = ("precision (dtype: the paper ran float32; half precision changes log-likelihoods and so answers)",
          "lm-eval version (task configs, prompts and metrics change between releases)",
          "evaluation batch size (padding changes the arithmetic; the paper scored one document at a time)",
          "prompt format (chat template, BOS token, few-shot count, generation cap)",
          "dataset (a re-homed repository or another revision orders its rows otherwise, and documents are chosen "
          "by position: the provenance's document hash says)")
PROVENANCE_KEYS = ("dtype", "eval_batch_size", "add_bos_token", "chat_template", "max_gen_toks")


# ---------------------------------------------------------------------------------------------
# the reference


def reference_results(reference: str) -> pd.DataFrame:
    """The reference's results as one tidy frame (the paper's file, or a finished profile's store)."""
    if reference != params.PUBLISHED:
        root = paths.store_dir(reference)
        if not root.is_dir():
            raise params.PrerequisiteError(f"the reference profile {reference!r} has not run: run "
                                           f"`{paths.make_command(reference)}` first")
        return store.load(root)
    path = published.results_path()
    note_read(path)
    # the paper's evaluation settings, as the notebooks' defaults state them (the file records none)
    defaults = params.notebook_parameters("02_finetune")
    settings = {"source": published.SOURCE["repository"], **{k: defaults[k] for k in PROVENANCE_KEYS}}
    rows = []
    for protocol, per_bench in published.parse_results(path).items():
        for bench, by_model in per_bench.items():
            info = metadata.benchmark_info(bench)
            for model, val in by_model.items():
                rows.append({"protocol": protocol, "benchmark": bench, "model": model, "metric": info.metric,
                             "score": val["score"], "stderr": val["stderr"],
                             "higher_is_better": info.higher_is_better, "n": None,
                             "provenance": settings})
    return pd.DataFrame(rows, columns=store.COLUMNS).sort_values(["protocol", "benchmark", "model"],
                                                                 ignore_index=True)


def prepare(profile: str) -> dict:
    """Prepare hook of every placement profile (:mod:`lib.params` adds it): check that the reference
    is there and give this profile's store the reference's metadata of its benchmarks and of the
    calibration models (their folders stay where the reference keeps them)."""
    prof = params.load_profile(profile)
    calibration = params.calibration_models(prof)
    if prof.reference == params.PUBLISHED:
        published.results_path()                       # raises DataMissing with what to do
        return {"reference": prof.reference, "calibration": calibration}
    for stage in ("02_finetune", "03_direct_eval"):
        if not (paths.stage_dir(prof.reference, stage) / "summary.json").exists():
            raise params.PrerequisiteError(f"{prof.path}: the reference {prof.reference!r} has not finished stage "
                                           f"{stage}: run `{paths.make_command(prof.reference)}` first")
    theirs = paths.store_dir(prof.reference)
    models = store.read_meta(theirs, "models")
    unknown = [m for m in calibration if m not in models]
    if unknown:
        raise params.ParamsError(f"{prof.path}: reference.calibration: {unknown[0]!r} is not a model of the reference "
                                 f"{prof.reference!r} (its models: {sorted(models)[:6]} ...)")
    root = paths.store_dir(profile)
    store.write_meta(root, "benchmarks", store.read_meta(theirs, "benchmarks"))
    store.write_meta(root, "models", {m: models[m] for m in calibration})
    return {"reference": prof.reference, "calibration": calibration}


# ---------------------------------------------------------------------------------------------
# 1. is this run comparable with the reference?


def tbt_bound(n_checks: int, alpha: float = ALPHA) -> float:
    """Standard errors a calibration model's train-before-test score may lie from the reference's:
    ``sqrt(2) * z(1 - alpha / (2 n_checks))`` (the module docstring says why)."""
    return float(math.sqrt(2) * stats.norm.ppf(1 - alpha / (2 * max(1, n_checks))))


def calibration_check(ours: pd.DataFrame, reference: pd.DataFrame, models: list[str], benchmarks: list[str],
                      direct_bound: float = DIRECT_BOUND, alpha: float = ALPHA) -> dict:
    """The calibration models' scores here (``ours``, a tidy store frame) next to the reference's on
    ``benchmarks``, under both protocols: ``table`` (one row per score), ``comparable`` (every checked
    row within its bound), ``bounds``, the counts and ``lines`` (:func:`calibration_lines`)."""
    ref = {(r.protocol, r.model, r.benchmark): (r.score, r.stderr) for r in reference.itertuples()}
    mine = {(r.protocol, r.model, r.benchmark): r.score for r in ours.itertuples()}
    rows = []
    for protocol in store.PROTOCOLS:
        for model in models:
            for bench in benchmarks:
                if (protocol, model, bench) not in ref:
                    continue
                score, se = ref[(protocol, model, bench)]
                got = mine.get((protocol, model, bench), math.nan)
                se = float(se) if se is not None and np.isfinite(se) and se > 0 else math.nan
                rows.append({"protocol": protocol, "model": model, "benchmark": bench, "reference": float(score),
                             "reference_stderr": se, "ours": float(got), "diff": float(got) - float(score)})
    table = pd.DataFrame(rows, columns=["protocol", "model", "benchmark", "reference", "reference_stderr", "ours",
                                        "diff"])
    if table.empty:
        raise ValueError(f"calibration: the reference has no result of the calibration models {models} on "
                         f"{benchmarks}")
    table["z"] = table["diff"] / table["reference_stderr"]
    table["checked"] = table["reference_stderr"].notna() | table["ours"].isna()
    n_tbt = int((table["checked"] & (table["protocol"] == store.TBT)).sum())
    bounds = {store.DIRECT: float(direct_bound), store.TBT: tbt_bound(n_tbt, alpha)}
    table["bound"] = table["protocol"].map(bounds)
    table["identical"] = table["ours"] == table["reference"]
    table["within"] = table["ours"].notna() & ((table["z"].abs() <= table["bound"]) | ~table["checked"]
                                               | table["identical"])
    failed = table[table["checked"] & ~table["within"]]
    comparable = failed.empty
    out = {"table": table, "comparable": comparable, "bounds": bounds, "n_checks": int(table["checked"].sum()),
           "n_failed": len(failed), "n_identical": int(table["identical"].sum()), "n_results": len(table)}
    out["lines"] = calibration_lines(out, failed, ours, reference, models)
    return out


def calibration_lines(check: dict, failed: pd.DataFrame, ours: pd.DataFrame, reference: pd.DataFrame,
                      models: list[str]) -> list[str]:
    """The verdict; when it fails, every failed score, the benchmarks concerned and the likely causes."""
    b = check["bounds"]
    rule = f"direct |z| <= {b[store.DIRECT]:g}, train-before-test |z| <= {b[store.TBT]:.2f} reference standard errors"
    documents = document_differences(ours, reference, models)
    if check["comparable"]:
        same = (f"; {check['n_identical']} of {check['n_results']} identical to the last digit"
                if check["n_identical"] else "")
        lines = [f"comparable: the {len(models)} calibration model(s) reproduce the reference on all "
                 f"{check['n_checks']} checked scores ({rule}){same}"]
        if documents:
            lines.append("  but the documents differ from the reference's (the chosen documents' hash), so the "
                         "scores are not of the same items: " + "; ".join(documents))
        return lines
    lines = [f"NOT COMPARABLE: {check['n_failed']} of {check['n_checks']} calibration scores lie outside the "
             f"reference's ({rule}); no model is ranked"]
    for r in failed.itertuples():
        if math.isnan(r.ours):
            lines.append(f"  {r.protocol} {r.model} / {r.benchmark}: no result here (stages 02-03 did not score it)")
            continue
        lines.append(f"  {r.protocol} {r.model} / {r.benchmark}: {r.ours:.4f} here vs {r.reference:.4f} "
                     f"+- {r.reference_stderr:.4f} in the reference (diff {r.diff:+.4f}, z {r.z:+.2f})")
    lines.append(f"  benchmarks concerned: {', '.join(sorted(failed['benchmark'].unique()))}")
    differ = setting_differences(ours, reference, models)
    lines.append("  likely causes: " + "; ".join(CAUSES))
    if documents:
        lines.append("  documents that differ from the reference's (the chosen documents' hash; a re-homed or "
                     "re-ordered dataset): " + "; ".join(documents))
    if differ:
        lines.append("  settings that differ from the reference's: " + "; ".join(differ))
    return lines


def document_differences(ours: pd.DataFrame, reference: pd.DataFrame, models: list[str]) -> list[str]:
    """``benchmark (what differs)`` where the calibration models' documents (the ``dataset`` records of
    their provenance) differ from the reference's; the published file records none."""
    from .pipeline import datasets

    def records(frame: pd.DataFrame) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for bench, prov in frame[frame["model"].isin(models)][["benchmark", "provenance"]].itertuples(index=False):
            rec = (prov or {}).get("dataset")
            if rec and bench not in out:
                out[bench] = rec
        return out

    return datasets.differences(records(ours), records(reference))


def setting_differences(ours: pd.DataFrame, reference: pd.DataFrame, models: list[str]) -> list[str]:
    """``key: ours vs reference`` for each evaluation setting the provenance records otherwise."""
    def settings(frame: pd.DataFrame) -> dict:
        found: dict[str, set] = {}
        for prov in frame[frame["model"].isin(models)]["provenance"]:
            prov = prov or {}
            for key in PROVENANCE_KEYS:
                if key in prov:
                    found.setdefault(key, set()).add(str(prov[key]))
            version = (prov.get("versions") or {}).get("lm_eval")
            if version:
                found.setdefault("lm_eval", set()).add(str(version))
        return found

    mine, theirs = settings(ours), settings(reference)
    return [f"{k}: {', '.join(sorted(mine[k]))} here vs {', '.join(sorted(theirs[k]))}" for k in mine
            if k in theirs and mine[k] != theirs[k]]


# ---------------------------------------------------------------------------------------------
# 2. where do the new models stand?


def _oriented(frame: pd.DataFrame, protocol: str, benchmarks: list[str]) -> pd.DataFrame:
    mat = store.matrix(frame, protocol).reindex(columns=benchmarks)
    return store.orient(mat, store.directions(frame))


def _rank_of(value: float, others: np.ndarray) -> float:
    """Rank (1 = best) of ``value`` among ``others`` and itself; ties count half."""
    others = others[np.isfinite(others)]
    return float(1 + (others > value).sum() + 0.5 * (others == value).sum())


def rank_table(ref: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Per new model (rows of ``new``) and benchmark its rank among the reference models (rows of
    ``ref``) and the new models, on oriented scores (higher is better); NaN where it has no score."""
    out = pd.DataFrame(np.nan, index=new.index, columns=new.columns)
    for bench in new.columns:
        for model in new.index:
            value = new.at[model, bench]
            if np.isfinite(value):
                others = np.concatenate([ref[bench].to_numpy(float), new[bench].drop(model).to_numpy(float)])
                out.at[model, bench] = _rank_of(value, others)
    return out


def mean_rank_draws(ref: pd.DataFrame, new: pd.DataFrame, model: str, n_boot: int, seed: int) -> dict:
    """Bootstrap draws of ``model``'s mean rank over benchmarks: ``benchmarks`` (benchmarks drawn with
    replacement) and ``models`` (reference models drawn with replacement, each draw re-ranked)."""
    ranks = rank_table(ref, new).loc[model].to_numpy(float)
    keep = np.isfinite(ranks)
    ranks, cols = ranks[keep], [c for c, k in zip(new.columns, keep) if k]
    over_benchmarks = uncertainty.mean_draws(ranks, n_boot, seed)
    r = ref[cols].to_numpy(float)                                    # reference models x benchmarks
    others = new.drop(index=model)[cols].to_numpy(float)
    mine = new.loc[model, cols].to_numpy(float)
    better = (r > mine[None, :]).astype(float) + 0.5 * (r == mine[None, :])       # NaN compares False: 0
    fixed = 1 + ((others > mine[None, :]) + 0.5 * (others == mine[None, :])).sum(axis=0)
    counts = uncertainty.draws(len(r), n_boot, seed + 1)             # (draws, reference models)
    over_models = (fixed[None, :] + counts @ better).mean(axis=1)
    return {"benchmarks": over_benchmarks, "models": over_models}


def project_pc1(ref: pd.DataFrame, new: pd.DataFrame) -> tuple[pd.Series, pd.Series] | None:
    """PC1 scores of the reference models (their own PCA) and of the new models projected onto it
    (standardised as the reference); None without a PCA. New models lacking a benchmark get NaN."""
    fit = structure.pca(ref)
    if fit is None:
        return None
    cols = list(fit.loadings.index)
    complete = ref.loc[fit.scores.index, cols]
    mean, std = complete.mean(), complete.std(ddof=0)
    z = (new[cols] - mean) / std
    return fit.scores["PC1"], (z @ fit.loadings["PC1"]).rename("PC1")


def placement_report(reference: pd.DataFrame, ours: pd.DataFrame, new_models: list[str],
                     calibration: list[str], benchmarks: list[str] | None = None, n_boot: int = 1000, seed: int = 0,
                     flops: dict[str, float] | None = None, store_root=None, reference_store=None,
                     min_models: int = 3) -> dict:
    """Notebook 08: the calibration check, then (only when it passes) the placement of ``new_models``.

    ``reference`` and ``ours`` are tidy frames; ``benchmarks`` defaults to the downstream benchmarks
    both hold. ``flops`` gives pre-training FLOPs (1e21) of new models (else ``store_root``'s
    metadata); the reference models' metadata comes from ``reference_store`` (None: the built-in
    tables). Returns ``calibration``, ``comparable``, ``placement`` (one row per new model),
    ``ranks`` (per benchmark), ``reference`` (the reference models among themselves), ``tau``,
    ``mean_ranks`` (:func:`_mean_ranks`), ``figure``, ``summary`` and ``lines``; when not comparable
    every placement table is None.
    """
    flops = dict(flops or {})
    present = set(reference["benchmark"]) & set(ours["benchmark"])
    if benchmarks is None:
        benchmarks = [b for b in agreement.split_benchmarks(sorted(present), store_root)[0]]
    missing = [m for m in new_models if m not in set(ours["model"])]
    if missing:
        raise store.StoreError(f"new model {missing[0]!r} has no result in this profile's store: run stages 02 and "
                               "03 first")
    check = calibration_check(ours, reference, calibration, benchmarks)
    summary = {"reference_models": int(reference["model"].nunique()), "new_models": list(new_models),
               "calibration_models": list(calibration), "benchmarks": list(benchmarks),
               "comparable": bool(check["comparable"]),
               "calibration": {k: check[k] for k in ("n_checks", "n_failed", "n_identical", "n_results", "bounds")}}
    out = {"calibration": check, "comparable": check["comparable"], "placement": None, "ranks": None,
           "reference": None, "tau": None, "mean_ranks": None, "figure": None, "summary": summary,
           "lines": list(check["lines"])}
    if not check["comparable"]:
        summary["placement"] = None
        return out
    ref_models = sorted(set(reference["model"]))
    new_frame = ours[ours["model"].isin(new_models)]
    rows, per_bench, figure, taus, ref_tables, ref_mats = [], [], {}, [], {}, {}
    for protocol in store.PROTOCOLS:
        ref_mat = ref_mats[protocol] = _oriented(reference[reference["model"].isin(ref_models)], protocol, benchmarks)
        new_mat = _oriented(pd.concat([new_frame, reference]), protocol, benchmarks).loc[new_models]
        ranks = rank_table(ref_mat, new_mat)
        raw = store.matrix(new_frame, protocol).reindex(index=new_models, columns=benchmarks)
        for model in new_models:
            for bench in benchmarks:
                per_bench.append({"model": model, "protocol": protocol, "benchmark": bench,
                                  "score": raw.at[model, bench],
                                  "rank": ranks.at[model, bench],
                                  "of": int(np.isfinite(ref_mat[bench]).sum() + np.isfinite(new_mat[bench]).sum())})
        base_tau = agreement.mean_tau(agreement.pair_table(ref_mat, min_models))
        own_rank = ref_mat.apply(agreement.ranks).mean(axis=1)
        pc = project_pc1(ref_mat, new_mat)
        ref_tables[protocol] = pd.DataFrame({"mean_rank": own_rank,
                                             "pc1": pc[0] if pc else np.nan}).rename_axis("model")
        taus.append({"protocol": protocol, "models": "reference", "mean_tau": base_tau})
        with_all = agreement.mean_tau(agreement.pair_table(pd.concat([ref_mat, new_mat]), min_models))
        taus.append({"protocol": protocol, "models": "reference + all new", "mean_tau": with_all})
        figure[protocol] = {"reference": own_rank, "new": {}}
        for model in new_models:
            draws = mean_rank_draws(ref_mat, new_mat, model, n_boot, seed)
            point = float(np.nanmean(ranks.loc[model]))
            tau = agreement.mean_tau(agreement.pair_table(pd.concat([ref_mat, new_mat.loc[[model]]]), min_models))
            taus.append({"protocol": protocol, "models": f"reference + {model}", "mean_tau": tau})
            rows.append({"model": model, "protocol": protocol, "mean_rank": point,
                         "ci_benchmarks": uncertainty.interval(draws["benchmarks"]),
                         "ci_models": uncertainty.interval(draws["models"]),
                         "of": len(ref_mat) + len(new_mat), "n_benchmarks": int(np.isfinite(ranks.loc[model]).sum()),
                         "tau_change": tau - base_tau,
                         "pc1": float(pc[1][model]) if pc else math.nan,
                         "pc1_rank": _rank_of(float(pc[1][model]), pc[0].to_numpy(float)) if pc else math.nan,
                         "draws": draws})
            figure[protocol]["new"][model] = (point, rows[-1]["ci_models"])
    long = pd.DataFrame(rows)
    table = _wide(long, new_models)
    table["flops_1e21"] = [flops.get(m, _meta_flops(m, store_root)) for m in new_models]
    try:
        ref_frame = metadata.models_frame(ref_models, reference_store, need_compute=reference_store is None)
    except (metadata.MetadataError, paths.DataMissing):
        ref_frame = None
    compute = _compute(ref_tables, table, ref_frame)
    out.update(placement=table, ranks=pd.DataFrame(per_bench), reference=ref_tables, tau=pd.DataFrame(taus),
               figure={"ranks": figure, "compute": compute},
               mean_ranks=_mean_ranks(ref_mats, long, table, n_boot, seed))
    summary["placement"] = {m: jsonable(table.loc[m].to_dict()) for m in table.index}
    summary["reference_mean_tau"] = {p: next(t["mean_tau"] for t in taus if t["protocol"] == p
                                             and t["models"] == "reference") for p in store.PROTOCOLS}
    summary["n_boot"], summary["seed"] = n_boot, seed
    summary["mean_ranks"] = {"unit": "benchmarks", "n_boot": n_boot, "seed": seed, "level": uncertainty.LEVEL,
                             "baseline": store.DIRECT, "n_benchmarks": len(benchmarks)}
    out["lines"] += [placement_line(m, table.loc[m]) for m in new_models]
    return out


def _mean_ranks(ref_mats: dict[str, pd.DataFrame], long: pd.DataFrame, table: pd.DataFrame, n_boot: int,
                seed: int) -> pd.DataFrame:
    """Every model's mean rank in the long form of :func:`lib.analysis.agreement.mean_ranks` (what the
    leaderboard reads): the reference models among themselves, then the new ones (``placed``)."""
    ref = agreement.mean_ranks(ref_mats, n_boot, seed).assign(placed=False)
    new = long.assign(placed=True, mean_rank_lo=[ci[0] for ci in long["ci_benchmarks"]],
                      mean_rank_hi=[ci[1] for ci in long["ci_benchmarks"]])
    shifted = new["protocol"] != store.DIRECT
    moved = table.loc[new.loc[shifted, "model"]]
    new.loc[shifted, "rank_shift"] = moved["rank_shift"].to_numpy()
    new.loc[shifted, "rank_shift_lo"] = [ci[0] for ci in moved["rank_shift_ci"]]
    new.loc[shifted, "rank_shift_hi"] = [ci[1] for ci in moved["rank_shift_ci"]]
    return pd.concat([ref, new.reindex(columns=ref.columns)], ignore_index=True)


def _meta_flops(model: str, store_root) -> float:
    try:
        value = metadata.model_info(model, store_root).flops_1e21
    except metadata.MetadataError:
        return math.nan
    return float(value) if value else math.nan


def _wide(long: pd.DataFrame, models: list[str]) -> pd.DataFrame:
    """One row per new model: per protocol mean rank, its intervals, change in mean tau, PC1; the shift."""
    table = pd.DataFrame(index=pd.Index(models, name="model"))
    for protocol, part in long.groupby("protocol", sort=False):
        part = part.set_index("model")
        short = "direct" if protocol == store.DIRECT else "tbt"
        for column in ("mean_rank", "ci_benchmarks", "ci_models", "tau_change", "pc1", "pc1_rank"):
            table[f"{short}_{column}"] = part[column]
        table["of"] = part["of"]
        table["n_benchmarks"] = part["n_benchmarks"]
    table["rank_shift"] = table["tbt_mean_rank"] - table["direct_mean_rank"]
    draws = long.set_index(["model", "protocol"])["draws"]
    table["rank_shift_ci"] = [uncertainty.interval(draws[(m, store.TBT)]["benchmarks"]
                                                   - draws[(m, store.DIRECT)]["benchmarks"]) for m in models]
    return table


def _compute(ref_tables: dict, table: pd.DataFrame, ref_frame: pd.DataFrame | None) -> dict | None:
    """PC1 (train-before-test) against log10 pre-training FLOPs (None with too few FLOPs)."""
    if ref_frame is None:
        return None
    pc = ref_tables[store.TBT]["pc1"]
    fl = ref_frame["flops_1e21"].reindex(pc.index)
    both = pd.concat({"pc1": pc, "flops": fl}, axis=1).dropna()
    both = both[both["flops"] > 0]
    if len(both) < 3:
        return None
    fit = stats.linregress(np.log10(both["flops"]), both["pc1"])
    new = table[["tbt_pc1", "flops_1e21"]].dropna()
    new = new[new["flops_1e21"] > 0]
    predicted = fit.intercept + fit.slope * np.log10(new["flops_1e21"])
    table.loc[new.index, "tbt_pc1_vs_compute"] = new["tbt_pc1"] - predicted
    return {"reference": both, "new": new.rename(columns={"tbt_pc1": "pc1", "flops_1e21": "flops"}),
            "slope": float(fit.slope), "intercept": float(fit.intercept), "r": float(fit.rvalue)}


def placement_line(model: str, row: pd.Series) -> str:
    """``<model>: direct 12.0 of 63 [8.1, 15.2] -> train-before-test 20.5 [..] (shift +8.5)``."""
    def part(short: str) -> str:
        lo, hi = row[f"{short}_ci_benchmarks"]
        return f"{row[f'{short}_mean_rank']:.1f} [{lo:.1f}, {hi:.1f}]"
    return (f"{model}: mean rank of {int(row['of'])}: direct {part('direct')} -> train-before-test {part('tbt')} "
            f"(shift {row['rank_shift']:+.1f}; intervals over benchmarks)")


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The placement table as a person reads it: one row per new model, intervals as text."""
    def ci(v):
        return f"[{v[0]:.1f}, {v[1]:.1f}]"
    out = pd.DataFrame(index=table.index)
    for short, label in (("direct", "direct"), ("tbt", "train-before-test")):
        out[f"{label} mean rank"] = table[f"{short}_mean_rank"].map("{:.1f}".format)
        out[f"{label} 95% (benchmarks)"] = table[f"{short}_ci_benchmarks"].map(ci)
        out[f"{label} 95% (ref. models)"] = table[f"{short}_ci_models"].map(ci)
    out["of"] = table["of"]
    out["shift"] = table["rank_shift"].map("{:+.1f}".format) + " " + table["rank_shift_ci"].map(ci)
    out["Δ mean τ direct"] = table["direct_tau_change"].map("{:+.3f}".format)
    out["Δ mean τ tbt"] = table["tbt_tau_change"].map("{:+.3f}".format)
    out["PC1 rank (tbt)"] = table["tbt_pc1_rank"].map(lambda v: "n/a" if not np.isfinite(v) else f"{v:.0f}")
    return out


def tex_numbers(summary: dict) -> dict:
    """numbers.tex macros: the verdict, and per new model its mean ranks and shift."""
    out = {"comparable": "yes" if summary["comparable"] else "no",
           "calibration_failed": summary["calibration"]["n_failed"],
           "calibration_checks": summary["calibration"]["n_checks"]}
    for i, row in enumerate((summary.get("placement") or {}).values(), start=1):
        out[f"new{i}_direct_rank"] = row["direct_mean_rank"]
        out[f"new{i}_tbt_rank"] = row["tbt_mean_rank"]
        out[f"new{i}_shift"] = row["rank_shift"]
    return out


# ---------------------------------------------------------------------------------------------
# the profile


def store_name(entry: str) -> str:
    """A profile's model as the store names it (a local folder by its own name)."""
    path = Path(entry).expanduser()
    if path.is_absolute() or entry.startswith(".") or (path / "config.json").exists():
        return path.name
    return entry


def for_profile(profile: str, n_boot: int = 1000, seed: int = 0, flops: dict[str, float] | None = None) -> dict:
    """:func:`placement_report` of placement profile ``profile``: its store against its reference."""
    prof = params.load_profile(profile, validate=False)
    if prof.reference is None:
        raise params.ParamsError(f"{prof.path}: no `reference:` key: notebook 08 places a profile's models among a "
                                 "reference's (params/place_mini.yaml shows how)")
    root = paths.store_dir(profile)
    ref_root = None if prof.reference == params.PUBLISHED else paths.store_dir(prof.reference)
    rep = placement_report(reference_results(prof.reference), store.load(root),
                           [store_name(m) for m in params.new_models(prof)],
                           params.calibration_models(prof), n_boot=n_boot, seed=seed, flops=flops,
                           store_root=root, reference_store=ref_root)
    rep["summary"]["reference"] = prof.reference
    return rep


# ---------------------------------------------------------------------------------------------
# figures (the repository's style, lib.plots)

NEW_COLORS = ("#dd7a2f", "#2aa0a4", "#8f2d56", "#b8a21a", "#1f4e79", "#3f9a55")   # one per new model


def rank_figure(data: dict, reference: str = "reference"):
    """Mean rank over benchmarks, direct evaluation (x) against train-before-test (y)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from . import plots

    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 3.3), layout="constrained")
    ref_d, ref_t = data[store.DIRECT]["reference"], data[store.TBT]["reference"]
    ax.scatter(ref_d, ref_t.reindex(ref_d.index), s=12, color="0.6", linewidths=0, label=reference)
    top = max(ref_d.max(), ref_t.max()) + len(data[store.DIRECT]["new"]) + 1
    ax.plot([1, top], [1, top], color="0.75", lw=0.8, zorder=0)
    handles = [Line2D([], [], marker="o", lw=0, color="0.6", ms=4)]
    labels = [f"{plots.display(reference)} models"]
    for i, model in enumerate(data[store.DIRECT]["new"]):
        (xd, cid), (yt, cit) = data[store.DIRECT]["new"][model], data[store.TBT]["new"][model]
        color = NEW_COLORS[i % len(NEW_COLORS)]
        ax.errorbar([xd], [yt], xerr=[[xd - cid[0]], [cid[1] - xd]], yerr=[[yt - cit[0]], [cit[1] - yt]],
                    fmt="D", ms=5, color=color, elinewidth=0.9, capsize=2)
        handles.append(Line2D([], [], marker="D", lw=0, color=color, ms=5))
        labels.append(plots.display(model))
    ax.set_xlim(top, 0.5)
    ax.set_ylim(top, 0.5)
    ax.set_xlabel("mean rank, direct evaluation")
    ax.set_ylabel("mean rank, train-before-test")
    ax.set_title(plots.wrap(f"New models among {plots.display(reference)}'s", plots.WIDTH_SINGLE - 0.3))
    plots.legend_below(fig, handles, labels)
    return plots.set_caption(fig, (
        "Where the new models stand: mean rank over benchmarks (1 = best, top right) under direct evaluation "
        "and under train-before-test. Grey: the reference models ranked among themselves; coloured: each new "
        "model ranked among the reference and the new models, with 95 % bootstrap intervals over the reference "
        "models (drawn with replacement, each draw re-ranked). "
        "Above the diagonal a model gains places under train-before-test."))


def compute_figure(compute: dict, reference: str = "reference"):
    """PC1 of the train-before-test scores against pre-training FLOPs (its caption says more)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from . import plots
    from .analysis.figures import _narrow_log_ticks as narrow_log_ticks

    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 2.9), layout="constrained")
    ref = compute["reference"]
    ax.scatter(ref["flops"] * 1e21, ref["pc1"], s=12, color="0.6", linewidths=0)
    xs = np.linspace(np.log10(ref["flops"].min()), np.log10(ref["flops"].max()), 50)
    ax.plot(10 ** xs * 1e21, compute["intercept"] + compute["slope"] * xs, color="0.45", lw=0.9)
    handles = [Line2D([], [], marker="o", lw=0, color="0.6", ms=4), Line2D([], [], color="0.45", lw=0.9)]
    labels = [f"{plots.display(reference)} models", f"fit (r = {compute['r']:.2f})"]
    for i, (model, row) in enumerate(compute["new"].iterrows()):
        color = NEW_COLORS[i % len(NEW_COLORS)]
        ax.scatter([row["flops"] * 1e21], [row["pc1"]], marker="D", s=26, color=color)
        handles.append(Line2D([], [], marker="D", lw=0, color=color, ms=5))
        labels.append(plots.display(model))
    ax.set_xscale("log")
    narrow_log_ticks(ax, [*(ref["flops"] * 1e21), *(compute["new"]["flops"] * 1e21)])
    ax.set_title("PC1 against pre-training compute")
    ax.set_xlabel("pre-training compute (FLOPs)")
    ax.set_ylabel("PC1, train-before-test")
    # two columns: three overflowed the single-column width by 0.07 in with the mini zoo's model names
    plots.legend_below(fig, handles, labels, ncol=min(2, len(labels)))
    return plots.set_caption(fig, (
        "The new models against pre-training compute: first principal component of the train-before-test "
        "scores (fitted on the reference models alone, the new models projected onto it) over pre-training "
        "FLOPs, with the reference models' least-squares line. A new model above the line does better than "
        "its compute predicts."))
