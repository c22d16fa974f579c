"""The controlled comparison on a hand-made store whose answers are known."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lib import store
from lib.miniworld import analysis as mwa

MODELS = ["a", "b", "c", "p"]          # p is c's prepared twin, prepared for t1 only


@pytest.fixture()
def ctx(tmp_path):
    root = tmp_path / "store"
    scores = {   # protocol -> benchmark -> model -> score (higher is better; ppl lower is better)
        "direct_eval": {"t1": {"a": 0.5, "b": 0.4, "c": 0.3, "p": 0.9},
                        "t2": {"a": 0.5, "b": 0.4, "c": 0.3, "p": 0.2},
                        "ppl": {"a": 1.0, "b": 1.1, "c": 1.2, "p": 1.3}},
        "train_before_test": {"t1": {"a": 0.9, "b": 0.8, "c": 0.7, "p": 0.72},
                              "t2": {"a": 0.9, "b": 0.8, "c": 0.7, "p": 0.6},
                              "ppl": {"a": 0.8, "b": 0.9, "c": 1.0, "p": 1.1}}}
    for protocol, benches in scores.items():
        for bench, per_model in benches.items():
            for model, score in per_model.items():
                store.write(root, store.Result(protocol, bench, model, "bits_per_byte" if bench == "ppl" else "acc",
                                               score, higher_is_better=bench != "ppl"))
    store.write_meta(root, "benchmarks", {
        "t1": {"category": "Math", "metric": "acc"}, "t2": {"category": "Math", "metric": "acc"},
        "ppl": {"category": "Perplexity", "metric": "bits_per_byte", "higher_is_better": False}})
    store.write_meta(root, "models", {
        m: {"family": "f", "instruct": m == "p",
            "extra": {"prepared": {"t1": 7} if m == "p" else {}, **({"base_model": "c"} if m == "p" else {})}}
        for m in MODELS})
    out = tmp_path / "out"
    out.mkdir()
    return SimpleNamespace(store=root, out=out)


def test_rank_table_and_summary(ctx):
    table = mwa.rank_table(store.load(ctx.store), ctx.store)
    assert list(table["benchmark"]) == ["t1", "t2"]          # perplexity corpora excluded
    t1 = table.set_index("benchmark").loc["t1"]
    assert bool(t1["prepared_for"]) and t1["dose"] == 7
    assert (t1["rank_direct_eval"], t1["rank_train_before_test"], t1["shift"]) == (1.0, 3.0, 2.0)
    assert t1["twin_gap_direct_eval"] == pytest.approx(0.6)
    assert t1["twin_gap_train_before_test"] == pytest.approx(0.02)
    t2 = table.set_index("benchmark").loc["t2"]
    assert (t2["rank_direct_eval"], t2["rank_train_before_test"], t2["shift"]) == (4.0, 4.0, 0.0)
    s = mwa.rank_summary(table)
    assert s["prepared_tasks"]["mean_shift"] == 2.0 and s["other_tasks"]["mean_shift"] == 0.0


def test_perplexity_and_pca_views(ctx):
    df = store.load(ctx.store)
    ppl = mwa.perplexity_table(df, ctx.store).set_index("protocol")
    assert ppl.loc["direct_eval", "rank_perplexity"] == 4.0          # highest bits per byte = worst
    assert ppl.loc["direct_eval", "gap_prepared"] == -3.0             # rank 1 on t1 vs 4 on ppl
    assert ppl.loc["train_before_test", "gap_prepared"] == -1.0
    pca = mwa.pca_table(df, ctx.store)
    assert set(pca["models"]) == {"all models", "without prepared"}
    without = pca[(pca["models"] == "without prepared")]
    assert (without["n_models"] == 3).all()
    assert without["pc1_share"].tolist() == pytest.approx([1.0, 1.0])   # a, b, c agree on t1 and t2
    direct_all = pca[(pca["models"] == "all models") & (pca["protocol"] == "direct_eval")]["pc1_share"]
    assert float(direct_all.iloc[0]) < 0.9                                # p breaks the agreement


def test_notebook_section_writes_and_skips(ctx, tmp_path, capsys):
    summary = {"earlier": 1}
    table = mwa.notebook_section(ctx, "ranks", summary)
    assert len(table) == 2
    assert summary["earlier"] == 1 and summary["preparation"]["prepared_tasks"]["mean_shift"] == 2.0
    assert (ctx.out / "preparation_ranks.csv").exists()
    assert (ctx.out / "figures" / "preparation_ranks.png").exists()
    bare = SimpleNamespace(store=tmp_path / "empty", out=tmp_path)
    assert mwa.notebook_section(bare, "pca", {}) is None
    assert "skipped" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown view"):
        mwa.notebook_section(ctx, "rank", {})
