"""Why does direct evaluation disagree? The tests only a controlled world allows (notebook 04).

The zoo (:mod:`lib.miniworld.zoo`) records for every model its kind of preparation (``base``,
``sham``, ``format``, ``instruct``, ``contam``, ``answers``), its dose (the share of its last phase of
pre-training that was preparation), the tasks it was prepared for and its base model. Three
analyses read that record and the per-item results of both protocols:

(i) :func:`agreement_subsets`: mean Kendall tau between benchmarks under both protocols over every
    downstream benchmark and over only those the unprepared models can attempt under direct
    evaluation (the measurement-quality check of :mod:`lib.analysis.noise` on the base models:
    benchmarks at the floor, where no unprepared model answers in the format, are left out), for
    the base models and for the whole zoo; 95 % intervals and the paired gain from a bootstrap over
    models.
(ii) :func:`composition_agreement`: the base zoo with 0, a third, two thirds or all of its twins
    swapped in for their bases (every subset of that size, or a seeded sample of them), and with
    the twins of one dose or one kind swapped in; mean tau under both protocols and its change from
    the base zoo. The mechanism predicts that direct-evaluation agreement falls as prepared models
    come in and train-before-test agreement stays.
(iii) :func:`leads`: each prepared model's (and sham's) lead over its base on the tasks it was
    prepared for, under both protocols, and its rank shift; pooled by kind and by (kind, dose);
    :func:`task_leads` the same task by task, pooled per kind over the rows with a clear lead. The
    mechanism predicts that the lead of format exposure and instruction-style preparation shrinks
    by at least half under train-before-test; contamination's may not; the answer-contaminated
    twin's survives (positive control); the sham's is near 0 under both (negative control).

Intervals of (ii) and (iii) come from a bootstrap over *test items* (the composition of the zoo is
the manipulation, so models are not resampled): each draw resamples every benchmark's test items
with replacement, the same items for every model and both protocols, so a protocol difference or a
change from the base zoo is a paired difference.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd

from .. import layout, plots, store
from ..analysis import agreement, noise, uncertainty
from ..store import DIRECT, PROTOCOLS, TBT

SHARES = (0.0, 1 / 3, 2 / 3, 1.0)
MAX_SUBSETS = 60              # compositions per share: every subset when there are fewer, else a seeded sample
SHRINK = 0.5                  # the mechanism: the lead falls by at least half under train-before-test


# ----------------------------------------------------------------------------- the zoo's record
def design(store_root: str | Path) -> pd.DataFrame:
    """One row per model of the zoo: kind, dose, base, family, size, targets (the benchmarks it was
    prepared for; every downstream benchmark for a sham, which is compared on all of them)."""
    rows = []
    for model, rec in store.read_meta(store_root, "models").items():
        extra = rec.get("extra") or {}
        if "kind" not in extra:
            continue
        rows.append({"model": model, "kind": extra["kind"], "dose": float(extra.get("dose", 0.0)),
                     "base": extra.get("base_model") or (model if extra["kind"] == "base" else None),
                     "family": rec.get("family"), "size": extra.get("size"),
                     "targets": sorted((extra.get("prepared") or {}).keys())})
    return pd.DataFrame(rows, columns=["model", "kind", "dose", "base", "family", "size", "targets"])


def twins(des: pd.DataFrame) -> dict[str, str]:
    """``{base: twin}`` of the prepared twins (kinds format, instruct, contam), one per base."""
    part = des[des["kind"].isin(("format", "instruct", "contam"))]
    return dict(zip(part["base"], part["model"]))


# ----------------------------------------------------------------------------- items
class Items:
    """Per-item correctness of every (protocol, benchmark, model), aligned on the test items.

    ``values[p][b]`` is a (models x items) array in the order of ``models``; the items are those every
    model was scored on. Scores are item means (what the store holds for accuracy and exact match).
    """

    def __init__(self, work: str | Path, models: list[str], benchmarks: list[str]):
        self.models, self.benchmarks = list(models), list(benchmarks)
        self.values: dict[str, dict[str, np.ndarray]] = {}
        for p in PROTOCOLS:
            self.values[p] = {}
            for b in benchmarks:
                rows = [layout.read_items(layout.items_path(work, p, b, m)) for m in models]
                common = set.intersection(*(set(map(str, r["doc_ids"])) for r in rows))
                order = sorted(common)
                self.values[p][b] = np.array([[dict(zip(map(str, r["doc_ids"]), r["correct"]))[i] for i in order]
                                              for r in rows], float)
        ids = {b: self.values[DIRECT][b].shape[1] for b in benchmarks}
        for b in benchmarks:
            if self.values[TBT][b].shape[1] != ids[b]:
                raise ValueError(f"benchmark {b}: the protocols' per-item files cover different test items")

    def scores(self, n_boot: int, seed: int) -> dict[str, np.ndarray]:
        """``{protocol: (1 + n_boot, models, benchmarks)}``: row 0 the scores, then one row per item
        bootstrap draw (the same draws for both protocols)."""
        out = {p: np.empty((1 + n_boot, len(self.models), len(self.benchmarks))) for p in PROTOCOLS}
        for j, b in enumerate(self.benchmarks):
            n = self.values[DIRECT][b].shape[1]
            counts = np.vstack([np.ones((1, n)), uncertainty.draws(n, n_boot, seed + j)]).astype(np.float64)
            for p in PROTOCOLS:
                # whole counts first (0/1 items x whole draw counts: exact in any summation order), then
                # one division: two models with the same count get the same score, bit for bit, so the
                # ties that Kendall's tau sees do not depend on how a BLAS library orders its sums
                out[p][:, :, j] = (self.values[p][b] @ counts.T).T / n
        return out


def _mean_tau(s: np.ndarray) -> np.ndarray:
    """Mean Kendall tau-b over benchmark pairs for each draw of ``s`` (draws, models, benchmarks):
    tau-b(a, b) = sum_p s_a s_b / sqrt(sum_p |s_a| sum_p |s_b|) over the model pairs p, s = the sign
    of the score difference. Pairs with a benchmark constant on the models are left out (NaN when
    no pair is defined)."""
    i, j = np.triu_indices(s.shape[1], 1)
    sign = np.sign(s[:, i, :] - s[:, j, :])                       # draws, model pairs, benchmarks
    num = np.einsum("dpa,dpb->dab", sign, sign)
    untied = np.abs(sign).sum(axis=1)                             # draws, benchmarks
    a, b = np.triu_indices(s.shape[2], 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = num[:, a, b] / np.sqrt(untied[:, a] * untied[:, b])
        tau[~np.isfinite(tau)] = np.nan
        return np.nanmean(tau, axis=1) if tau.shape[1] else np.full(len(s), np.nan)


# ----------------------------------------------------------------------------- (i) which benchmarks
def attemptable(df: pd.DataFrame, store_root: str | Path, work: str | Path, models: list[str],
                benchmarks: list[str], seed: int = 0) -> list[str]:
    """The benchmarks ``models`` can attempt under direct evaluation: not flagged by the
    measurement-quality check (mean at least chance + 0.1 and below 0.9, a typical difference of
    models larger than the noise, split-half reliability at least 0.8; :mod:`lib.analysis.noise`)."""
    meas = {DIRECT: noise.load_measurements(df, DIRECT, benchmarks, work, models)}
    rel = {DIRECT: noise.reliabilities(meas[DIRECT], seed=seed)}
    chance = {b: store.read_meta(store_root, "benchmarks").get(b, {}).get("chance") for b in benchmarks}
    quality = noise.quality_table(meas, chance, rel)
    flagged = set(quality.loc[quality["cannot_rank"], "benchmark"])
    return [b for b in benchmarks if b not in flagged]


def agreement_subsets(mats: dict[str, pd.DataFrame], sets: dict[str, list[str]], model_sets: dict[str, list[str]],
                      n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """(i): mean tau per protocol for every (model set, benchmark set), 95 % intervals and the paired
    gain from a bootstrap over the set's models (:mod:`lib.analysis.uncertainty`)."""
    rows = []
    for mlabel, members in model_sets.items():
        w = np.vstack([np.ones((1, len(members)), np.float32), uncertainty.draws(len(members), n_boot, seed)])
        for blabel, benches in sets.items():
            row = {"models": mlabel, "benchmarks": blabel, "n_models": len(members), "n_benchmarks": len(benches),
                   "names": ", ".join(benches)}
            if len(benches) < 2:
                rows.append(row)
                continue
            taus = {p: uncertainty.mean_pair_tau(mats[p].loc[members, benches].to_numpy(float), w) for p in PROTOCOLS}
            for p in PROTOCOLS:
                lo, hi = uncertainty.interval(taus[p][1:])
                row.update({f"tau_{p}": float(taus[p][0]), f"tau_{p}_lo": lo, f"tau_{p}_hi": hi})
            gain = taus[TBT] - taus[DIRECT]
            lo, hi = uncertainty.interval(gain[1:])
            row.update(gain=float(gain[0]), gain_lo=lo, gain_hi=hi)
            rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- (ii) the zoo's composition
