"""The comparison only a controlled world allows: where do *prepared* models rank before and after
train-before-test, on the tasks they were prepared for and on the others?

A model's preparation is read from its metadata (``extra["prepared"] = {benchmark: dose}``, written
by :func:`lib.miniworld.zoo.model_meta`); stores without such records (hub models, published
results) have nothing to compare, and :func:`notebook_section` then prints one line and returns.

Three views, one per analysis notebook:

- ``ranks`` (04): each prepared model's rank (1 = best) under direct evaluation and under
  train-before-test on every downstream benchmark; ``shift`` = its rank under train-before-test
  minus its rank under direct evaluation (positive: the model falls once everyone is
  fine-tuned). The paper's mechanism predicts a positive shift on prepared tasks, growing with the
  dose, and about none elsewhere (dose 0, the control); the prepared-minus-base score gap should
  shrink. Also the agreement between benchmarks for model sets holding more and more preparation
  (:func:`agreement_by_dose`): direct-evaluation agreement should fall as prepared twins are
  added, train-before-test agreement should not. Intervals: bootstrap, 95 %. And whether
  preparation was harmless (:func:`twin_health`): perplexity, prepared and other tasks, twin vs base.
- ``perplexity`` (05): a prepared model's mean rank on the held-out perplexity corpora (which no
  model was prepared for) against its mean downstream rank on its prepared tasks, per protocol.
- ``pca`` (06): PC1 share of the model x benchmark matrix with and without the prepared models,
  per protocol (if unequal preparation splits the ranking, dropping the prepared models raises
  PC1 under direct evaluation more than under train-before-test).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .. import plots, report, store
from ..analysis import agreement, structure, uncertainty
from ..store import DIRECT, PROTOCOLS, TBT

VIEWS = ("ranks", "perplexity", "pca")


def preparation(store_root: str | Path) -> dict[str, dict[str, int]]:
    """``{model: {benchmark: dose}}`` for every model whose metadata records a preparation."""
    out = {}
    for model, rec in store.read_meta(store_root, "models").items():
        prepared = (rec.get("extra") or {}).get("prepared", rec.get("prepared")) or {}
        if prepared:
            out[model] = {str(k): int(v) for k, v in prepared.items()}
    return out


def twins(store_root: str | Path) -> dict[str, str]:
    """``{prepared model: its unprepared twin}`` where the metadata names one (``base_model``)."""
    meta = store.read_meta(store_root, "models")
    out = {}
    for model in preparation(store_root):
        rec = meta.get(model, {})
        twin = (rec.get("extra") or {}).get("base_model", rec.get("base_model"))
        if twin and twin in meta:
            out[model] = twin
    return out


def has_preparation(store_root: str | Path) -> bool:
    return bool(preparation(store_root))


def _oriented(df: pd.DataFrame, protocol: str, benchmarks: list[str]) -> pd.DataFrame:
    mat = store.matrix(df, protocol)
    mat = mat[[b for b in benchmarks if b in mat.columns]]
    return store.orient(mat, store.directions(df))


def rank_table(df: pd.DataFrame, store_root: str | Path) -> pd.DataFrame:
    """One row per (prepared model, downstream benchmark): ranks and scores under both protocols.

    Ranks are taken among the models scored under both protocols on that benchmark (1 = best,
    ties share the mean rank). Columns: model, benchmark, prepared_for, dose, n_models,
    rank_<protocol>, shift (= rank_train_before_test - rank_direct_eval), score_<protocol>, twin,
    twin_gap_<protocol> (score minus the unprepared twin's).
    """
    prep, twin_of = preparation(store_root), twins(store_root)
    downstream, _ = agreement.split_benchmarks(sorted(df["benchmark"].unique()), store_root)
    mats = {p: _oriented(df, p, downstream) for p in PROTOCOLS}
    raw = {p: store.matrix(df, p) for p in PROTOCOLS}
    rows = []
    for bench in downstream:
        if any(bench not in m.columns for m in mats.values()):
            continue
        both = pd.concat({p: mats[p][bench] for p in PROTOCOLS}, axis=1).dropna()
        rk = {p: agreement.ranks(both[p]) for p in PROTOCOLS}
        for model, tasks in prep.items():
            if model not in both.index:
                continue
            twin = twin_of.get(model)
            row = {"model": model, "benchmark": bench, "prepared_for": bench in tasks,
                   "dose": tasks.get(bench, 0), "n_models": len(both)}
            row.update({f"rank_{p}": rk[p][model] for p in PROTOCOLS})
            row["shift"] = rk[TBT][model] - rk[DIRECT][model]
            row.update({f"score_{p}": raw[p].at[model, bench] for p in PROTOCOLS})
            row["twin"] = twin
            row.update({f"twin_gap_{p}": (raw[p].at[model, bench] - raw[p].at[twin, bench]
                                          if twin in both.index else np.nan) for p in PROTOCOLS})
            rows.append(row)
    cols = (["model", "benchmark", "prepared_for", "dose", "n_models"] + [f"rank_{p}" for p in PROTOCOLS]
            + ["shift"] + [f"score_{p}" for p in PROTOCOLS] + ["twin"] + [f"twin_gap_{p}" for p in PROTOCOLS])
    return pd.DataFrame(rows, columns=cols)


def rank_summary(table: pd.DataFrame) -> dict:
    """Plain numbers of :func:`rank_table`, split by prepared-for vs other tasks."""
    out: dict = {"n_prepared_models": int(table["model"].nunique()), "n_rows": int(len(table))}
    for label, part in (("prepared_tasks", table[table["prepared_for"]]),
                        ("other_tasks", table[~table["prepared_for"]])):
        out[label] = {"n": int(len(part)),
                      **{f"mean_rank_{p}": float(part[f"rank_{p}"].mean()) for p in PROTOCOLS},
                      "mean_shift": float(part["shift"].mean()),
                      "mean_abs_shift": float(part["shift"].abs().mean()),
                      **{f"mean_twin_gap_{p}": float(part[f"twin_gap_{p}"].mean()) for p in PROTOCOLS}}
    return out


# ----------------------------------------------------------------------------- twins not damaged
PPL_TOLERANCE = 0.10          # a twin's held-out perplexity within 10 % of its base's
NOISE_Z = 2.0                 # "clearly above" / "not beyond the noise": two standard errors of the gap


def twin_health(df: pd.DataFrame, store_root: str | Path) -> pd.DataFrame:
    """Was preparation harmless, measured under direct evaluation (what preparation changes)?

    One row per (twin, benchmark): ``gap`` = twin's score minus its base's, ``se_gap`` = the two
    scores' standard errors combined (independent test-set noise), ``z`` = gap / se_gap, and the
    verdict ``ok``:

    - perplexity corpora: the twin's byte perplexity (2 ** bits_per_byte, lm-eval's
      ``byte_perplexity``) within :data:`PPL_TOLERANCE` of its base's (``ratio``). A stricter
      reading is reported next to it, not judged: ``bpb_change``, the relative change of bits per
      byte (of the log-perplexity), which moves about 1 / bits-per-byte times as much;
    - tasks it was prepared for: clearly above its base (z > :data:`NOISE_Z`);
    - the other tasks: not below its base by more than the noise (z > -:data:`NOISE_Z`).
    """
    prep, twin_of = preparation(store_root), twins(store_root)
    downstream, ppl = agreement.split_benchmarks(sorted(df["benchmark"].unique()), store_root)
    sub = df[df["protocol"] == DIRECT].set_index(["model", "benchmark"])
    rows = []
    for model, base in sorted(twin_of.items()):
        for bench in downstream + ppl:
            if (model, bench) not in sub.index or (base, bench) not in sub.index:
                continue
            t, b = sub.loc[(model, bench)], sub.loc[(base, bench)]
            se = float(np.hypot(*(0.0 if pd.isna(r["stderr"]) else r["stderr"] for r in (t, b)))) \
                if bench in downstream else np.nan
            gap = float(t["score"] - b["score"])
            row = {"model": model, "base": base, "benchmark": bench, "dose": prep[model].get(bench, 0),
                   "kind": "perplexity" if bench in ppl else ("prepared" if bench in prep[model] else "other"),
                   "score": float(t["score"]), "base_score": float(b["score"]), "gap": gap,
                   "se_gap": se, "z": gap / se if se and se > 0 else np.nan, "ratio": np.nan, "bpb_change": np.nan}
            if row["kind"] == "perplexity":
                row["ratio"] = float(2.0 ** (t["score"] - b["score"]))
                row["bpb_change"] = float(t["score"] / b["score"] - 1.0)
                row["ok"] = abs(row["ratio"] - 1.0) <= PPL_TOLERANCE
            elif row["kind"] == "prepared":
                row["ok"] = bool(row["z"] > NOISE_Z)
            else:
                row["ok"] = bool(not row["z"] < -NOISE_Z)
            rows.append(row)
    cols = ["model", "base", "benchmark", "kind", "dose", "score", "base_score", "gap", "se_gap", "z", "ratio",
            "bpb_change", "ok"]
    return pd.DataFrame(rows, columns=cols)


def twin_health_summary(table: pd.DataFrame) -> dict:
    """Counts of rows that pass, per kind, and the worst case of each."""
    out = {"all_ok": bool(table["ok"].all()) if len(table) else True}
    for kind, part in table.groupby("kind"):
        badness = (part["ratio"] - 1).abs() if kind == "perplexity" else -part["z"].fillna(part["gap"])
        worst = part.loc[badness.idxmax()]
        extra = {"max_bpb_change": float(part["bpb_change"].abs().max()),
                 "n_bpb_change_over_tolerance": int((part["bpb_change"].abs() > PPL_TOLERANCE).sum())} \
            if kind == "perplexity" else {}
        out[kind] = {"n": int(len(part)), "n_ok": int(part["ok"].sum()), **extra,
                     "worst": {"model": worst["model"], "benchmark": worst["benchmark"],
                               "gap": float(worst["gap"]), "z": float(worst["z"]), "ratio": float(worst["ratio"])}}
    return out


# ----------------------------------------------------------------------------- dose and agreement
def dose_level(store_root: str | Path) -> dict[str, int]:
    """``{model: dose}``: the largest dose a model saw of any task (0 for base models)."""
    prep = preparation(store_root)
    return {m: max(prep.get(m, {}).values(), default=0) for m in store.read_meta(store_root, "models")}


def agreement_by_dose(df: pd.DataFrame, store_root: str | Path, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Mean Kendall tau between benchmarks under both protocols, for model sets that differ only in
    how much preparation they hold: the base models (dose 0), the base models with the twins of each
    dose, and all models. 95 % intervals from a bootstrap over the set's models; the paired
    difference (train-before-test minus direct) uses the same draws for both protocols.

    Columns: models, dose, n_models, mean_tau_<protocol>, ci_low/ci_high_<protocol>, gain,
    gain_ci_low, gain_ci_high. The mechanism predicts that direct-evaluation agreement falls as the
    dose of the added twins grows while train-before-test agreement stays.
    """
    downstream, _ = agreement.split_benchmarks(sorted(df["benchmark"].unique()), store_root)
    mats = {p: _oriented(df, p, downstream) for p in PROTOCOLS}
    dose = dose_level(store_root)
    models = sorted(set.intersection(*(set(m.index) for m in mats.values())))
    bases = [m for m in models if dose.get(m, 0) == 0]
    sets = [("base models", 0, bases)]
    sets += [(f"base + dose {d} twins", d, bases + [m for m in models if dose.get(m, 0) == d])
             for d in sorted({dose.get(m, 0) for m in models} - {0})]
    sets.append(("all models", max(dose.values(), default=0), models))
    rows = []
    for label, d, members in sets:
        n = len(members)
        w = np.vstack([np.ones((1, n), np.float32), uncertainty.draws(n, n_boot, seed)])   # row 0: the data
        taus = {p: uncertainty.mean_pair_tau(mats[p].loc[members].to_numpy(float), w) for p in PROTOCOLS}
        gain = taus[TBT] - taus[DIRECT]
        row = {"models": label, "dose": d, "n_models": n}
        for p in PROTOCOLS:
            lo, hi = uncertainty.interval(taus[p][1:])
            row.update({f"mean_tau_{p}": float(taus[p][0]), f"ci_low_{p}": lo, f"ci_high_{p}": hi})
        lo, hi = uncertainty.interval(gain[1:])
        row.update(gain=float(gain[0]), gain_ci_low=lo, gain_ci_high=hi)
        rows.append(row)
    return pd.DataFrame(rows)


