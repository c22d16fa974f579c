"""The comparison only a controlled world allows: what preparation for the test tasks does to each
model's scores and ranks, and whether train-before-test undoes it.

A model's preparation is read from its metadata (``extra["prepared"] = {benchmark: dose}`` and
``extra["kind"]``, written by :func:`lib.miniworld.zoo.model_meta`); stores without such records
(hub models, published results) have nothing to compare, and :func:`notebook_section` then prints
one line and returns.

Three views, one per analysis notebook:

- ``ranks`` (04): the causal analyses of :mod:`lib.miniworld.causal` (agreement over the benchmarks
  every unprepared model can attempt and over all; agreement as twins are swapped in for their
  bases; each prepared model's lead under both protocols) and whether the manipulation was healthy
  (:func:`twin_health`: perplexity, prepared and other tasks, twin vs base).
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

from .. import outputs, plots, store
from ..analysis import agreement, structure
from ..store import DIRECT, PROTOCOLS

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
    """``{model: its base}`` for every model whose metadata names a base model (``base_model``):
    the prepared twins and the shams."""
    meta = store.read_meta(store_root, "models")
    out = {}
    for model, rec in meta.items():
        twin = (rec.get("extra") or {}).get("base_model", rec.get("base_model"))
        if twin and twin in meta:
            out[model] = twin
    return out


def _oriented(df: pd.DataFrame, protocol: str, benchmarks: list[str]) -> pd.DataFrame:
    mat = store.matrix(df, protocol)
    mat = mat[[b for b in benchmarks if b in mat.columns]]
    return store.orient(mat, store.directions(df))


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
            mine = prep.get(model, {})
            row = {"model": model, "base": base, "benchmark": bench, "dose": mine.get(bench, 0),
                   "kind": "perplexity" if bench in ppl else ("prepared" if bench in mine else "other"),
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
    plots.title(fig, "Prepared models: downstream against perplexity rank")
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
    plots.title(fig, "PC1 share with and without the prepared models")
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
    if not preparation(ctx.store):
        print("controlled comparison skipped: no model in this store records test-task preparation "
              "(only the mini world's zoo does)")
        return None
    df = store.load(ctx.store)
    if not all(p in set(df["protocol"]) for p in PROTOCOLS):
        print(f"controlled comparison skipped: the store lacks one of the protocols {PROTOCOLS}")
        return None
    n_boot = int(getattr(ctx, "params", {}).get("n_boot", 1000))
    if view == "ranks":
        from . import causal

        if causal.design(ctx.store).empty:
            print("causal analyses skipped: no model records its kind of preparation (the mini world's zoo "
                  "of version 5 does)")
            return None
        rep = causal.report(df, ctx.store, ctx.work, n_boot, int(getattr(ctx, "params", {}).get("seed", 0)))
        health = twin_health(df, ctx.store)
        values = {**rep["summary"], "twin_health": twin_health_summary(health)}
        outputs.write_table(health, ctx.out, "preparation_twin_health", index=False)
        for name in ("subsets", "compositions", "leads", "task_leads"):
            outputs.write_table(rep[name], ctx.out, f"causal_{name}", index=False)
        for name, fig in rep["figures"].items():
            plots.savefig(fig, ctx.out, name)
        table, fig = rep["leads"], None
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
    if view != "ranks":
        outputs.write_table(table, ctx.out, f"preparation_{view}", index=False)
    if fig is not None:
        plots.savefig(fig, ctx.out, f"preparation_{view}")
    summary["preparation"] = values
    return table
