"""What notebooks 02 and 03 show once their jobs have run: one call each returns the tables, the
figure data and the summary; the notebook displays and saves them.

Both read only the results store and the work folder (never a job's variables), restricted to
the models and benchmarks the stage ran on.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .. import layout, store
from ..store import DIRECT, REDUCED, TBT
from .finetune import Recipe
from .perplexity import table as perplexity_table

SCORE_COLUMNS = ["model", "benchmark", "metric", "score", "stderr"]
CHOICE_COLUMNS = ["lr", "epoch", "select_on", "val_loss", "val_score", "n_train", "n_val", "n_test"]


def _ran(df: pd.DataFrame, models: list[str], benchmarks: list[str]) -> pd.DataFrame:
    return df[df.model.isin(models) & df.benchmark.isin(benchmarks)]


def finetune_report(store_root: str | Path, work: str | Path, models: list[str], selection: dict,
                    recipe: Recipe, executor: str) -> dict:
    """Notebook 02: ``scores`` (one row per train-before-test result with its chosen learning rate and
    epoch), ``matrix`` (model x benchmark), ``curves`` (validation curves), ``examples`` (the decoded
    first training example of each (model, benchmark)) and ``summary``."""
    bench = selection["selected"]
    results = _ran(store.load(store_root, TBT), models, bench)
    prov = pd.DataFrame(list(results["provenance"]), index=results.index)
    prov = prov.reindex(columns=CHOICE_COLUMNS + ["train_seconds"])
    scores = results[SCORE_COLUMNS].join(prov.drop(columns="train_seconds"))
    summary = {
        "n_models": len(models), "n_benchmarks": len(bench), "n_results": len(results),
        "mean_score": scores.groupby("benchmark")["score"].mean().to_dict(),
        "chosen_lr_counts": {str(k): int(v) for k, v in scores["lr"].value_counts().items()},
        "chosen_epoch_counts": {str(k): int(v) for k, v in scores["epoch"].value_counts().items()},
        "train_seconds": float(prov["train_seconds"].sum()),
        "recipe": recipe.to_dict(), "executor": executor, "select_on": recipe.select_on,
    }
    curves = layout.curves_frame(work, models, bench)
    summary["grid_edges"] = grid_edges(scores, recipe, curves)
    return {"scores": scores, "matrix": store.matrix(results, TBT), "curves": curves,
            "examples": layout.examples_frame(work, models, bench), "summary": summary}


def example_text(examples: pd.DataFrame) -> str:
    """The first training example of each benchmark (its first model's), decoded, one block each: the
    text the model was trained on, special tokens included, and which of its tokens carried loss."""
    blocks = []
    for bench, rows in examples.groupby("benchmark", sort=False):
        r = rows.iloc[0]
        loss = "every token" if r["loss_tokens"] == r["tokens"] else f"{r['loss_tokens']} tokens: {r['loss_text']!r}"
        blocks.append(f"{bench} ({r['model']}, {r['tokens']} tokens; loss on {loss}):\n{r['text']}")
    return "\n\n".join(blocks) or "no training example recorded"


STILL_IMPROVING = 0.01        # a chosen last epoch that lowered the validation loss by more than 1 %


def grid_edges(scores: pd.DataFrame, recipe: Recipe, curves: pd.DataFrame | None = None) -> dict:
    """Where in the learning-rate x epoch grid the chosen points lie: the share of results at the
    largest learning rate, at the smallest, at the last epoch, at the largest rate *and* the last
    epoch, where the budget may bind (the largest rate or the last epoch: more training might have
    helped) and in the interior (none of these), overall and per benchmark (``budget_binds``).

    With the validation ``curves`` (:func:`lib.layout.curves_frame`), a result chosen at the last
    epoch is also told apart by whether that epoch still lowered the chosen rate's validation loss
    by more than :data:`STILL_IMPROVING` (relative): ``share_last_epoch_still_improving`` (the budget
    binds) against a curve that had levelled off under the decaying learning rate; and
    ``last_epoch_gain_by_benchmark`` gives, per benchmark, the median relative drop of the
    validation loss in the last epoch over its results chosen there (how hard the budget binds)."""
    if not len(scores):
        return {"n": 0}
    lrs, last = sorted(recipe.lrs), recipe.epochs
    flags = pd.DataFrame({
        "largest_lr": scores["lr"] == lrs[-1],
        "smallest_lr": (scores["lr"] == lrs[0]) & (len(lrs) > 1),
        "last_epoch": scores["epoch"] == last})
    flags["largest_lr_and_last_epoch"] = flags["largest_lr"] & flags["last_epoch"]
    flags["budget_binds"] = flags["largest_lr"] | flags["last_epoch"]
    flags["interior"] = ~(flags["largest_lr"] | flags["smallest_lr"] | flags["last_epoch"])
    gain = None                                 # relative drop of the loss in the last epoch, where chosen
    if curves is not None and len(curves) and last > 1:
        loss = curves.set_index(["model", "benchmark", "lr", "epoch"])["val_loss"]
        keys = list(zip(scores["model"], scores["benchmark"], scores["lr"]))
        at, before = (loss.reindex([(*k, e) for k in keys]).to_numpy(float) for e in (last, last - 1))
        flags["last_epoch_still_improving"] = flags["last_epoch"].to_numpy() & (at < (1 - STILL_IMPROVING) * before)
        gain = pd.Series(1 - at / before, index=scores.index)[flags["last_epoch"]]
    out = {"n": int(len(flags)), **{f"share_{k}": float(v.mean()) for k, v in flags.items()}}
    out["budget_binds_by_benchmark"] = flags["budget_binds"].groupby(scores["benchmark"]).mean().round(4).to_dict()
    out["interior_by_benchmark"] = flags["interior"].groupby(scores["benchmark"]).mean().round(4).to_dict()
    if gain is not None:
        out["last_epoch_gain_by_benchmark"] = gain.groupby(scores["benchmark"]).median().round(4).to_dict()
    return out


def reduced_summary(store_root: str | Path, models: list[str], selection: dict, settings: dict) -> dict:
    """Notebook 02's ``reduced``: the reduced budget's ``mean_score`` ({benchmark: mean test score}),
    ``n_results``, ``train_seconds`` (its units' recorded seconds) and its ``settings``."""
    results = _ran(store.load(store_root, REDUCED), models, selection["selected"])
    seconds = [r.get("train_seconds", 0.0) for r in results.provenance]
    return {"mean_score": results.groupby("benchmark")["score"].mean().to_dict(), "n_results": len(results),
            "train_seconds": float(sum(seconds)), "settings": dict(settings)}


def direct_eval_report(store_root: str | Path, models: list[str], selection: dict) -> dict:
    """Notebook 03: ``direct`` (one row per direct-evaluation result), ``matrix`` (model x benchmark),
    ``protocols`` (both side by side per (benchmark, model), with ``gain`` = train-before-test -
    direct where 02 has run), ``perplexity`` (bits per byte before and after fine-tuning) and
    ``summary`` (with ``mean_fewshot`` where 03 ran k-shot evaluation)."""
    bench = selection["selected"]
    df = _ran(store.load(store_root), models, bench)
    direct = df[df.protocol == DIRECT]
    shots = df[df.protocol.str.startswith(DIRECT + "_")]          # k-shot direct evaluation (issue 42)
    both = df[df.protocol.isin([DIRECT, TBT])].pivot_table(index=["benchmark", "model"], columns="protocol",
                                                             values="score").reset_index()
    both.columns.name = None
    if TBT in both:
        both["gain"] = both[TBT] - both[DIRECT]
    ppl = perplexity_table(store_root, selection["corpora"])
    ppl = ppl[ppl.model.isin(models)]
    summary = {
        "n_models": len(models), "n_benchmarks": len(bench), "n_results": len(direct),
        "mean_direct": direct.groupby("benchmark")["score"].mean().to_dict(),
        "mean_gain_tbt_minus_direct": both.groupby("benchmark")["gain"].mean().dropna().to_dict()
        if "gain" in both else {},
        "perplexity_mean_change": ppl.groupby("corpus")["change"].mean().to_dict() if len(ppl) else {},
    }
    if len(shots):
        summary["mean_fewshot"] = {p: g.groupby("benchmark")["score"].mean().to_dict()
                                   for p, g in shots.groupby("protocol")}
    return {"direct": direct[SCORE_COLUMNS + ["n"]], "matrix": store.matrix(direct, DIRECT), "protocols": both,
            "perplexity": ppl, "summary": summary}
