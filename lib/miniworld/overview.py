"""Tables and the figure of notebook 00_world: what the world holds and how the zoo was built.

Reads only files the mini profile's prepare hook wrote (``work/world/manifest.json``, the zoo's
``*.recipe.json`` records, the store's model metadata).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .. import store
from . import world as mw


def benchmark_table(world_dir: str | Path) -> pd.DataFrame:
    """One row per benchmark / corpus: paper analogue, lm-eval kind, metric, category, split sizes, example."""
    manifest = store.read_json(Path(world_dir) / "manifest.json")
    rows = []
    for name, sizes in manifest["benchmarks"].items():
        kind, metric, category, analogue = mw.BENCHMARKS[name]
        example = mw.example_text(name, mw.load_split(world_dir, name, "train")[0])
        rows.append({"benchmark": name, "analogue": analogue, "kind": kind, "metric": metric,
                     "category": category, **sizes, "example": example.replace("\n", " | ")})
    for name, sizes in manifest["corpora"].items():
        example = mw.load_split(world_dir, name, "train")[0]["text"]
        rows.append({"benchmark": name, "analogue": "perplexity corpus", "kind": "loglikelihood_rolling",
                     "metric": "bits_per_byte", "category": "Perplexity", **sizes,
                     "example": example[:120] + ("..." if len(example) > 120 else "")})
    return pd.DataFrame(rows).set_index("benchmark")


def zoo_records(models_dir: str | Path) -> dict[str, dict]:
    """The build records of every model in ``models_dir`` (``<slug>.recipe.json``), by model name."""
    out = {}
    for path in sorted(Path(models_dir).glob("*.recipe.json")):
        rec = store.read_json(path)
        out[rec["recipe"]["name"]] = rec
    if not out:
        raise FileNotFoundError(f"no zoo models under {models_dir}: run the mini profile's prepare hook "
                                "(lib.miniworld.zoo:prepare)")
    return out


def zoo_table(records: dict[str, dict]) -> pd.DataFrame:
    """One row per model: family, width x depth, parameters, tokens, FLOPs, final loss, preparation."""
    rows = []
    for name, rec in records.items():
        r, st = rec["recipe"], rec["stats"]
        prepared = rec["mix"]["prepared"]
        rows.append({"model": name, "family": r["family"], "d_model": r["d_model"], "n_layers": r["n_layers"],
                     "params": st["n_params"], "tokens": st["tokens"], "flops": st["flops"],
                     "final_loss": st["final_loss"], "prepared": ", ".join(f"{t}={d}" for t, d in prepared.items()),
                     "prepared_char_share": rec["mix"]["prepared_char_share"],
                     "build_seconds": rec.get("build_seconds")})
    return pd.DataFrame(rows).set_index("model")


def dose_matrix(records: dict[str, dict]) -> pd.DataFrame:
    """Model x benchmark matrix of preparation doses (0 = never seen in the benchmark's format)."""
    return pd.DataFrame({name: {t: rec["mix"]["prepared"].get(t, 0) for t in mw.BENCHMARKS}
                         for name, rec in records.items()}).T


def plot_overview(records: dict[str, dict]):
    """Three panels: the zoo (parameters vs tokens, prepared twins hollow), pre-training loss curves,
    and the preparation doses per model and benchmark."""
    import matplotlib.pyplot as plt

    from .. import plots

    table = zoo_table(records)
    doses = dose_matrix(records)
    fig, axes = plt.subplots(1, 3, figsize=(plots.WIDTH_DOUBLE, 2.7),
                             gridspec_kw={"width_ratios": [1, 1, 1.3]})
    families = sorted(table["family"].unique())
    colors = dict(zip(families, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    markers = dict(zip(families, "osD^v"))
    ax = axes[0]
    for name, row in table.iterrows():
        prepared = bool(row["prepared"])
        ax.scatter(row["params"] / 1e3, row["tokens"] / 1e3 * (1.04 if prepared else 1.0),
                   marker=markers[row["family"]], s=36, linewidths=1.2,
                   facecolors="none" if prepared else colors[row["family"]], edgecolors=colors[row["family"]])
    for fam in families:
        ax.scatter([], [], marker=markers[fam], color=colors[fam], label=fam)
    ax.scatter([], [], marker="o", facecolors="none", edgecolors="0.3", label="prepared twin")
    ax.set_xlabel("parameters (thousands)")
    ax.set_ylabel("pre-training tokens (thousands)")
    ax.margins(0.15)
    ax.set_title("The zoo")
    ax.legend(fontsize=6, loc="upper left")
    ax = axes[1]
    for name, rec in records.items():
        curve = np.asarray(rec["loss_curve"], float)
        base = rec["recipe"].get("base")
        if base in records:           # a prepared twin continues its base model's curve
            curve[:, 0] += records[base]["recipe"]["steps"]
        fam = rec["recipe"]["family"]
        ax.plot(curve[:, 0], curve[:, 1], color=colors[fam], lw=0.9,
                ls="--" if rec["mix"]["prepared"] else "-", alpha=0.85)
    ax.set_xlabel("pre-training step")
    ax.set_ylabel("loss (nats / token)")
    ax.set_title("Training loss (dashed: preparation)")
    ax = axes[2]
    im = ax.imshow(doses.to_numpy(), aspect="auto", cmap="Greens")
    ax.set_xticks(range(doses.shape[1]), [c.removeprefix("mw_") for c in doses.columns], rotation=45, ha="right")
    ax.set_yticks(range(doses.shape[0]), [m.removeprefix("mw-") for m in doses.index], fontsize=6)
    ax.set_title("Preparation dose")
    ax.grid(False)
    fig.colorbar(im, ax=ax, fraction=0.05, label="formatted examples")
    fig.tight_layout()
    return fig


def summary(world_dir: str | Path, records: dict[str, dict]) -> dict:
    """Headline numbers of the world and the zoo for summary.json."""
    manifest = store.read_json(Path(world_dir) / "manifest.json")
    table = zoo_table(records)
    prepared = table[table["prepared"] != ""]
    return {
        "world_key": manifest["key"], "seed": manifest["config"]["seed"],
        "n_creatures": manifest["config"]["n_creatures"], "corpus_docs": manifest["corpus_docs"],
        "n_benchmarks": len(manifest["benchmarks"]), "n_corpora": len(manifest["corpora"]),
        "test_items": {n: s["test"] for n, s in manifest["benchmarks"].items()},
        "n_models": int(len(table)), "n_families": int(table["family"].nunique()),
        "n_prepared": int(len(prepared)),
        "params_min": int(table["params"].min()), "params_max": int(table["params"].max()),
        "tokens_min": int(table["tokens"].min()), "tokens_max": int(table["tokens"].max()),
        "total_pretrain_flops": float(table["flops"].sum()),
        "mean_prepared_char_share": float(prepared["prepared_char_share"].mean()) if len(prepared) else 0.0,
        "pretrain_seconds": float(table["build_seconds"].fillna(0).sum()),
    }