def compositions(des: pd.DataFrame, seed: int = 0) -> list[dict]:
    """The zoos of (ii): ``{"zoo", "share", "kind", "dose", "swapped": [bases], "models": [...]}``.

    The base zoo holds every base model. A share s swaps round(s x n) of the n twin-holding bases
    for their twins, every such subset (or :data:`MAX_SUBSETS` of them, seeded); a dose or a kind
    swaps all twins of that dose or kind."""
    bases = sorted(des.loc[des["kind"] == "base", "model"])
    twin_of = twins(des)
    holders = sorted(twin_of)
    info = des.set_index("model")
    rng = np.random.default_rng(seed)

    def zoo(label, share, kind, dose, swapped):
        return {"zoo": label, "share": share, "kind": kind, "dose": dose, "swapped": list(swapped),
                "models": [twin_of[b] if b in swapped else b for b in bases]}

    out = []
    for share in SHARES:
        k = int(round(share * len(holders)))
        subsets = list(itertools.combinations(holders, k))
        if len(subsets) > MAX_SUBSETS:
            subsets = [subsets[i] for i in sorted(rng.choice(len(subsets), MAX_SUBSETS, replace=False))]
        out += [zoo(f"share {share:.2f}", share, "all", np.nan, s) for s in subsets]
    for dose in sorted({info.at[t, "dose"] for t in twin_of.values()}):
        chosen = [b for b, t in twin_of.items() if info.at[t, "dose"] == dose]
        out.append(zoo(f"dose {dose:g}", len(chosen) / len(holders), "all", dose, chosen))
    for kind in sorted({info.at[t, "kind"] for t in twin_of.values()}):
        chosen = [b for b, t in twin_of.items() if info.at[t, "kind"] == kind]
        out.append(zoo(f"kind {kind}", len(chosen) / len(holders), kind, np.nan, chosen))
    return out


