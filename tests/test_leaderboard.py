"""The leaderboard page's table (runner.leaderboard) and the mean ranks it shows (lib.analysis.agreement's
mean_ranks, which notebooks 04 and 08 write): on a tiny profile built here, in seconds. The page
itself, opened in headless Chromium on the published and smoke profiles, is test_leaderboard_browser's."""

from __future__ import annotations

import json
import math
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from lib import outputs, paths, plots, store
from lib.analysis import agreement, uncertainty
from runner import leaderboard

PROFILE = "leaderboard_tiny"
KSHOT = "direct_eval_5shot"           # a further protocol (issue 42's kind): data, not code
MODELS = {"fam_a/small": ("fam_a", 0.1, False), "fam_a/large": ("fam_a", 2.0, False),
          "fam_a/large-it": ("fam_a", 2.0, True), "fam_b/mid": ("fam_b", 0.5, False)}
BENCHES = {"t_math": ("Math", "exact_match"), "t_qa": ("Question Answering", "acc"),
           "t_qa2": ("Question Answering", "acc_norm"), "t_corpus": ("Perplexity", "bits_per_byte")}


# --------------------------------------------------------------------------- mean ranks (04 and 08)
def test_mean_ranks_average_the_ranks_each_benchmark_gives_ties_half_missing_left_out():
    m = pd.DataFrame({"b1": [0.9, 0.5, 0.5], "b2": [0.1, 0.8, np.nan], "b3": [0.3, 0.2, 0.1]},
                     index=["x", "y", "z"])
    flipped = -m                                           # every ranking reversed
    t = agreement.mean_ranks({store.DIRECT: m, store.TBT: flipped}, n_boot=200, seed=3).set_index(["model", "protocol"])
    d = t.xs(store.DIRECT, level="protocol")
    assert d.loc["x", "mean_rank"] == pytest.approx((1 + 2 + 1) / 3)
    assert d.loc["y", "mean_rank"] == pytest.approx((2.5 + 1 + 2) / 3)       # tied on b1: 2.5
    assert d.loc["z", "mean_rank"] == pytest.approx((2.5 + 3) / 2) and d.loc["z", "n_benchmarks"] == 2
    assert (d["of"] == 3).all() and d["rank_shift"].isna().all()            # no shift on the baseline
    tb = t.xs(store.TBT, level="protocol")
    for model in "xyz":
        assert d.loc[model, "mean_rank_lo"] <= d.loc[model, "mean_rank"] <= d.loc[model, "mean_rank_hi"]
        assert tb.loc[model, "rank_shift"] == pytest.approx(tb.loc[model, "mean_rank"] - d.loc[model, "mean_rank"])
        assert tb.loc[model, "rank_shift_lo"] <= tb.loc[model, "rank_shift"] <= tb.loc[model, "rank_shift_hi"]
    # the interval is the bootstrap of the mean over benchmarks that notebook 08 draws for a placed model
    ranks = m.apply(agreement.ranks).loc["x"].to_numpy(float)
    draws = uncertainty.draws(3, 200, 3) @ ranks / 3
    assert [d.loc["x", "mean_rank_lo"], d.loc["x", "mean_rank_hi"]] == uncertainty.interval(draws)


def test_a_shift_that_is_the_same_on_every_benchmark_has_no_width():
    """Paired draws: a model one place lower on every benchmark shifts by +1, whatever is drawn."""
    m = pd.DataFrame({"b1": [3.0, 2.0, 1.0], "b2": [3.0, 2.0, 1.0]}, index=["x", "y", "z"])
    swapped = m.copy()
    swapped.loc["x"], swapped.loc["y"] = m.loc["y"], m.loc["x"]
    t = agreement.mean_ranks({store.DIRECT: m, store.TBT: swapped}, n_boot=100).set_index(["model", "protocol"])
    row = t.loc[("x", store.TBT)]
    assert (row["rank_shift"], row["rank_shift_lo"], row["rank_shift_hi"]) == (1.0, 1.0, 1.0)


# --------------------------------------------------------------------------- a tiny profile
def _rank_stage(scores: pd.DataFrame, protocols) -> None:
    """What notebook 04 writes for the page: mean_ranks.csv and summary.json's mean_ranks."""
    dirs = store.directions(scores)
    downstream = [b for b in BENCHES if BENCHES[b][0] != "Perplexity"]
    oriented = {p: store.orient(store.matrix(scores, p), dirs)[downstream] for p in protocols}
    out = paths.stage_dir(PROFILE, "04_rank_agreement")
    outputs.write_table(agreement.mean_ranks(oriented, n_boot=100), out, "mean_ranks", index=False)
    outputs.write_summary(out, {"mean_ranks": {"unit": "benchmarks", "n_boot": 100, "seed": 0, "level": 0.95,
                                              "baseline": store.DIRECT, "n_benchmarks": len(downstream)}})


