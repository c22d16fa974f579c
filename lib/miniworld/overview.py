"""Tables and the figure of notebook 00_world: what the world holds and how the zoo was built.

Reads only what a profile's prepare hook wrote: the results store's model and benchmark metadata
(every profile with self-built models has them), plus, for the mini world, ``work/world/manifest.json``
and the zoo's ``work/models/*.recipe.json`` build records (loss curves). On a profile without a
mini world (e.g. ``smoke``) the same calls describe whatever models and tasks its hook recorded.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import metadata, paths, store
from ..util import read_json
from . import world as mw
from . import zoo


def has_world(profile: str) -> bool:
    return (zoo.world_dir(profile) / "manifest.json").exists()


def benchmark_table(profile: str) -> pd.DataFrame:
    """One row per benchmark / corpus: category, metric, lm-eval kind; for the mini world also the
    paper analogue, split sizes and one training example."""
    root = paths.store_dir(profile)
    names = sorted(store.read_meta(root, "benchmarks"))
    if not has_world(profile):
        if not names:
            raise FileNotFoundError(f"profile {profile!r} recorded no benchmark metadata in {root}: run its "
                                    f"prepare hook first: `{paths.make_command(profile, '00')}`")
        return metadata.benchmarks_frame(names, root)[["category", "metric", "kind"]]
    wdir = zoo.world_dir(profile)
    manifest = read_json(wdir / "manifest.json")
    rows = []
    for name, sizes in {**manifest["benchmarks"], **manifest["corpora"]}.items():
        first = mw.load_split(wdir, name, "train")[0]
        bench = {**mw.BENCHMARKS, **mw.CORPORA}[name]
        if name in mw.BENCHMARKS:
            example = mw.example_text(name, first)
        else:
            example = first["text"][:120] + ("..." if len(first["text"]) > 120 else "")
        rows.append({"benchmark": name, "category": bench.category, "metric": bench.metric, "kind": bench.kind,
                     "analogue": bench.analogue or "corpus", **sizes, "example": example.replace("\n", " | ")})
    return pd.DataFrame(rows).set_index("benchmark")


def zoo_table(profile: str) -> pd.DataFrame:
    """One row per self-built model (from the store's metadata): family, size, kind of preparation
    and dose (documents added per corpus document of its last phase), parameters, tokens, FLOPs,
    instruct (= prepared), base model, the tasks it was prepared for and how many of its last
    phase's documents were preparation."""
    root = paths.store_dir(profile)
    meta = store.read_meta(root, "models")
    if not meta:
        raise FileNotFoundError(f"profile {profile!r} recorded no model metadata in {root}: run its prepare "
                                f"hook first: `{paths.make_command(profile, '00')}`")
    rows = []
    for name in meta:
        info = metadata.model_info(name, root)
        prepared = info.extra.get("prepared") or {}
        rows.append({"model": name, "family": info.family, "size": info.extra.get("size"),
                     "kind": info.extra.get("kind", "prepared" if prepared else "base"),
                     "dose": info.extra.get("dose", 0.0), "params": (info.params_b or 0) * 1e9,
                     "tokens": (info.pretrain_tokens_t or 0) * 1e12, "flops": (info.flops_1e21 or 0) * 1e21,
                     "instruct": info.instruct, "base_model": info.extra.get("base_model"),
                     "prepared": ", ".join(prepared), "prepared_docs": info.extra.get("prepared_docs", 0)})
    return pd.DataFrame(rows).set_index("model")


def dose_matrix(profile: str) -> pd.DataFrame:
    """Model x downstream benchmark matrix of preparation doses in % (documents added per 100 corpus
    documents of the last phase; 0 = not prepared for that benchmark)."""
    root = paths.store_dir(profile)
    meta = store.read_meta(root, "models")
    benches = [b for b in store.read_meta(root, "benchmarks")
               if not metadata.benchmark_info(b, root).is_perplexity]
    if has_world(profile):
        benches = [b for b in mw.BENCHMARKS if b in benches]
    doses = {m: {b: int((metadata.model_info(m, root).extra.get("prepared") or {}).get(b, 0)) for b in benches}
             for m in meta}
    return pd.DataFrame(doses, index=benches).T


def tasks_used(profile: str) -> list[str]:
    """The downstream tasks the profile's later stages use (01's ``tasks``): the world may define more."""
    from .. import params

    return list(params.load_profile(profile, validate=False).params("01_select_benchmarks").get("tasks") or [])


def loss_curves(profile: str) -> dict[str, np.ndarray]:
    """Training loss curves of the zoo by step: each trunk's pre-training, and each model's last
    phase continuing from its trunk's last step (one point per epoch); {} if none."""
    records = [read_json(p) for p in sorted(zoo.models_dir(profile).glob("*.recipe.json"))]
    trunks = {rec["trunk"]["family"] + "/" + rec["trunk"]["size"]: rec for rec in records if "trunk" in rec
              and "recipe" not in rec}
    curves = {}
    for rec in records:
        if "recipe" not in rec:
            curves[f"trunk-{rec['trunk']['family']}-{rec['trunk']['size']}"] = np.asarray(rec["loss_curve"], float)
            continue
        r = rec["recipe"]
        trunk = trunks.get(r["trunk"]["family"] + "/" + r["trunk"]["size"])
        start = trunk["trunk"]["steps"] if trunk else 0
        per_epoch = -(-r["post_examples"] // 16)
        curves[r["name"]] = np.asarray([[start + e * per_epoch, v] for e, v in rec["loss_curve"]], float)
    return curves


def plot_overview(table: pd.DataFrame, doses: pd.DataFrame, curves: dict[str, np.ndarray], tasks=()):
    """Up to three panels: the zoo (parameters vs tokens, one hue per family with sizes as shades,
    prepared models hollow), training loss curves (dashed: preparation phase) and the preparation
    doses of the prepared models per benchmark (models with no preparation are left out, so the panel
    stays readable with any number of base models; ``tasks``: the tasks the profile uses, where it uses
    fewer than the world has)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from .. import plots

    prepared_rows = doses[doses.to_numpy().sum(axis=1) > 0] if len(doses) else doses
    prepared_rows = prepared_rows.loc[:, [c for c in prepared_rows if not tasks or c in tasks]]
    show_doses = bool(len(prepared_rows))
    n = 1 + bool(curves) + show_doses
    height = max(2.6, 0.13 * len(prepared_rows) + 1.6) if show_doses else 2.6
    fig, axes = plt.subplots(1, n, figsize=(plots.WIDTH_DOUBLE if n > 1 else plots.WIDTH_SINGLE, height),
                             squeeze=False, layout="constrained", gridspec_kw={"width_ratios": [1, 1, 1.2][:n]})
    axes = list(axes[0])
    families = sorted(table["family"].unique(), key=plots.display)
    colors = plots.sized_colors(table["family"].to_dict(), table["params"].to_dict())
    ax = axes.pop(0)
    for name, row in table.iterrows():
        hollow = bool(row["prepared"])
        ax.scatter(row["params"] / 1e3, row["tokens"] / 1e3 * (1.04 if hollow else 1.0), s=30,
                   marker=plots.family_marker(row["family"]),
                   linewidths=1.1, facecolors="none" if hollow else colors[name], edgecolors=colors[name])
    ax.set_xlabel("parameters (thousands)")
    ax.set_ylabel("training tokens (thousands)")
    ax.margins(0.15)
    ax.set_title("The zoo")
    if curves:
        ax = axes.pop(0)
        for name, curve in curves.items():
            color = colors.get(name, colors.get(name.replace("trunk-", "mw-", 1), "0.4"))
            ax.plot(curve[:, 0], curve[:, 1], color=color, lw=0.8, ls="-" if name.startswith("trunk-") else "--",
                    alpha=0.85)
        ax.set_xlabel("training step")
        ax.set_ylabel("loss (nats / token)")
        ax.set_title("Training loss")
    if show_doses:
        ax = axes.pop(0)
        im = ax.imshow(prepared_rows.to_numpy(), aspect="auto", cmap="Greens", vmin=0)
        ax.set_xticks(range(prepared_rows.shape[1]), plots.displays(prepared_rows.columns), rotation=90)
        ax.set_yticks(range(prepared_rows.shape[0]), plots.displays(prepared_rows.index))
        ax.set_xlabel("benchmark")
        ax.set_ylabel("prepared model")
        ax.set_title("Preparation dose")
        ax.grid(False)
        fig.colorbar(im, ax=ax, fraction=0.08, label="documents added\nper 100 of the last phase")
    handles, labels = plots.family_handles(families)
    if table["prepared"].astype(bool).any():
        handles += [Line2D([], [], marker="o", lw=0, color="0.1", ms=5), Line2D([], [], marker="o", lw=0, color="0.1",
                                                                              mfc="none", ms=5)]
        labels += ["base model", "prepared twin"]
    if curves:
        handles += [Line2D([], [], color="0.3", lw=0.8), Line2D([], [], color="0.3", lw=0.8, ls="--")]
        labels += ["pre-training (trunk)", "last phase"]
    plots.legend_below(fig, handles, labels)
    plots.title(fig, "The mini world's model zoo")
    return plots.set_caption(fig, (
        "The self-built models: parameters against training tokens (one hue per family, darker shades larger; "
        "prepared twins hollow), their training loss (solid: a trunk's pre-training; dashed: each model's last "
        "phase, which continues its trunk) and each prepared twin's dose: the preparation documents aimed at a "
        "benchmark added per 100 corpus documents of its last phase."))


def summary(profile: str, table: pd.DataFrame, benchmarks: pd.DataFrame) -> dict:
    """Headline numbers of the world and the zoo for summary.json (plain keys)."""
    prepared = table[table["prepared"] != ""]
    downstream = benchmarks[benchmarks["category"] != metadata.PERPLEXITY]
    out = {
        "mini_world": has_world(profile),
        "n_benchmarks": int(len(downstream)), "n_corpora": int(len(benchmarks) - len(downstream)),
        "n_models": int(len(table)), "n_families": int(table["family"].nunique()),
        "n_prepared": int(len(prepared)),
        "params_min": int(table["params"].min()), "params_max": int(table["params"].max()),
        "tokens_min": int(table["tokens"].min()), "tokens_max": int(table["tokens"].max()),
        "total_training_flops": float(table["flops"].sum()),
        "prepared_docs": int(prepared["prepared_docs"].sum()) if len(prepared) else 0,
        "n_kinds": int(table.loc[table["kind"] != "base", "kind"].nunique()),
    }
    if has_world(profile):
        manifest = read_json(zoo.world_dir(profile) / "manifest.json")
        out.update({"world_key": manifest["key"], "seed": manifest["config"]["seed"],
                    "n_creatures": manifest["config"]["n_creatures"], "corpus_docs": manifest["corpus_docs"],
                    "test_items": {n: s["test"] for n, s in manifest["benchmarks"].items()}})
    return out
