"""The reports of notebooks 02 and 03 on a small hand-made store: the numbers of their summaries,
restricted to the models and benchmarks the stage ran on."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from lib import layout, store
from lib.pipeline import finetune as ft
from lib.pipeline import reports
from lib.store import DIRECT, TBT
from lib.util import atomic_write_json

RECIPE = ft.Recipe.default(lrs=(1e-3, 3e-3), epochs=2, lora_r=4, lora_alpha=8, lora_dropout=0.0, lora_modules="all",
                           max_length=64, weight_decay=0.0, loss_on="target")
SELECTION = {"selected": ["b1", "b2", "wiki"], "benchmarks": ["b1", "b2"], "corpora": ["wiki"]}
# (model, benchmark): (direct score, train-before-test score, chosen lr, chosen epoch)
SCORES = {("m1", "b1"): (0.30, 0.50, 1e-3, 1), ("m2", "b1"): (0.40, 0.70, 3e-3, 2),
          ("m1", "b2"): (0.20, 0.20, 1e-3, 2), ("m2", "b2"): (0.60, 0.90, 1e-3, 2),
          ("m1", "wiki"): (2.0, 1.5, 3e-3, 2), ("m2", "wiki"): (1.8, 1.2, 3e-3, 1)}


@pytest.fixture
def ran(tmp_path):
    root, work = tmp_path / "store", tmp_path / "work"
    for (model, bench), (direct, tbt, lr, epoch) in SCORES.items():
        metric, hib = ("bits_per_byte", False) if bench == "wiki" else ("acc", True)
        store.write(root, store.Result(DIRECT, bench, model, metric, direct, 0.01, hib, 100))
        store.write(root, store.Result(TBT, bench, model, metric, tbt, 0.01, hib, 100, provenance={
            "lr": lr, "epoch": epoch, "select_on": "loss", "val_loss": 1.0 + direct, "n_train": 60, "n_val": 30,
            "n_test": 100, "train_seconds": 10.0}))
        for unit_lr in RECIPE.lrs:
            unit = ft.UnitResult(lr=unit_lr, criterion="val_loss", best_epoch=1, curve=[
                {"epoch": e, "val_loss": 2.0 - 0.1 * e, "train_loss": 2.5 - 0.2 * e} for e in (1, 2)])
            atomic_write_json(layout.unit_dir(work, model, bench, unit_lr) / layout.UNIT_FILE, asdict(unit))
    store.write(root, store.Result(DIRECT, "b1", "not-run", "acc", 0.99))        # a model the stage left out
    return root, work


def test_finetune_report(ran):
    root, work = ran
    rep = reports.finetune_report(root, work, ["m1", "m2"], SELECTION, RECIPE, "local")
    s = rep["summary"]
    assert (s["n_models"], s["n_benchmarks"], s["n_results"]) == (2, 3, 6)
    assert s["mean_score"] == pytest.approx({"b1": 0.60, "b2": 0.55, "wiki": 1.35})
    assert s["chosen_lr_counts"] == {"0.001": 3, "0.003": 3} and s["chosen_epoch_counts"] == {"2": 4, "1": 2}
    assert s["train_seconds"] == 60.0 and s["recipe"] == RECIPE.to_dict() and s["select_on"] == "loss"
    assert list(rep["scores"].columns) == reports.SCORE_COLUMNS + reports.CHOICE_COLUMNS
    assert rep["matrix"].loc["m2", "b1"] == 0.70
    curves = rep["curves"]
    assert len(curves) == 6 * 2 * 2 and set(curves["criterion"]) == {"val_loss"}
    assert curves["best_of_unit"].sum() == 6 * 2                                  # epoch 1 of every unit


def test_direct_eval_report(ran):
    root, _ = ran
    rep = reports.direct_eval_report(root, ["m1", "m2"], SELECTION)
    s = rep["summary"]
    assert (s["n_models"], s["n_benchmarks"], s["n_results"]) == (2, 3, 6)
    assert s["mean_direct"] == pytest.approx({"b1": 0.35, "b2": 0.40, "wiki": 1.9})
    assert s["mean_gain_tbt_minus_direct"] == pytest.approx({"b1": 0.25, "b2": 0.15, "wiki": -0.55})
    assert s["perplexity_mean_change"] == pytest.approx({"wiki": -0.55})
    assert "not-run" not in set(rep["direct"]["model"]) and list(rep["direct"].columns)[-1] == "n"
    assert set(rep["protocols"].columns) == {"benchmark", "model", DIRECT, TBT, "gain"}
    assert list(rep["perplexity"]["model"]) == ["m1", "m2"]
    only_direct = reports.direct_eval_report(root, ["not-run"], SELECTION)["summary"]
    assert only_direct["mean_gain_tbt_minus_direct"] == {} and only_direct["perplexity_mean_change"] == {}


def test_grid_edges_tells_a_binding_budget_from_a_levelled_curve():
    import pandas as pd

    recipe = ft.Recipe.default(**{**RECIPE.to_dict(), "lrs": (1e-3, 3e-3, 1e-2), "epochs": 3})
    scores = pd.DataFrame([("m1", "b1", 3e-3, 2), ("m1", "b2", 1e-2, 1), ("m2", "b1", 1e-3, 3), ("m2", "b2", 3e-3, 3)],
                          columns=["model", "benchmark", "lr", "epoch"])
    curves = pd.DataFrame([("m2", "b1", 1e-3, 2, 1.0), ("m2", "b1", 1e-3, 3, 0.95),     # still falling: 5 %
                           ("m2", "b2", 3e-3, 2, 1.0), ("m2", "b2", 3e-3, 3, 0.999)],   # levelled off: 0.1 %
                          columns=["model", "benchmark", "lr", "epoch", "val_loss"])
    out = reports.grid_edges(scores, recipe, curves)
    assert out["n"] == 4 and out["share_interior"] == 0.25
    assert (out["share_largest_lr"], out["share_smallest_lr"], out["share_last_epoch"]) == (0.25, 0.25, 0.5)
    assert out["share_last_epoch_still_improving"] == 0.25 and out["share_budget_binds"] == 0.75
    assert out["interior_by_benchmark"] == {"b1": 0.5, "b2": 0.0}
    assert out["last_epoch_gain_by_benchmark"] == {"b1": 0.05, "b2": 0.001}    # how hard the budget binds
    assert "share_last_epoch_still_improving" not in reports.grid_edges(scores, recipe)