def _figure(stage: str, name: str, title: str) -> None:
    fig = paths.stage_dir(PROFILE, stage) / "figures"
    fig.mkdir(parents=True, exist_ok=True)
    (fig / f"{name}.png").write_bytes(b"\x89PNG")
    (fig / f"{name}.json").write_text(json.dumps({"title": title}))


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A profile with four models of two families (one instruction-tuned), two downstream categories,
    a corpus, both protocols plus a k-shot one, 04's ranks of the two protocols and two figures."""
    params_dir = tmp_path / "params"
    params_dir.mkdir()
    (params_dir / f"{PROFILE}.yaml").write_text(
        "description: a tiny profile for the leaderboard's table </script><b>not markup</b>\n"
        "stages:\n  04_rank_agreement:\n")
    monkeypatch.setattr(paths, "PARAMS", params_dir)
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")        # each test its own (tests run in parallel)
    root = paths.store_dir(PROFILE)
    store.write_meta(root, "models", {m: {"family": f, "params_b": size, "instruct": i}
                                      for m, (f, size, i) in MODELS.items()})
    store.write_meta(root, "benchmarks", {b: {"category": c, "metric": k} for b, (c, k) in BENCHES.items()})
    rng = np.random.default_rng(0)
    for p in (*store.PROTOCOLS, KSHOT):
        for k, m in enumerate(MODELS):
            for b, (_, metric) in BENCHES.items():
                if (p, m, b) == (store.TBT, "fam_b/mid", "t_math"):
                    continue                                              # one missing result
                corpus = metric == "bits_per_byte"
                value = (2.0 - 0.1 * k) if corpus else float(rng.uniform(0.1, 0.9))
                store.write(root, store.Result(p, b, m, metric, value, stderr=None if corpus else 0.01,
                                               higher_is_better=not corpus))
    scores = store.load(root)
    _rank_stage(scores, store.PROTOCOLS)
    _figure("04_rank_agreement", "rank_plot", "Model ranks on t_qa and t_math (4 models)")
    _figure("04_rank_agreement", "per_benchmark", "Each benchmark against the others")
    return scores


def test_the_table_holds_the_stores_scores_and_the_ranks_file_to_the_last_digit(tiny):
    data = leaderboard.page_data(leaderboard.board(PROFILE))
    assert [m["id"] for m in data["models"]] == sorted(MODELS)
    rows = {m["id"]: m for m in data["models"]}
    for r in tiny.to_dict("records"):
        assert rows[r["model"]]["scores"][r["protocol"]][r["benchmark"]] == r["score"]
    assert "t_math" not in rows["fam_b/mid"]["scores"][store.TBT]            # missing stays missing
    ranks = pd.read_csv(paths.stage_dir(PROFILE, "04_rank_agreement") / leaderboard.RANKS)
    assert len(ranks) == 8
    for r in ranks.to_dict("records"):
        got = rows[r["model"]]["rank"][r["protocol"]]
        assert (got["mean"], got["lo"], got["hi"], got["n"], got["of"]) == \
            (r["mean_rank"], r["mean_rank_lo"], r["mean_rank_hi"], r["n_benchmarks"], r["of"])
        if r["protocol"] == store.TBT:
            assert rows[r["model"]]["shift"][store.TBT]["value"] == r["rank_shift"]
    assert data["rank"]["source"] == "04_rank_agreement/mean_ranks.csv" and data["rank"]["n_boot"] == 100
    assert rows["fam_b/mid"]["rank"][store.TBT]["n"] == 2                     # ranked where it has a score


def test_protocols_are_data_a_further_one_is_one_more_column_set(tiny):
    data = leaderboard.page_data(leaderboard.board(PROFILE))
    assert [p["id"] for p in data["protocols"]] == [store.DIRECT, store.TBT, KSHOT]
    assert data["rank"]["protocols"] == [store.DIRECT, store.TBT]            # 04 ranked two of them
    _rank_stage(tiny, (*store.PROTOCOLS, KSHOT))                             # a stage that ranks all three
    data = leaderboard.page_data(leaderboard.board(PROFILE))
    assert data["rank"]["protocols"] == [store.DIRECT, store.TBT, KSHOT]
    assert all(set(m["shift"]) == {store.TBT, KSHOT} for m in data["models"])
    assert data["protocols"][2] == {"id": KSHOT, "label": "Direct evaluation, 5-shot", "color": "#555555"}