def dose_response(table: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per dose (0 = a twin's unprepared tasks, the negative control): mean rank shift and mean
    score lead over the unprepared twin under both protocols, with 95 % bootstrap intervals over
    the (twin, benchmark) rows of :func:`rank_table`."""
    rows = []
    for dose, part in table.groupby("dose"):
        row = {"dose": int(dose), "n": int(len(part))}
        for col in ["shift"] + [f"twin_gap_{p}" for p in PROTOCOLS]:
            vals = part[col].to_numpy(float)
            vals = vals[np.isfinite(vals)]
            boot = uncertainty.draws(len(vals), n_boot, seed) @ vals / len(vals) if len(vals) else vals
            lo, hi = uncertainty.interval(boot)
            row.update({col: float(vals.mean()) if len(vals) else np.nan, f"{col}_ci_low": lo, f"{col}_ci_high": hi})
        rows.append(row)
    return pd.DataFrame(rows)


def perplexity_table(df: pd.DataFrame, store_root: str | Path) -> pd.DataFrame:
    """Per prepared model and protocol: mean rank on the perplexity corpora vs mean downstream rank
    on its prepared tasks and on the others. Columns: model, protocol, rank_perplexity,
    rank_prepared_tasks, rank_other_tasks, gap_prepared (= rank_prepared_tasks - rank_perplexity)."""
    prep = preparation(store_root)
    downstream, ppl = agreement.split_benchmarks(sorted(df["benchmark"].unique()), store_root)
    if not ppl:
        return pd.DataFrame(columns=["model", "protocol", "rank_perplexity", "rank_prepared_tasks",
                                     "rank_other_tasks", "gap_prepared"])
    rows = []
    for protocol in PROTOCOLS:
        mat = _oriented(df, protocol, downstream + ppl).dropna()
        rk = mat.apply(agreement.ranks)
        for model, tasks in prep.items():
            if model not in rk.index:
                continue
            mine = [b for b in downstream if b in tasks and b in rk.columns]
            other = [b for b in downstream if b not in tasks and b in rk.columns]
            r_ppl = float(rk.loc[model, [b for b in ppl if b in rk.columns]].mean())
            r_prep = float(rk.loc[model, mine].mean()) if mine else np.nan
            rows.append({"model": model, "protocol": protocol, "rank_perplexity": r_ppl,
                         "rank_prepared_tasks": r_prep,
                         "rank_other_tasks": float(rk.loc[model, other].mean()) if other else np.nan,
                         "gap_prepared": r_prep - r_ppl})
    return pd.DataFrame(rows)


def pca_table(df: pd.DataFrame, store_root: str | Path) -> pd.DataFrame:
    """PC1 share of the downstream matrix per protocol, with all models and without the prepared ones."""
    prep = preparation(store_root)
    downstream, _ = agreement.split_benchmarks(sorted(df["benchmark"].unique()), store_root)
    rows = []
    for protocol in PROTOCOLS:
        mat = _oriented(df, protocol, downstream)
        without = mat.drop(index=[m for m in prep if m in mat.index])
        for label, sub in (("all models", mat), ("without prepared", without)):
            res = structure.pca(sub)
            rows.append({"protocol": protocol, "models": label, "n_models": res.n_models if res else len(sub),
                         "pc1_share": float(res.explained.iloc[0]) if res else np.nan})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- figures
_SHORT = {DIRECT: "Direct\nevaluation", TBT: "Train-before-\ntest"}


def plot_rank_moves(table: pd.DataFrame, store_root: str | Path | None = None):
    """Two panels (prepared tasks, other tasks): each prepared model's rank on a benchmark, direct ->
    tbt, a thin line per (model, benchmark) in the model's family colour (metadata from
    ``store_root``), the mean in black."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(1, 2, figsize=(plots.WIDTH_SINGLE, 2.9), sharey=True, layout="constrained")
    n = int(table["n_models"].max()) if len(table) else 1
    styles = plots.model_styles(table["model"].unique(), store_root) if len(table) else None
    for ax, flag, title in ((axes[0], True, "Prepared tasks"), (axes[1], False, "Other tasks")):
        part = table[table["prepared_for"] == flag]
        for _, row in part.iterrows():
            ax.plot([0, 1], [row[f"rank_{DIRECT}"], row[f"rank_{TBT}"]], color=styles.loc[row["model"], "color"],
                    lw=0.6, alpha=0.55)
        if len(part):
            ax.plot([0, 1], [part[f"rank_{DIRECT}"].mean(), part[f"rank_{TBT}"].mean()], color="k", lw=2.2,
                    marker="o", ms=4)
        ax.set_xticks([0, 1], [_SHORT[p] for p in PROTOCOLS])
        ax.set_xlim(-0.25, 1.25)
        ax.set_ylim(n + 0.5, 0.5)
        ax.set_xlabel("protocol")
        ax.set_title(f"{title} (n = {len(part)})")
    axes[0].set_ylabel("rank of a prepared model (1 = best)")
    axes[0].yaxis.set_major_locator(plt.MaxNLocator(integer=True))
    fams = sorted(styles["family"].dropna().unique(), key=plots.display) if styles is not None else []
    handles, labels = plots.family_handles(fams, lines=True)
    plots.legend_below(fig, handles + [Line2D([], [], color="k", lw=2.2, marker="o", ms=4)],
                       labels + ["mean"])
    plots.suptitle(fig, "Prepared models before and after train-before-test")
    return plots.set_caption(fig, (
        "Each prepared twin's rank among all models on each benchmark, under direct evaluation and after "
        "train-before-test, on the tasks it was prepared for (left) and on the others (right); thin lines: one "
        "(model, benchmark) in the model's family colour, black: the mean. The mechanism predicts a drop in rank on "
        "the prepared tasks only."))


def _set_label(label: str) -> str:
    """``base + dose 150 twins`` -> ``+ 150``: the model sets of :func:`agreement_by_dose`, short."""
    if label.startswith("base + dose "):
        return "+ " + label.removeprefix("base + dose ").removesuffix(" twins")
    return {"base models": "base", "all models": "all"}.get(label, label)


def plot_dose(agreement_table: pd.DataFrame, response: pd.DataFrame):
    """Two panels: mean Kendall tau of model sets with more and more preparation (left), and the
    prepared twins' score lead over their bases by dose (right), both protocols, 95 % intervals."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(plots.WIDTH_DOUBLE, 2.9), layout="constrained")
    x = np.arange(len(agreement_table))
    handles = []
    for i, p in enumerate(PROTOCOLS):
        y = agreement_table[f"mean_tau_{p}"].to_numpy(float)
        err = [y - agreement_table[f"ci_low_{p}"].to_numpy(float), agreement_table[f"ci_high_{p}"].to_numpy(float) - y]
        handles.append(axes[0].errorbar(x + (i - 0.5) * 0.12, y, yerr=np.nan_to_num(err), fmt="o-", ms=4, capsize=2,
                                        color=plots.PROTOCOL_COLORS[p]))
    axes[0].set_xticks(x, [_set_label(m) for m in agreement_table["models"]])
    axes[0].set_xlabel("models: base, base + the twins of one dose, all")
    axes[0].set_ylabel("mean Kendall τ between benchmarks")
    axes[0].set_title("Agreement as preparation is added")
    doses = response["dose"].to_numpy()
    xd = np.arange(len(doses))
    for i, p in enumerate(PROTOCOLS):
        col = f"twin_gap_{p}"
        y = response[col].to_numpy(float)
        err = [y - response[f"{col}_ci_low"].to_numpy(float), response[f"{col}_ci_high"].to_numpy(float) - y]
        axes[1].errorbar(xd + (i - 0.5) * 0.12, y, yerr=np.nan_to_num(err), fmt="o-", ms=4, capsize=2,
                         color=plots.PROTOCOL_COLORS[p])
    axes[1].axhline(0, color="0.5", lw=0.8, ls=":")
    axes[1].set_xticks(xd, [f"{d}" + (" (control)" if d == 0 else "") for d in doses])
    axes[1].set_xlabel("preparation dose (formatted examples per task)")
    axes[1].set_ylabel("twin's score minus its base's")
    axes[1].set_title("Lead of prepared twins by dose")
    plots.legend_below(fig, handles, [plots.PROTOCOL_LABELS[p] for p in PROTOCOLS])
    plots.suptitle(fig, "Preparation against agreement, and the prepared twins' lead")
    return plots.set_caption(fig, (
        "Left: mean Kendall τ between benchmarks for the base models alone, with the prepared twins of one dose "
        "added, and for all models. Right: the prepared twins' test-score lead over their base models by dose (0: "
        "the tasks a twin was not prepared for, the negative control). Both protocols; whiskers: 95 % bootstrap "
        "intervals over models (left) or (twin, benchmark) pairs (right)."))


def plot_perplexity(table: pd.DataFrame):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 3.0), layout="constrained")
    handles = []
    for protocol in PROTOCOLS:
        part = table[table["protocol"] == protocol]
        handles.append(ax.scatter(part["rank_perplexity"], part["rank_prepared_tasks"],
                                  color=plots.PROTOCOL_COLORS[protocol], s=18))
    lim = max(1.0, float(np.nanmax(table[["rank_perplexity", "rank_prepared_tasks"]].to_numpy()))) + 0.5
    handles.append(ax.plot([0.5, lim], [0.5, lim], color="0.5", lw=0.8, ls="--")[0])
    ax.set_xlabel("mean rank on perplexity corpora")
    ax.set_ylabel("mean rank on prepared tasks")
    plots.legend_below(fig, handles, [plots.PROTOCOL_LABELS[p] for p in PROTOCOLS] + ["same rank"])
    plots.suptitle(fig, "Prepared models: downstream against perplexity rank")
    return plots.set_caption(fig, (
        "Each prepared twin's mean rank on the tasks it was prepared for against its mean rank by bits per byte on "
        "the held-out perplexity corpora (which no model was prepared for), under both protocols; on the dashed "
        "line the two agree, above it preparation lifts the downstream rank beyond what perplexity predicts."))


def plot_pca(table: pd.DataFrame):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(plots.WIDTH_SINGLE, 2.6), layout="constrained")
    labels = list(dict.fromkeys(table["models"]))
    width = 0.38
    handles = []
    for i, protocol in enumerate(PROTOCOLS):
        part = table[table["protocol"] == protocol].set_index("models").reindex(labels)
        handles.append(ax.bar(np.arange(len(labels)) + (i - 0.5) * width, part["pc1_share"], width,
                              color=plots.PROTOCOL_COLORS[protocol]))
    ax.set_xticks(np.arange(len(labels)), labels)
    ax.set_xlabel("models")
    ax.set_ylabel("PC1 share of variance")
    ax.set_ylim(0, 1)
    plots.legend_below(fig, handles, [plots.PROTOCOL_LABELS[p] for p in PROTOCOLS])
    plots.suptitle(fig, "PC1 share with and without the prepared models")
    return plots.set_caption(fig, (
        "Share of the variance of the model × benchmark matrix explained by its first principal component, with "
        "all models and without the prepared twins, under both protocols."))


# ----------------------------------------------------------------------------- notebook glue
def notebook_section(ctx, view: str, summary: dict) -> pd.DataFrame | None:
    """The controlled comparison at the end of notebooks 04 (``ranks``), 05 (``perplexity``) and 06
    (``pca``): writes a table and a figure, puts its numbers under ``summary["preparation"]`` (the
    notebook writes summary.json after this), returns the table; prints one line and returns None
    when no model's metadata records a preparation."""
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; expected one of {VIEWS}")
    if not has_preparation(ctx.store):
        print("controlled comparison skipped: no model in this store records test-task preparation "
              "(only the mini world's zoo does)")
        return None
    df = store.load(ctx.store)
    if not all(p in set(df["protocol"]) for p in PROTOCOLS):
        print(f"controlled comparison skipped: the store lacks one of the protocols {PROTOCOLS}")
        return None
    n_boot = int(getattr(ctx, "params", {}).get("n_boot", 1000))
    if view == "ranks":
        table = rank_table(df, ctx.store)
        values, fig = rank_summary(table), plot_rank_moves(table, ctx.store)
        by_dose, response = agreement_by_dose(df, ctx.store, n_boot), dose_response(table, n_boot)
        health = twin_health(df, ctx.store)
        values.update(agreement_by_dose=by_dose.to_dict(orient="records"),
                      dose_response=response.to_dict(orient="records"), twin_health=twin_health_summary(health))
        report.write_table(health, ctx.out, "preparation_twin_health", index=False)
        report.write_table(by_dose, ctx.out, "preparation_agreement", index=False)
        report.write_table(response, ctx.out, "preparation_dose", index=False)
        plots.savefig(plot_dose(by_dose, response), ctx.out, "preparation_dose")
    elif view == "perplexity":
        table = perplexity_table(df, ctx.store)
        values = {p: {"mean_gap_prepared": float(g["gap_prepared"].mean()),
                      "mean_abs_gap_prepared": float(g["gap_prepared"].abs().mean())}
                  for p, g in table.groupby("protocol")}
        fig = plot_perplexity(table) if len(table) else None
    else:
        table = pca_table(df, ctx.store)
        values = {f"{r.protocol}/{r.models}": r.pc1_share for r in table.itertuples()}
        fig = plot_pca(table)
    report.write_table(table, ctx.out, f"preparation_{view}", index=False)
    if fig is not None:
        plots.savefig(fig, ctx.out, f"preparation_{view}")
    summary["preparation"] = values
    return table
