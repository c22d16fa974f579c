"""lib.analysis.cheaper: cheaper protocols (direct evaluation, perplexity alone, any later protocol)
as candidate rankings against train-before-test."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lib import paths, store
from lib.analysis import cheaper, perplexity

MODELS = [f"m{i}" for i in range(6)]
ABILITY = dict(zip(MODELS, [1.0, 4.0, 2.0, 6.0, 3.0, 5.0]))


@pytest.fixture
def tiny(tmp_path):
    """Train-before-test ranks by ability; direct evaluation is the same ranking (tau 1), a protocol
    named ``reversed_eval`` (standing for one added later) the reverse (tau -1), and the perplexity
    before fine-tuning is lower for abler models (tau 1). Every unit records its seconds."""
    store.write_meta(tmp_path, "models", {m: {"family": "t", "instruct": False} for m in MODELS})
    store.write_meta(tmp_path, "benchmarks", {"qa": {"category": "Question Answering", "metric": "acc"},
                                              "nli": {"category": "Language Understanding", "metric": "acc"},
                                              "corpus": {"category": "Perplexity", "metric": "bits_per_byte"}})
    for k, m in enumerate(MODELS):
        a = ABILITY[m]
        for b, shift in (("qa", 0.0), ("nli", 0.3)):
            store.write(tmp_path, store.Result(store.TBT, b, m, "acc", a + shift,
                                               provenance={"eval_seconds": 1.0 + k, "train_seconds": 10.0 * (k + 1)}))
            store.write(tmp_path, store.Result(store.DIRECT, b, m, "acc", a / 10 + shift,
                                               provenance={"eval_seconds": 0.5}))
            store.write(tmp_path, store.Result("reversed_eval", b, m, "acc", -a, provenance={"eval_seconds": 0.25}))
        store.write(tmp_path, store.Result(store.DIRECT, "corpus", m, "bits_per_byte", 3.0 - a / 10,
                                           higher_is_better=False, provenance={"eval_seconds": 2.0}))
    return tmp_path


def test_identical_protocol_gets_one_and_reversed_minus_one(tiny):
    rep = cheaper.comparison_report(store.load(tiny), tiny, n_boot=50)
    s = rep["summary"]
    assert s["candidates"] == [store.DIRECT, "reversed_eval", cheaper.PERPLEXITY]     # a new name plugs in
    for b in ("qa", "nli"):
        assert s["tau_with_tbt"][store.DIRECT][b] == pytest.approx(1.0)
        assert s["tau_with_tbt"]["reversed_eval"][b] == pytest.approx(-1.0)
        assert s["tau_with_tbt"][cheaper.PERPLEXITY][b] == pytest.approx(1.0)
    assert s["tau_with_tbt_mean"]["reversed_eval"] == pytest.approx(-1.0)
    assert s["mean_tau_between"][store.DIRECT] == pytest.approx(1.0)
    assert s["mean_tau_between"][cheaper.PERPLEXITY] is None                           # 1 by construction
    assert any("by construction" in n for n in s["notes"])
    assert s["n_models"][store.DIRECT] == len(MODELS)
    assert "lead_removed" not in rep["table"].columns                                  # no preparation recorded


def test_the_difference_from_direct_is_paired_on_the_models_both_rank(tiny):
    """A candidate's mean tau minus direct evaluation's, on the models both and train-before-test
    rank: the reversed protocol is 2 below direct on all six; perplexity alone, measured on five
    (m5 has no corpus result), equals the difference of the two means recomputed on those five."""
    df = store.load(tiny)
    df = df[~((df["benchmark"] == "corpus") & (df["model"] == "m5"))]
    direct = df[(df["protocol"] == store.DIRECT) & (df["model"] == "m0") & (df["benchmark"] == "qa")].index
    df.loc[direct, "score"] = 0.45                  # direct's qa ranking now differs from tbt's on m0
    s = cheaper.comparison_report(df, tiny, n_boot=50)["summary"]
    assert s["minus_direct"]["reversed_eval"] == pytest.approx(-1 - s["tau_with_tbt_mean"][store.DIRECT])
    assert s["n_models_paired"] == {"reversed_eval": 6, cheaper.PERPLEXITY: 5}
    five = MODELS[:5]
    tbt = {b: [ABILITY[m] + sh for m in five] for b, sh in (("qa", 0.0), ("nli", 0.3))}
    dir_ = {"qa": [0.45 if m == "m0" else ABILITY[m] / 10 for m in five], "nli": [ABILITY[m] / 10 + 0.3 for m in five]}
    ppl = [-(3.0 - ABILITY[m] / 10) for m in five]
    expected = np.mean([stats.kendalltau(ppl, tbt[b])[0] - stats.kendalltau(dir_[b], tbt[b])[0] for b in tbt])
    assert s["minus_direct"][cheaper.PERPLEXITY] == pytest.approx(expected)
    assert expected != pytest.approx(s["tau_with_tbt_mean"][cheaper.PERPLEXITY] - s["tau_with_tbt_mean"][store.DIRECT])
    lo, hi = s["minus_direct_ci"][cheaper.PERPLEXITY]
    assert lo <= expected <= hi
    assert store.DIRECT not in s["minus_direct"]


def test_perplexity_alone_is_the_pre_ft_setting_of_05(tiny):
    """Perplexity alone's tau with each benchmark is 05's pre_ft_ppl_vs_tbt tau of the average corpus."""
    df = store.load(tiny)
    # disturb the order so the taus are not all 1
    store.write(tiny, store.Result(store.DIRECT, "corpus", "m0", "bits_per_byte", 2.0, higher_is_better=False))
    df = store.load(tiny)
    s = cheaper.comparison_report(df, tiny, n_boot=20)["summary"]
    t = perplexity.agreement_table(df, tiny)
    t = t[(t.setting == "pre_ft_ppl_vs_tbt") & (t.group == "all") & (t.corpus == perplexity.AVERAGE)]
    for b in ("qa", "nli"):
        expected = float(t.loc[t.benchmark == b, "tau"].iloc[0])
        assert expected < 1
        assert s["tau_with_tbt"][cheaper.PERPLEXITY][b] == pytest.approx(expected)


def test_cost_columns_add_up_to_the_recorded_seconds(tiny):
    df = store.load(tiny)
    s = cheaper.comparison_report(df, tiny, n_boot=10)["summary"]
    n = len(MODELS)
    assert s["seconds"][store.TBT] == pytest.approx(2 * sum(1.0 + k + 10.0 * (k + 1) for k in range(n)))
    assert s["seconds"][store.DIRECT] == pytest.approx(2 * n * 0.5)          # the corpus is not direct's cost ...
    assert s["seconds"][cheaper.PERPLEXITY] == pytest.approx(n * 2.0)        # ... it is perplexity alone's
    assert s["seconds"]["reversed_eval"] == pytest.approx(2 * n * 0.25)
    total = sum(sum(p.get(k, 0.0) for k in cheaper.SECONDS_KEYS) for p in df["provenance"])
    assert sum(s["seconds"].values()) == pytest.approx(total)                # every recorded second, once
    # one unit without its seconds: that protocol's cost is not recorded, not a smaller number
    store.write(tiny, store.Result(store.DIRECT, "qa", "m0", "acc", 0.1))
    s = cheaper.comparison_report(store.load(tiny), tiny, n_boot=10)["summary"]
    assert math.isnan(s["seconds"][store.DIRECT]) and s["n_units"][store.DIRECT] == 2 * n


def test_flops_come_from_the_tokens_the_units_recorded(tiny):
    """2 N per scored token, 6 N per trained token of a full fine-tune (4 N with LoRA); a protocol
    with one unit that recorded no tokens has no FLOPs, not fewer."""
    n_params = 1000
    full = {"config": {"recipe": {"method": "full"}}}
    for k, m in enumerate(MODELS):
        for b in ("qa", "nli"):
            store.write(tiny, store.Result(store.TBT, b, m, "acc", ABILITY[m], provenance={
                "n_params": n_params, "eval_tokens": 100, "train_tokens": 1000 * (k + 1), "validation_tokens": 50,
                **full}))
            store.write(tiny, store.Result(store.REDUCED, b, m, "acc", ABILITY[m], provenance={
                "n_params": n_params, "eval_tokens": 100, "train_tokens": 10, "validation_tokens": 5}))   # LoRA
            store.write(tiny, store.Result(store.fewshot_protocol(3), b, m, "acc", ABILITY[m], provenance={
                "n_params": n_params, "eval_tokens": 400}))
    s = cheaper.comparison_report(store.load(tiny), tiny, n_boot=10)["summary"]
    n = len(MODELS)
    assert s["flops"][store.TBT] == pytest.approx(
        2 * sum(n_params * (2 * 100 + 6 * 1000 * (k + 1) + 2 * 50) for k in range(n)))
    assert s["flops"][store.REDUCED] == pytest.approx(2 * n * n_params * (2 * 100 + 4 * 10 + 2 * 5))
    assert s["flops"]["direct_eval_3shot"] == pytest.approx(2 * n * n_params * 2 * 400)
    assert math.isnan(s["flops"][store.DIRECT])                    # the fixture's direct units record no tokens
    assert any("FLOPs: not recorded" in note for note in s["notes"])
    assert cheaper.tex_numbers(s)[f"cheaper/{store.REDUCED}/flops"] == s["flops"][store.REDUCED]


def test_lead_removed_share():
    """Twin t of base b leads by 3 ranks on qa under direct evaluation, 1 under train-before-test
    (two thirds removed) and not at all by perplexity (all of it removed)."""
    models = ["t", "b", "x1", "x2", "x3"]
    direct = {"t": 5, "x1": 4, "x2": 3, "b": 2, "x3": 1}
    tbt = {"x1": 5, "t": 4, "b": 3, "x2": 2, "x3": 1}
    ppl = {"x1": 5, "t": 4, "b": 4, "x2": 2, "x3": 1}
    mats = {name: store_frame(models, v) for name, v in
            ((store.DIRECT, direct), (store.TBT, tbt), (cheaper.PERPLEXITY, ppl))}
    share = cheaper.lead_removed(mats, {"t": {"qa": 1}}, {"t": "b"})
    assert share[store.DIRECT] == pytest.approx(0.0)
    assert share[store.TBT] == pytest.approx(2 / 3)
    assert share[cheaper.PERPLEXITY] == pytest.approx(1.0)


def store_frame(models, values):
    return pd.DataFrame({"qa": [float(values[m]) for m in models]}, index=models)


@pytest.mark.slow                       # runs the published profile's notebooks 04-06 (a kernel): not test-fast's
@pytest.mark.published
def test_published_comparison_matches_scipy(harmony_data, published_analyses):
    """05's summary on the published data against scipy's tau-b, computed from the store directly."""
    s = published_analyses["05_perplexity"]["cheaper"]
    df = store.load(paths.store_dir("published"))
    tbt = store.matrix(df, store.TBT)
    direct = store.matrix(df, store.DIRECT)
    assert s["candidates"] == [store.DIRECT, cheaper.PERPLEXITY]
    for bench in ("nq_open", "arc_challenge"):
        both = pd.concat({"d": direct[bench], "t": tbt[bench]}, axis=1).dropna()
        expected = stats.kendalltau(both["d"], both["t"]).statistic
        assert s["tau_with_tbt"][store.DIRECT][bench] == pytest.approx(expected, abs=1e-9)
        lo, hi = s["tau_with_tbt_ci"][store.DIRECT][bench]
        assert lo <= expected <= hi
    corpora = sorted(s_ for s_ in set(df["benchmark"]) if s_ in published_analyses["05_perplexity"]["corpora"])
    ppl = direct[corpora].dropna().mean(axis=1)
    both = ppl.to_frame("ppl").join(tbt[["nq_open"]]).dropna()
    expected = stats.kendalltau(-both["ppl"], both["nq_open"]).statistic
    assert s["tau_with_tbt"][cheaper.PERPLEXITY]["nq_open"] == pytest.approx(expected, abs=1e-9)
    assert s["mean_tau_between"][cheaper.PERPLEXITY] is None
    mean = np.mean(list(s["tau_with_tbt"][store.DIRECT].values()))
    assert s["tau_with_tbt_mean"][store.DIRECT] == pytest.approx(mean)
    # 04's mean tau under direct evaluation is the same number, computed another way
    four = published_analyses["04_rank_agreement"]
    assert s["mean_tau_between"][store.DIRECT] == pytest.approx(four["mean_tau"][store.DIRECT])
    assert any("not recorded" in n for n in s["notes"]) and not any(np.isfinite(v) for v in s["seconds"].values()
                                                                   if v is not None)


def test_prepared_store_gets_the_lead_column_and_the_cost_axis(tiny):
    """With preparation metadata the table gains the lead column (direct evaluation removes none of
    it); with every unit's seconds recorded the figure puts cost on a log axis."""
    import matplotlib

    matplotlib.use("Agg")
    rep = cheaper.comparison_report(store.load(tiny), tiny, n_boot=10, prepared={"m3": {"qa": 1}},
                                    twins={"m3": "m0"})
    assert rep["table"].loc[cheaper.label(store.DIRECT), "lead_removed"] == pytest.approx(0.0)
    assert rep["summary"]["lead_removed"]["reversed_eval"] == pytest.approx(2.0)   # the lead turned into a loss
    fig = cheaper.plot_comparison(rep["summary"])
    assert fig.axes[0].get_xscale() == "log"
    empty = {**rep["summary"], "seconds": {k: float("nan") for k in rep["summary"]["seconds"]}}
    assert cheaper.plot_comparison(empty).axes[0].get_xscale() == "linear"