def test_models_and_benchmarks_carry_what_the_filters_and_groups_need(tiny):
    data = leaderboard.page_data(leaderboard.board(PROFILE))
    rows = {m["id"]: m for m in data["models"]}
    assert rows["fam_a/large-it"]["type"] == "instruct" and rows["fam_a/large"]["type"] == "base"
    assert rows["fam_a/small"]["size"] == "under 1B" and rows["fam_a/large"]["size"] == "1-4B"
    assert rows["fam_a/small"]["size_label"] == "100M" and rows["fam_a/large"]["size_label"] == "2B"
    assert data["sizes"] == ["under 1B", "1-4B"]                            # smallest first
    colours = plots.sized_colors({m: f for m, (f, _, _) in MODELS.items()}, {m: s for m, (_, s, _) in MODELS.items()})
    assert all(rows[m]["color"] == colours[m] for m in MODELS)                # lib.plots' shades per family
    assert data["families"] == [{"name": f, "label": f, "count": n, "color": plots.family_color(f)}
                                for f, n in (("fam_a", 3), ("fam_b", 1))]
    assert [c["name"] for c in data["categories"]] == ["Question Answering", "Math", "Perplexity"]
    bench = {b["id"]: b for b in data["benchmarks"]}
    assert not bench["t_corpus"]["ranked"] and not bench["t_corpus"]["higher_is_better"] and bench["t_qa"]["ranked"]
    assert not data["columns"]["prepared"] and data["placement"] is None


def test_figures_are_linked_from_the_rows_and_columns_they_show(tiny):
    data = leaderboard.page_data(leaderboard.board(PROFILE))
    ids = {f["name"]: f["id"] for f in data["figures"]}
    assert data["figures"][0]["href"] == "figures.html#04_rank_agreement-per_benchmark"
    bench = {b["id"]: b["figures"] for b in data["benchmarks"]}
    assert bench["t_qa"] == bench["t_math"] == [ids["per_benchmark"], ids["rank_plot"]]    # named in the title
    assert bench["t_qa2"] == [ids["per_benchmark"]]
    assert all(m["figures"] == [ids["rank_plot"]] for m in data["models"])


def test_positions_are_places_in_the_order_of_mean_ranks(tiny):
    """Issue 53: "16 -> 2" on the page is each model's place among the mean ranks (equal means share it)."""
    data = leaderboard.page_data(leaderboard.board(PROFILE))
    assert data["rank"]["protocols"]
    for p in data["rank"]["protocols"]:
        means = {m["id"]: m["rank"][p]["mean"] for m in data["models"] if p in m["rank"]}
        for m in data["models"]:
            assert m["rank"][p]["pos"] == 1 + sum(v < means[m["id"]] for v in means.values())


def test_the_page_embeds_the_table_and_fetches_nothing(tiny):
    page = leaderboard.write(PROFILE)
    assert page == paths.profile_dir(PROFILE) / "leaderboard.html"
    text = page.read_text()
    payload = re.search(r"<script type='application/json' id='leaderboard-data'>(.*?)</script>", text, re.S).group(1)
    data = json.loads(payload)                      # the description's "</script>" did not end the block
    assert data["models"] == leaderboard.page_data(leaderboard.board(PROFILE))["models"]
    assert "</script><b>" not in text
    for fetching in (" src=", "<link", "@import", "url(", "http://", "https://", "fetch(", "XMLHttpRequest"):
        assert fetching not in text, fetching


def test_without_ranks_the_page_says_so_and_stale_ranks_are_an_error_naming_the_file(tiny):
    ranks = paths.stage_dir(PROFILE, "04_rank_agreement") / leaderboard.RANKS
    table = pd.read_csv(ranks)
    ranks.unlink()
    b = leaderboard.board(PROFILE)
    assert b.ranks is None and "no mean ranks" in b.notes[0]
    assert leaderboard.page_data(b)["rank"]["protocols"] == []
    assert "(no mean ranks)" in leaderboard.review(PROFILE)
    table.loc[0, "model"] = "fam_c/gone"
    outputs.write_table(table, ranks.parent, "mean_ranks", index=False)
    with pytest.raises(leaderboard.LeaderboardError, match=r"04_rank_agreement/mean_ranks.csv: model 'fam_c/gone'"):
        leaderboard.board(PROFILE)
    assert leaderboard.review(PROFILE).startswith(f"[{PROFILE}] leaderboard: not written (LeaderboardError")


def test_a_profile_without_results_is_one_error_line(tiny, capsys):
    shutil.rmtree(paths.store_dir(PROFILE))
    assert leaderboard.main([PROFILE]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: no results in ") and f"make all PROFILE={PROFILE}" in line


@pytest.mark.parametrize("extra, expected", [
    ({}, None),
    ({"kind": "base", "prepared": {}}, "nothing (base)"),
    ({"kind": "sham", "prepared": {}, "dose": 0.5}, "sham (no task)"),
    ({"kind": "format", "dose": 0.5, "prepared": {"mw_recall": 50, "mw_quiz": 50}}, "format 50 %: Recall, Quiz"),
])
def test_what_a_mini_world_model_was_prepared_on(extra, expected):
    assert leaderboard.prepared_on(extra) == expected


def test_sizes_read_as_people_say_them():
    assert [leaderboard.size_label(v) for v in (14.2, 0.41, 1.64e-4, math.nan, None)] == \
        ["14.2B", "410M", "164K", "", ""]
    assert [leaderboard.size_class(v) for v in (0.5, 3.2, 8.0, 14.0, None)] == \
        ["under 1B", "1-4B", "4-10B", "10B and over", leaderboard.UNKNOWN]
    assert leaderboard.size_class(1e-4, "s") == "s"
