"""Notebooks 04-06 end to end: the intervals, noise ceiling, measurement quality, robustness and
fine-tuning budget they add, on the published results (the paper's numbers keep their values and
gain intervals) and on the smoke profile (per-item results and validation curves)."""

from __future__ import annotations

import math

import pytest

from lib import outputs, paths, store
from runner import contactsheet, run

pytestmark = pytest.mark.slow
P = store.PROTOCOLS


def _inside(value, ci, tol=1e-12):
    return ci[0] - tol <= value <= ci[1] + tol


@pytest.mark.published
def test_published_agreement_has_intervals_noise_ceiling_and_robustness(published_analyses):
    s = published_analyses["04_rank_agreement"]
    assert s["bootstrap"] == {"unit": "models", "n_models": 61, "n_boot": 1000, "seed": 0, "level": 0.95,
                              "defined": {p: 1.0 for p in P}}
    assert round(s["mean_tau"]["direct_eval"], 2) == 0.52 and round(s["mean_tau"]["train_before_test"], 2) == 0.76
    for p in P:
        assert _inside(s["mean_tau"][p], s["mean_tau_ci"][p])
        assert _inside(s["category_within_mean_tau"][p], s["category_within_mean_tau_ci"][p])
        assert _inside(s["benchmark_mean_tau"]["nq_open"][p], s["benchmark_mean_tau_ci"]["nq_open"][p])
    lo, hi = s["mean_tau_gain_ci"]
    assert 0.1 < lo < s["mean_tau_gain"] < hi < 0.4 and s["mean_tau_gain_excludes_zero"]
    assert 200 < s["pairs_improved_ci"][0] <= s["pairs_improved_ci"][1] <= 276
    nq = s["benchmark_mean_tau_ci"]["nq_open"]
    assert nq["direct_eval"][1] < nq["train_before_test"][0]                  # NQ-Open's move is beyond noise
    # noise ceiling from the published standard errors
    ceiling = s["noise_ceiling"]
    assert set(ceiling["source"]["direct_eval"].values()) == {"standard errors"}
    for p in P:
        assert ceiling[p]["n_pairs"] == 276 and 0.6 < ceiling[p]["mean_ceiling"] < 0.95
        assert ceiling[p]["ratio"] == pytest.approx(ceiling[p]["mean_tau"] / ceiling[p]["mean_ceiling"])
    assert ceiling["direct_eval"]["ratio"] + 0.2 < ceiling["train_before_test"]["ratio"]
    nq_open = ceiling["benchmark"]["nq_open"]["train_before_test"]
    assert nq_open["mean_tau"] < nq_open["mean_ceiling"]
    quality = s["measurement_quality"]
    assert all(len(quality[p]) == 24 for p in P)
    assert "nq_open" in s["cannot_rank"]["direct_eval"]                      # mean 0.07 exact match: near chance
    assert "nq_open" not in s["cannot_rank"]["train_before_test"]
    # robustness: every subset keeps a gain clear of zero
    rob = s["robustness"]
    assert set(rob) >= {"all models", "without Qwen", "base models only", "instruct models only",
                        "models with every result"}
    assert rob["models with every result"]["n_models"] == 53                 # 8 models lack the perplexity corpora
    assert all(r["gain_ci"][0] > 0 for r in rob.values())
    assert s["budget"] is None
    tex = (paths.stage_dir("published", "04_rank_agreement") / "numbers.tex").read_text()
    assert "\\newcommand{\\TauGainLo}{0.20}" in tex and "\\newcommand{\\TauMeanTrainBeforeTestHi}" in tex
    figs = {f.stem for f in (paths.stage_dir("published", "04_rank_agreement") / "figures").glob("*.png")}
    assert {"noise_ceiling", "robustness", "per_benchmark", "rank_plot"} <= figs


@pytest.mark.published
def test_published_figures_pass_the_review(published_analyses):
    """At most 7.0 in wide, no text under 7 pt at print size, no overlapping text, every axis labelled,
    a title and a caption (runner.figreview), for every figure of 04-06 (07's: test_benchalign_experiments)."""
    counts = {}
    for stage in ("04_rank_agreement", "05_perplexity", "06_pca"):
        review = contactsheet.check(paths.stage_dir("published", stage))
        counts[stage] = len(review)
        assert not any(review.values()), review
    assert counts == {"04_rank_agreement": 6, "05_perplexity": 3, "06_pca": 4}     # 05: + cheaper_protocols


@pytest.mark.published
def test_published_perplexity_and_pca_have_intervals(published_analyses):
    s05 = published_analyses["05_perplexity"]
    for setting, groups in s05["tau_average"].items():
        for group, value in groups.items():
            assert _inside(value, s05["tau_average_ci"][setting][group]), (setting, group)
            assert _inside(s05["mean_tau_pairs"][setting][group], s05["mean_tau_pairs_ci"][setting][group])
    missing = [n for n in s05["notes"] if "no standard errors" in n]
    assert len(missing) == 1 and all(c in missing[0] for c in ("arxiv_2025", "stackexchange_2025", "wiki_2025"))
    s06 = published_analyses["06_pca"]
    assert round(s06["pc1_explained"]["direct_eval"], 3) == 0.696 and round(s06["pc1_explained"]["train_before_test"],
                                                                              3) == 0.864
    for p in P:
        assert _inside(s06["pc1_explained"][p], s06["pc1_explained_ci"][p])
        for grp in ("all", "base"):
            assert _inside(s06["pc1_vs_log_compute"][p][grp]["pearson_r"], s06["pc1_vs_log_compute_r_ci"][p][grp])
        assert set(s06["family_pc1_ci"][p]) == set(s06["family_pc1"][p])
    assert s06["pc1_gain_ci"][0] > 0.05 and s06["pc1_gain_excludes_zero"]
    assert all(r["gain_ci"][0] > 0 for r in s06["robustness"].values())
    assert "\\newcommand{\\PcOneGainLo}" in (paths.stage_dir("published", "06_pca") / "numbers.tex").read_text()


def test_smoke_analyses_use_items_and_validation_curves(smoke):
    run.run_profile("smoke", stages=["04", "05", "06"])
    s = outputs.read_summary("smoke", "04_rank_agreement")
    benchmarks = smoke["selection"]["benchmarks"]
    for p in P:
        assert s["noise_ceiling"]["source"][p] == {b: "items" for b in benchmarks}
        assert set(s["measurement_quality"][p]) == set(benchmarks)
    curves = s["budget"]
    assert set(curves) == {"lr=0.001", "lr=0.003", "best so far"}            # params/smoke.yaml: 2 lrs x 3 epochs
    assert all(set(c) == {"1", "2", "3"} for c in curves.values())
    assert (paths.stage_dir("smoke", "04_rank_agreement") / "figures" / "budget.pdf").exists()
    assert s["bootstrap"]["n_models"] == 4 and not math.isnan(s["mean_tau_gain_ci"][0])
    s05 = outputs.read_summary("smoke", "05_perplexity")
    assert any("mw_wiki" in n and "no standard errors" in n for n in s05["notes"])