def composition_agreement(items: Items, des: pd.DataFrame, sets: dict[str, list[str]], n_boot: int = 1000,
                          seed: int = 0) -> pd.DataFrame:
    """(ii): mean tau under both protocols for each zoo of :func:`compositions` (averaged over the
    subsets of a share) and each benchmark set, with its change from the base zoo; 95 % intervals
    from the item bootstrap (paired: the same draws for every zoo and both protocols)."""
    scores = items.scores(n_boot, seed)
    index = {m: i for i, m in enumerate(items.models)}
    comps = compositions(des, seed)
    rows = []
    for blabel, benches in sets.items():
        cols = [items.benchmarks.index(b) for b in benches]
        if len(cols) < 2:
            continue
        taus = {}
        for comp in comps:
            rows_m = [index[m] for m in comp["models"]]
            taus.setdefault(comp["zoo"], []).append(
                {p: _mean_tau(scores[p][:, rows_m][:, :, cols]) for p in PROTOCOLS})
        base = {p: np.mean([t[p] for t in taus["share 0.00"]], axis=0) for p in PROTOCOLS}
        seen = set()
        for comp in comps:
            if comp["zoo"] in seen:
                continue
            seen.add(comp["zoo"])
            mean = {p: np.mean([t[p] for t in taus[comp["zoo"]]], axis=0) for p in PROTOCOLS}
            row = {"benchmarks": blabel, "zoo": comp["zoo"], "share": comp["share"], "kind": comp["kind"],
                   "dose": comp["dose"], "n_zoos": len(taus[comp["zoo"]]), "n_models": len(comp["models"])}
            for p in PROTOCOLS:
                change = mean[p] - base[p]
                row.update({f"tau_{p}": float(mean[p][0]), **_ci(f"tau_{p}", mean[p][1:]),
                            f"change_{p}": float(change[0]), **_ci(f"change_{p}", change[1:])})
            gap = (mean[TBT] - base[TBT]) - (mean[DIRECT] - base[DIRECT])
            row.update({"tbt_minus_direct_change": float(gap[0]), **_ci("tbt_minus_direct_change", gap[1:])})
            rows.append(row)
    return pd.DataFrame(rows)


def _ci(name: str, values: np.ndarray) -> dict:
    lo, hi = uncertainty.interval(values)
    return {f"{name}_lo": lo, f"{name}_hi": hi}


# ----------------------------------------------------------------------------- (iii) leads
def leads(items: Items, des: pd.DataFrame, downstream: list[str], n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """(iii): per model that is not a base, its mean lead over its base on its targets (a sham: on
    every downstream benchmark) under each protocol, the lead kept under train-before-test
    (``kept`` = lead_tbt / lead_direct), the mean rank among the whole zoo on its targets under each
    protocol and the ``shift`` (positive: it falls once everyone is fine-tuned); then pooled rows
    per kind and per (kind, dose). 95 % intervals from the item bootstrap."""
    scores = items.scores(n_boot, seed)
    index = {m: i for i, m in enumerate(items.models)}
    rows, per_model = [], {}
    for r in des[des["kind"] != "base"].itertuples():
        if r.model not in index or r.base not in index:
            continue
        targets = [b for b in (r.targets or downstream) if b in downstream]
        cols = [items.benchmarks.index(b) for b in targets]
        lead = {p: (scores[p][:, index[r.model]][:, cols] - scores[p][:, index[r.base]][:, cols]).mean(axis=1)
                for p in PROTOCOLS}
        rank = {p: _rank(scores[p][0][:, cols], index[r.model]) for p in PROTOCOLS}
        per_model[r.model] = lead
        rows.append({"model": r.model, "base": r.base, "kind": r.kind, "dose": r.dose, "targets": ", ".join(targets),
                     **_lead_cols(lead), **{f"rank_{p}": rank[p] for p in PROTOCOLS},
                     "shift": rank[TBT] - rank[DIRECT]})
    table = pd.DataFrame(rows)
    pooled = []
    for keys, part in [((k, np.nan), g) for k, g in table.groupby("kind")] + \
            [(k, g) for k, g in table.groupby(["kind", "dose"]) if g["kind"].iloc[0] in ("format", "instruct",
                                                                                       "contam")]:
        kind, dose = keys
        lead = {p: np.mean([per_model[m][p] for m in part["model"]], axis=0) for p in PROTOCOLS}
        pooled.append({"model": f"{kind} (all doses)" if np.isnan(dose) else f"{kind} dose {dose:g}", "base": "",
                       "kind": kind, "dose": dose, "targets": f"{len(part)} model(s)", **_lead_cols(lead),
                       "shift": float(part["shift"].mean())})
    return pd.concat([table, pd.DataFrame(pooled)], ignore_index=True)


def task_leads(items: Items, des: pd.DataFrame, downstream: list[str], n_boot: int = 1000,
               seed: int = 0) -> pd.DataFrame:
    """(iii) task by task: each twin's lead over its base on each task it was prepared for, under
    both protocols (``z_direct``, ``kept`` as in :func:`leads`), flagged ``clear`` where the
    direct-evaluation lead is at least :data:`LEAD_MIN` at z > :data:`LEAD_Z`; then per kind the
    pooled lead of its clear rows (``<kind> (clear leads)``): whether fine-tuning erases a lead can
    only be read where there is one. Same item bootstrap (and draws) as :func:`leads`."""
    scores = items.scores(n_boot, seed)
    index = {m: i for i, m in enumerate(items.models)}
    rows, per_row = [], []
    for r in des[des["kind"].isin(("format", "instruct", "contam", "answers"))].itertuples():
        if r.model not in index or r.base not in index:
            continue
        for b in [b for b in r.targets if b in downstream]:
            c = items.benchmarks.index(b)
            lead = {p: scores[p][:, index[r.model], c] - scores[p][:, index[r.base], c] for p in PROTOCOLS}
            cols = _lead_cols(lead)
            clear = cols[f"lead_{DIRECT}"] >= LEAD_MIN and cols["z_direct"] > LEAD_Z
            rows.append({"model": r.model, "base": r.base, "kind": r.kind, "dose": r.dose, "task": b, **cols,
                         "clear": bool(clear)})
            per_row.append(lead)
    table = pd.DataFrame(rows)
    pooled = []
    if len(table):
        for kind, part in table[table["clear"]].groupby("kind"):
            lead = {p: np.mean([per_row[i][p] for i in part.index], axis=0) for p in PROTOCOLS}
            pooled.append({"model": f"{kind} (clear leads)", "base": "", "kind": kind, "dose": np.nan,
                           "task": f"{len(part)} (twin, task) rows", **_lead_cols(lead), "clear": True})
    return pd.concat([table, pd.DataFrame(pooled)], ignore_index=True)


def _lead_cols(lead: dict[str, np.ndarray]) -> dict:
    out = {}
    for p in PROTOCOLS:
        out.update({f"lead_{p}": float(lead[p][0]), **_ci(f"lead_{p}", lead[p][1:])})
    with np.errstate(invalid="ignore", divide="ignore"):
        kept = lead[TBT] / lead[DIRECT]
    drop = lead[DIRECT] - lead[TBT]
    se = float(np.std(lead[DIRECT][1:]))
    out.update({"z_direct": float(lead[DIRECT][0] / se) if se > 0 else np.nan,
                "kept": float(kept[0]), **_ci("kept", kept[1:]), "drop": float(drop[0]), **_ci("drop", drop[1:])})
    return out


def _rank(scores: np.ndarray, row: int) -> float:
    """Mean rank (1 = best, ties averaged) of model ``row`` over the columns of (models x benchmarks)."""
    return float(np.mean([pd.Series(scores[:, c]).rank(ascending=False, method="average").iloc[row]
                          for c in range(scores.shape[1])]))


# ----------------------------------------------------------------------------- health of the manipulation
LEAD_MIN = 0.10               # P1: the highest dose leads its base by at least this much ...
LEAD_Z = 3.0                  # ... at this many standard errors (item bootstrap)
SHAM_MAX = 0.03               # P1: a sham's lead stays within this of 0


def manipulation_check(lead_table: pd.DataFrame, des: pd.DataFrame) -> dict:
    """P1 from the per-model leads: does every kind's highest-dose twin lead its base by at least
    :data:`LEAD_MIN` at z > :data:`LEAD_Z` under direct evaluation on what it was prepared for, and
    do the shams stay within :data:`SHAM_MAX`? (Perplexity: :func:`lib.miniworld.analysis.twin_health`.)"""
    rows = lead_table[lead_table["base"].astype(bool)]
    out = {}
    for kind, part in rows.groupby("kind"):
        if kind == "sham":
            out[kind] = {"n": int(len(part)), "max_abs_lead_direct": float(part[f"lead_{DIRECT}"].abs().max()),
                         "ok": bool((part[f"lead_{DIRECT}"].abs() <= SHAM_MAX).all())}
            continue
        top = part[part["dose"] == part["dose"].max()]
        out[kind] = {"dose": float(top["dose"].max()), "n": int(len(top)),
                     "lead_direct": float(top[f"lead_{DIRECT}"].mean()), "min_z": float(top["z_direct"].min()),
                     "ok": bool(((top[f"lead_{DIRECT}"] >= LEAD_MIN) & (top["z_direct"] > LEAD_Z)).all())}
    out["all_ok"] = all(v["ok"] for v in out.values() if isinstance(v, dict))
    return out


# ----------------------------------------------------------------------------- the report of notebook 04
def report(df: pd.DataFrame, store_root: str | Path, work: str | Path, n_boot: int = 1000, seed: int = 0) -> dict:
    """Everything notebook 04 shows of the controlled comparison: tables ``subsets`` (i),
    ``compositions`` (ii), ``leads`` (iii), the ``attemptable`` benchmarks, figures and a plain
    ``summary``."""
    des = design(store_root)
    downstream, _ = agreement.split_benchmarks(sorted(df["benchmark"].unique()), store_root)
    mats = {p: store.orient(store.matrix(df, p)[downstream], store.directions(df)) for p in PROTOCOLS}
    models = [m for m in des["model"] if all(m in mats[p].index for p in PROTOCOLS)]
    des = des[des["model"].isin(models)]
    bases = sorted(des.loc[des["kind"] == "base", "model"])
    can = attemptable(df, store_root, work, bases, downstream, seed)
    sets = {"all benchmarks": downstream, "attemptable": can}
    subsets = agreement_subsets(mats, sets, {"base models": bases, "whole zoo": models}, n_boot, seed)
    items = Items(work, models, downstream)
    comp = composition_agreement(items, des, sets, n_boot, seed)
    lead = leads(items, des, downstream, n_boot, seed)
    by_task = task_leads(items, des, downstream, n_boot, seed)
    check = manipulation_check(lead, des)
    summary = {"attemptable": can, "floor": [b for b in downstream if b not in can],
               "n_models": len(models), "n_bases": len(bases), "n_twins": len(twins(des)),
               "subsets": subsets.to_dict(orient="records"),
               "compositions": comp.drop(columns=[c for c in comp.columns if c.endswith(("_lo", "_hi"))
                                                  and not c.startswith("change")]).to_dict(orient="records"),
               "leads": lead.to_dict(orient="records"), "manipulation": check,
               "clear_task_leads": _clear_summary(by_task)}
    figs = {"causal_compositions": plot_compositions(comp), "causal_leads": plot_leads(lead)}
    return {"design": des, "subsets": subsets, "compositions": comp, "leads": lead, "task_leads": by_task,
            "attemptable": can, "summary": summary, "figures": figs}


def _clear_summary(by_task: pd.DataFrame) -> dict:
    """Per kind: how many of its (twin, task) rows lead clearly, and the pooled lead of those rows."""
    out = {}
    if not len(by_task):
        return out
    rows = by_task[by_task["base"].astype(bool)]
    for kind, part in rows.groupby("kind"):
        out[kind] = {"n_rows": int(len(part)), "n_clear": int(part["clear"].sum()),
                     "clear": sorted(f"{m} {t}" for m, t in zip(part.loc[part["clear"], "model"],
                                                                part.loc[part["clear"], "task"]))}
    for r in by_task[~by_task["base"].astype(bool)].itertuples():
        out.setdefault(r.kind, {}).update({k: float(getattr(r, k)) for k in (
            f"lead_{DIRECT}", f"lead_{TBT}", "kept", "kept_lo", "kept_hi", "drop", "drop_lo", "drop_hi")})
    return out


# ----------------------------------------------------------------------------- figures
KIND_MARKERS = {"format": "o", "instruct": "s", "contam": "^", "answers": "*", "sham": "x"}
KIND_LABELS = {"format": "format exposure", "instruct": "instruction-style", "contam": "contamination (train)",
               "answers": "test answers (positive control)", "sham": "sham (negative control)"}


def plot_compositions(comp: pd.DataFrame):
    """(ii): mean Kendall tau under both protocols as a third, two thirds and all of the twins are
    swapped in for their bases, one panel per benchmark set; 95 % item-bootstrap intervals."""
    import matplotlib.pyplot as plt

    sets = list(dict.fromkeys(comp["benchmarks"]))
    fig, axes = plt.subplots(1, len(sets), figsize=(plots.WIDTH_DOUBLE, 2.6), sharey=True, squeeze=False,
                             layout="constrained")
    for ax, label in zip(axes[0], sets):
        part = comp[(comp["benchmarks"] == label) & comp["zoo"].str.startswith("share")].sort_values("share")
        for i, p in enumerate(PROTOCOLS):
            y = part[f"tau_{p}"].to_numpy(float)
            err = np.abs(np.vstack([y - part[f"tau_{p}_lo"], part[f"tau_{p}_hi"] - y]))
            ax.errorbar(part["share"] + (i - 0.5) * 0.02, y, yerr=err, fmt="o-", ms=4, capsize=2,
                        color=plots.PROTOCOL_COLORS[p], label=plots.PROTOCOL_LABELS[p])
        ax.set_xticks(list(SHARES), ["0", "1/3", "2/3", "all"])
        ax.set_xlabel("share of twins swapped in for their bases")
        n = int(comp.loc[comp["benchmarks"] == label, "n_models"].iloc[0])
        ax.set_title(f"{label.capitalize()} ({n} models)")
    axes[0][0].set_ylabel("mean Kendall τ between benchmarks")
    handles, labels = axes[0][0].get_legend_handles_labels()
    plots.legend_below(fig, handles, labels)
    plots.title(fig, "Agreement as prepared twins replace their base models")
    return plots.set_caption(fig, (
        "Mean Kendall τ between benchmark rankings when none, a third, two thirds or all of the prepared twins are "
        "swapped in for their base models (the zoo keeps its size), under direct evaluation and train-before-test; "
        "one panel per benchmark set. Whiskers: 95 % intervals over item bootstrap draws. The mechanism predicts "
        "that direct evaluation falls as the share grows and train-before-test stays."))


def plot_leads(lead: pd.DataFrame):
    """(iii): each prepared model's lead over its base on its tasks, direct evaluation (x) against
    train-before-test (y); the diagonal keeps the whole lead, the dashed line half of it."""
    import matplotlib.pyplot as plt

    rows = lead[lead["base"].astype(bool)]
    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 3.2), layout="constrained")
    lo = float(min(0.0, np.nanmin(rows[[f"lead_{p}_lo" for p in PROTOCOLS]].to_numpy()))) - 0.02
    hi = float(np.nanmax(rows[[f"lead_{p}_hi" for p in PROTOCOLS]].to_numpy())) + 0.02
    ax.plot([lo, hi], [lo, hi], color="0.5", lw=0.8, label="lead kept")
    ax.plot([0, hi], [0, hi / 2], color="0.5", lw=0.8, ls="--", label="half kept")
    ax.axhline(0, color="0.8", lw=0.6)
    ax.axvline(0, color="0.8", lw=0.6)
    for kind, part in rows.groupby("kind"):
        x, y = part[f"lead_{DIRECT}"].to_numpy(float), part[f"lead_{TBT}"].to_numpy(float)
        xerr = np.abs(np.vstack([x - part[f"lead_{DIRECT}_lo"], part[f"lead_{DIRECT}_hi"] - x]))
        yerr = np.abs(np.vstack([y - part[f"lead_{TBT}_lo"], part[f"lead_{TBT}_hi"] - y]))
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=KIND_MARKERS.get(kind, "o"), ms=5, capsize=1.5, lw=0.7,
                    label=KIND_LABELS.get(kind, kind))
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("lead over its base, direct evaluation")
    ax.set_ylabel("lead over its base, train-before-test")
    ax.set_title("Does fine-tuning erase preparation?")
    handles, labels = ax.get_legend_handles_labels()
    plots.legend_below(fig, handles, labels, ncol=2)
    return plots.set_caption(fig, (
        "Each prepared twin's score lead over its own base model on the tasks it was prepared for, under direct "
        "evaluation (x) and after train-before-test (y), by kind of preparation; whiskers: 95 % item-bootstrap "
        "intervals. On the solid diagonal the lead survives fine-tuning; under the dashed line half of it is gone, "
        "as the mechanism predicts for format and instruction-style preparation."))
