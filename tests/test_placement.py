"""Placement profiles (``reference:``): parameters inherited and mismatches refused, the calibration
check, the placement report (lib.placement) on the real published data, and a placement among the
finished smoke profile run end to end through runner.run."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest

from lib import notebook, outputs, params, paths, placement, store
from lib.analysis import agreement
from runner import preflight as cli_preflight
from runner import run

SLICE = ["EleutherAI/pythia-160m-deduped", "Qwen/Qwen2.5-0.5B"]


# --------------------------------------------------------------------------- parameters
@pytest.fixture
def params_dir(tmp_path, monkeypatch):
    """A params folder holding copies of the real smoke, paper_slice and published profiles."""
    folder = tmp_path / "params"
    folder.mkdir()
    for name in ("smoke", "paper_slice", "published"):
        shutil.copy(paths.PARAMS / f"{name}.yaml", folder)
    monkeypatch.setattr(paths, "PARAMS", folder)
    return folder


def _profile(folder, name: str, text: str) -> params.Profile:
    (folder / f"{name}.yaml").write_text(text)
    return params.load_profile(name)


PLACE_SMOKE = """description: test
reference: smoke
common:
  models: [new-a]
stages:
  02_finetune:{extra}
  03_direct_eval:
  08_placement:
"""

PLACE_PAPER = """description: test
reference: published
common:
  models: [me/new-1b]{common}
stages:
  01_select_benchmarks:{s01}
  02_finetune:
    executor: slurm
    resources: {{timeout_min: 60}}
  03_direct_eval:
  08_placement:
"""


def test_placement_inherits_the_reference_and_runs_new_plus_calibration_models(params_dir):
    prof = _profile(params_dir, "place", PLACE_PAPER.format(common="", s01=""))
    p2 = prof.params("02_finetune")
    defaults = params.notebook_parameters("02_finetune")
    assert p2["models"] == ["me/new-1b", *SLICE]               # new, then paper_slice's two
    assert (p2["lrs"], p2["dtype"], p2["epochs"]) == (defaults["lrs"], "float32", 5)   # the paper's recipe
    assert (p2["executor"], p2["resources"]) == ("slurm", {"timeout_min": 60})        # how it runs: its own
    assert prof.params("01_select_benchmarks")["tasks"] == params.notebook_parameters("01_select_benchmarks")["tasks"]
    assert prof.prepare == [params.PLACEMENT_HOOK]
    smoke = params.load_profile("smoke")
    mine = _profile(params_dir, "place_s", PLACE_SMOKE.format(extra="").replace(
        "reference: smoke", "reference: {name: smoke, calibration: [mw-llama-s]}"))
    for stage in ("02_finetune", "03_direct_eval"):
        got, want = mine.params(stage), smoke.params(stage)
        assert {k: v for k, v in got.items() if k not in ("models", "profile")} == \
            {k: v for k, v in want.items() if k not in ("models", "profile")} | \
            {k: off for k, off in params.CHEAPER_OFF.items() if k in want}   # the paper's two protocols only
    assert smoke.params("03_direct_eval")["fewshot"] and not mine.params("03_direct_eval")["fewshot"]
    assert mine.params("02_finetune")["models"] == ["new-a", "mw-llama-s"]


@pytest.mark.parametrize("text, line", [
    (PLACE_SMOKE.format(extra="\n    lrs: [0.01]"),
     r"place\.yaml: stages\.02_finetune\.lrs: \[0\.01\] differs from the reference 'smoke''s \[0\.001, 0\.003\]"),
    (PLACE_PAPER.format(common="\n  dtype: bfloat16", s01=""),
     r"place\.yaml: common\.dtype: 'bfloat16' differs from the reference 'published''s 'float32'"),
    (PLACE_PAPER.format(common="", s01="\n    cap_train: 1000"),
     r"stages\.01_select_benchmarks\.cap_train: 1000 differs from the reference 'published''s 50000"),
    (PLACE_PAPER.format(common="", s01="\n    tasks: [rte, lambada]"),
     r"stages\.01_select_benchmarks\.tasks: 'lambada' is not one of the reference 'published''s benchmarks"),
    (PLACE_SMOKE.format(extra="").replace("reference: smoke", "reference: smok"),
     r"reference: unknown reference 'smok' \(did you mean 'smoke'\?\)"),
    (PLACE_SMOKE.format(extra="").replace("  08_placement:", "  04_rank_agreement:"),
     r"stages\.04_rank_agreement: a placement profile runs only"),
    (PLACE_SMOKE.format(extra="").replace("models: [new-a]", "models: []"),
     r"common\.models: a placement profile names the new models it places"),
])
def test_a_placement_that_would_compute_differently_is_refused_in_one_line(params_dir, text, line):
    with pytest.raises(params.ParamsError, match=line) as err:
        _profile(params_dir, "place", text)
    assert "\n" not in str(err.value)


def test_the_refusal_stops_make_before_anything_runs(params_dir, capsys):
    (params_dir / "place.yaml").write_text(PLACE_PAPER.format(common="\n  dtype: bfloat16", s01=""))
    assert run.main(["place"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "common.dtype: 'bfloat16' differs" in err[0]
    assert not paths.profile_dir("place").exists()


# --------------------------------------------------------------------------- calibration, synthetic
def _frame(rows) -> pd.DataFrame:
    out = pd.DataFrame(rows)
    out["metric"], out["higher_is_better"], out["n"] = "acc", True, None
    out["provenance"] = [{} for _ in range(len(out))]
    return out[store.COLUMNS]


def test_tbt_bound_is_the_bonferroni_bound_for_two_independent_runs():
    assert placement.tbt_bound(48) == pytest.approx(4.637, abs=1e-3)        # sqrt(2) z(1 - 0.05 / 96)
    assert placement.tbt_bound(1) == pytest.approx(math.sqrt(2) * 1.95996, abs=1e-4)
    assert placement.tbt_bound(8) < placement.tbt_bound(48)


def test_calibration_passes_within_and_fails_outside_its_bounds():
    ref = _frame([{"protocol": p, "benchmark": b, "model": "cal", "score": 0.5, "stderr": 0.01}
                  for p in store.PROTOCOLS for b in ("x", "y")])
    near = ref.assign(score=[0.519, 0.481, 0.54, 0.46])          # direct |z| 1.9 (<= 2); tbt |z| 4 (> 3.17)
    check = placement.calibration_check(near, ref, ["cal"], ["x", "y"])
    assert check["bounds"][store.TBT] == pytest.approx(placement.tbt_bound(2))
    tbt_fail = check["table"][(check["table"]["protocol"] == store.TBT)]
    assert not tbt_fail["within"].any() and not check["comparable"]      # 4 se > 3.17 se
    ok = ref.assign(score=[0.519, 0.481, 0.53, 0.47])
    passed = placement.calibration_check(ok, ref, ["cal"], ["x", "y"])
    assert passed["comparable"] and passed["n_failed"] == 0 and passed["lines"][0].startswith("comparable")
    same = placement.calibration_check(ref, ref, ["cal"], ["x", "y"])
    assert same["n_identical"] == 4 and "4 of 4 identical" in same["lines"][0]


def test_ranks_count_ties_half_and_the_bootstrap_brackets_the_point():
    ref = pd.DataFrame({"a": [3.0, 2.0, 1.0], "b": [1.0, 2.0, 3.0]}, index=["r1", "r2", "r3"])
    new = pd.DataFrame({"a": [2.0, 0.0], "b": [4.0, np.nan]}, index=["n1", "n2"])
    ranks = placement.rank_table(ref, new)
    assert ranks.loc["n1"].tolist() == [2.5, 1.0]                  # tied with r2 on a; best on b
    assert ranks.at["n2", "a"] == 5.0 and np.isnan(ranks.at["n2", "b"])
    draws = placement.mean_rank_draws(ref, new, "n1", 300, 0)
    assert draws["benchmarks"].min() >= 1.0 and draws["benchmarks"].max() <= 2.5
    assert np.all(draws["models"] >= 1.0) and np.all(draws["models"] <= 5.0)


# --------------------------------------------------------------------------- the published reference
@pytest.fixture(scope="module")
def paper(harmony_data):
    return placement.reference_results(params.PUBLISHED)


def test_published_reference_is_the_file_as_published(paper, harmony_data):
    raw = json.loads((harmony_data / "lm-harmony" / "all_results.json").read_text())
    assert paper["model"].nunique() == 61 and set(paper["protocol"]) == set(store.PROTOCOLS)
    row = paper[(paper.protocol == store.TBT) & (paper.benchmark == "gsm8k") & (paper.model == SLICE[1])].iloc[0]
    assert row.score == raw[store.TBT]["gsm8k"][SLICE[1]]
    assert row.stderr == raw[f"{store.TBT}_stderr"]["gsm8k"][SLICE[1]]
    assert len(paper) == sum(len(v) for p in store.PROTOCOLS for v in raw[p].values())


def _write(root, frame: pd.DataFrame, model: str | None = None, dtype: str = "float32") -> None:
    for r in frame.itertuples():
        store.write(root, store.Result(protocol=r.protocol, benchmark=r.benchmark, model=model or r.model,
                                       metric=r.metric, score=float(r.score), stderr=r.stderr,
                                       higher_is_better=bool(r.higher_is_better), provenance={"dtype": dtype}),
                    fsync=False)


def _ours(paper, tmp_path, shift: dict | None = None, new: dict | None = None, dtype: str = "float32") -> pd.DataFrame:
    """A store written with lib.store's writer: the calibration models' published scores (moved by
    ``shift`` {(protocol, model, benchmark): standard errors}) and new models copied from published
    ones (``new`` {new name: published model whose scores it gets, minus 0.001})."""
    root = tmp_path / "store"
    downstream = paper[~paper.benchmark.str.endswith("_2025")]
    cal = downstream[downstream.model.isin(SLICE)].copy()
    for (p, m, b), k in (shift or {}).items():
        hit = (cal.protocol == p) & (cal.model == m) & (cal.benchmark == b)
        cal.loc[hit, "score"] += k * cal.loc[hit, "stderr"]
    _write(root, cal, dtype=dtype)
    for name, like in (new or {}).items():
        _write(root, downstream[downstream.model == like].assign(score=lambda d: d.score - 0.001), name)
    return store.load(root)


def test_calibration_against_published_passes_within_the_standard_errors(paper, tmp_path):
    shift = {(store.DIRECT, SLICE[0], "arc_easy"): 1.5, (store.TBT, SLICE[1], "rte"): -3.0}
    downstream = sorted(b for b in set(paper.benchmark) if not b.endswith("_2025"))
    check = placement.calibration_check(_ours(paper, tmp_path, shift), paper, SLICE, downstream)
    assert check["comparable"] and check["n_results"] == 96 and check["bounds"][store.TBT] > 4
    assert check["lines"][0].startswith("comparable: the 2 calibration model(s) reproduce the reference")


def test_calibration_against_published_fails_with_its_lines_outside_them(paper, tmp_path):
    shift = {(store.DIRECT, SLICE[0], "arc_easy"): -2.5, (store.TBT, SLICE[1], "gsm8k"): 6.0}
    ours = _ours(paper, tmp_path, shift, new={"me/new-7b": "Qwen/Qwen2.5-7B"}, dtype="bfloat16")
    rep = placement.placement_report(paper, ours, ["me/new-7b"], SLICE, n_boot=50)
    assert not rep["comparable"] and rep["placement"] is None and rep["summary"]["placement"] is None
    lines = rep["lines"]
    assert lines[0].startswith("NOT COMPARABLE: 2 of ") and "no model is ranked" in lines[0]
    se = paper[(paper.protocol == store.DIRECT) & (paper.model == SLICE[0]) & (paper.benchmark == "arc_easy")].stderr
    assert any(f"direct_eval {SLICE[0]} / arc_easy:" in ln and "z -2.50" in ln and f"{-2.5 * se.iloc[0]:+.4f}" in ln
               for ln in lines)
    assert any(f"train_before_test {SLICE[1]} / gsm8k:" in ln and "z +6.00" in ln for ln in lines)
    assert "benchmarks concerned: arc_easy, gsm8k" in "\n".join(lines)
    assert any(ln.strip().startswith("likely causes: precision") and "lm-eval version" in ln
               and "evaluation batch" in ln and "prompt format" in ln for ln in lines)
    assert lines[-1] == "  settings that differ from the reference's: dtype: bfloat16 here vs float32"


def test_placement_report_on_new_models_written_into_the_store(paper, tmp_path):
    ours = _ours(paper, tmp_path, new={"me/like-qwen7b": "Qwen/Qwen2.5-7B", "me/like-gpt2": "openai-community/gpt2"})
    rep = placement.placement_report(paper, ours, ["me/like-qwen7b", "me/like-gpt2"], SLICE, n_boot=200,
                                     flops={"me/like-qwen7b": 8.2})
    assert rep["comparable"]
    table = rep["placement"]
    bench = rep["summary"]["benchmarks"]
    assert len(bench) == 24
    # independently: a copy of Qwen2.5-7B's scores minus 0.001 ranks just below it on every benchmark
    direct = store.orient(store.matrix(paper, store.DIRECT)[bench], store.directions(paper))
    qwen = direct.loc["Qwen/Qwen2.5-7B"]
    expect = np.mean([1 + (direct[b] > qwen[b] - 0.001).sum() for b in bench])
    assert table.at["me/like-qwen7b", "direct_mean_rank"] == pytest.approx(expect)
    assert table.at["me/like-qwen7b", "of"] == 63
    lo, hi = table.at["me/like-qwen7b", "direct_ci_benchmarks"]
    assert lo <= expect <= hi
    assert table.at["me/like-gpt2", "tbt_mean_rank"] > 50 > table.at["me/like-qwen7b", "tbt_mean_rank"]
    # the reference's own numbers do not depend on which new models are present
    base = {p: agreement.mean_tau(agreement.pair_table(store.orient(store.matrix(paper, p)[bench],
                                                                    store.directions(paper)))) for p in store.PROTOCOLS}
    assert rep["summary"]["reference_mean_tau"] == pytest.approx(base)
    assert rep["summary"]["reference_mean_tau"][store.DIRECT] == pytest.approx(0.52, abs=0.005)
    alone = placement.placement_report(paper, _ours(paper, tmp_path / "b", new={"me/x": "google/gemma-2b"}),
                                       ["me/x"], SLICE, n_boot=50)
    for p in store.PROTOCOLS:
        pd.testing.assert_frame_equal(rep["reference"][p], alone["reference"][p])
    assert rep["figure"]["compute"] is not None and "me/like-qwen7b" in rep["figure"]["compute"]["new"].index
    assert np.isfinite(table.at["me/like-qwen7b", "tbt_pc1_vs_compute"])
    # the leaderboard's long table: the placement table's numbers, the reference's own mean ranks
    long = rep["mean_ranks"].set_index(["model", "protocol"])
    assert len(long) == 2 * 63 and long["placed"].sum() == 4
    row = long.loc[("me/like-qwen7b", store.TBT)]
    assert (row["mean_rank"], [row["mean_rank_lo"], row["mean_rank_hi"]], row["rank_shift"],
            [row["rank_shift_lo"], row["rank_shift_hi"]], row["of"]) == \
        (table.at["me/like-qwen7b", "tbt_mean_rank"], table.at["me/like-qwen7b", "tbt_ci_benchmarks"],
         table.at["me/like-qwen7b", "rank_shift"], table.at["me/like-qwen7b", "rank_shift_ci"], 63)
    for p in store.PROTOCOLS:
        own = long.xs(p, level="protocol").loc[rep["reference"][p].index]
        assert own["mean_rank"].to_numpy() == pytest.approx(rep["reference"][p]["mean_rank"].to_numpy())
        assert (own["of"] == 61).all()


@pytest.mark.slow
def test_notebook_08_places_models_among_the_published_results(harmony_data, params_dir, tmp_path, monkeypatch):
    """Stage 08 of a placement profile against `published`, run through runner.run on a store written
    with lib.store's writer (stages 02-03 would need a GPU cluster)."""
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    monkeypatch.setenv("TBT_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("TBT_PARAMS", str(params_dir))
    shutil.copy(paths.ROOT / "params" / "place_paper.yaml", params_dir)
    paper = placement.reference_results(params.PUBLISHED)
    root = paths.store_dir("place_paper")
    downstream = paper[~paper.benchmark.str.endswith("_2025")]
    _write(root, downstream[downstream.model.isin(SLICE)])
    for name in ("HuggingFaceTB/SmolLM2-1.7B", "allenai/OLMo-2-0425-1B"):
        _write(root, downstream[downstream.model == "Qwen/Qwen2.5-1.5B"].assign(score=lambda d: d.score + 0.002), name)
    run.run_profile("place_paper", stages=["08"])
    s = outputs.read_summary("place_paper", "08_placement")
    assert s["comparable"] and s["reference"] == "published" and len(s["benchmarks"]) == 24
    assert set(s["placement"]) == {"HuggingFaceTB/SmolLM2-1.7B", "allenai/OLMo-2-0425-1B"}
    out = paths.stage_dir("place_paper", "08_placement")
    assert (out / "figures" / "placement.pdf").exists() and (out / "placement.csv").exists()
    assert "\\newcommand{\\PlaceNewOneTbtRank}" in (out / "numbers.tex").read_text()


# --------------------------------------------------------------------------- end to end among smoke
@pytest.mark.slow
def test_place_smoke_trains_only_new_and_calibration_models_and_reproduces_smoke(smoke):
    """`make all PROFILE=place_smoke` after smoke: two new models and the calibration model are trained
    and tested (nothing of smoke's is touched), the calibration model's results equal smoke's to the
    last digit, and notebook 08 ranks the new models among smoke's."""
    before = {p: p.stat().st_mtime_ns for p in store.iter_paths(smoke["store"])}
    shutil.rmtree(paths.profile_dir("place_smoke"), ignore_errors=True)
    run.run_profile("place_smoke")
    mine = store.load(paths.store_dir("place_smoke"))
    (cal_model,) = params.calibration_models(params.load_profile("place_smoke"))    # smoke's cheapest model
    assert cal_model == "mw-gpt2-s"
    models = ["mw-llama-s-format50", "mw-gpt2-s-instruct50", cal_model]
    assert sorted(mine["model"].unique()) == sorted(models)
    sel = smoke["selection"]["selected"]
    assert len(mine) == len(models) * len(sel) * 2                  # both protocols, every task and corpus
    theirs = store.load(smoke["store"])
    theirs = theirs[theirs.protocol.isin(store.PROTOCOLS)]          # placement runs the two (not smoke's cheaper forms)
    key = ["protocol", "benchmark", "model", "score", "stderr"]
    cal = mine[mine.model == cal_model][key].reset_index(drop=True)
    ref = theirs[theirs.model == cal_model][key].reset_index(drop=True)
    pd.testing.assert_frame_equal(cal, ref)                         # bit for bit
    units = sorted((paths.work_dir("place_smoke") / "train_before_test").rglob("unit.json"))
    lrs = params.load_profile("smoke").params("02_finetune")["lrs"]
    assert len(units) == len(models) * len(sel) * len(lrs)          # 2 new + 1 calibration, nothing else
    assert {p: p.stat().st_mtime_ns for p in store.iter_paths(smoke["store"])} == before
    s = outputs.read_summary("place_smoke", "08_placement")
    assert s["comparable"] and s["calibration"]["n_failed"] == 0
    assert s["calibration"]["n_identical"] == s["calibration"]["n_results"]
    assert set(s["placement"]) == set(models[:2])
    assert all(1 <= row["tbt_mean_rank"] <= 6 for row in s["placement"].values())
    # stepped through as in JupyterLab (its own parameters, profile set by hand), 08 agrees with make all
    from test_lab import step_through

    step_through("08_placement", profile="place_smoke")
    assert outputs.read_summary("place_smoke", "08_placement") == s
    assert (paths.stage_dir("place_smoke", "08_placement") / paths.STAGE_STAMP).exists()
    # the place_mini block of the docs renders from place_smoke's summary (the same keys)
    from test_docs import rendered_against_stand_ins

    (lines,) = rendered_against_stand_ins("place_smoke").values()
    assert lines[0].startswith("Calibration (mw-gpt2-s): ") and "comparable" in lines[0]
    assert [line.split(" | ")[0] for line in lines[4:]] == [f"| {m}" for m in s["new_models"]]
    # the leaderboard page: smoke's four and the two placed models, each marked, ranked as 08 ranked them
    from runner import leaderboard

    data = leaderboard.page_data(leaderboard.board("place_smoke"))
    rows = {m["id"]: m for m in data["models"]}
    assert len(rows) == 6 and {m for m, r in rows.items() if r["role"] == "placed"} == set(models[:2])
    assert rows[cal_model]["role"] == "calibration" and data["placement"]["comparable"]
    assert data["rank"]["source"] == "08_placement/mean_ranks.csv"
    for m in models[:2]:
        assert rows[m]["rank"][store.TBT]["mean"] == pytest.approx(s["placement"][m]["tbt_mean_rank"], rel=1e-5)
        assert rows[m]["rank"][store.TBT]["of"] == 6
    assert {f["name"] for f in data["figures"]} >= {"placement", "placement_compute"}      # FIGURES_OF's names
    assert (paths.profile_dir("place_smoke") / leaderboard.PAGE).exists()


@pytest.mark.slow
def test_template_preflight_prints_gpu_hours_per_new_model(harmony_data, capsys):
    """`make preflight PROFILE=place_paper` offline: the paper's 24 benchmarks for the two new models
    of the template and the two calibration models, with the GPU-hours of each."""
    cli_preflight.main(["place_paper"])
    out = capsys.readouterr().out
    lines = out[out.index("GPU-hours per model"):].splitlines()[1:]
    roles = {ln.split(":")[0].strip(): ln.rsplit("(", 1)[1].rstrip(")") for ln in lines if ln.startswith("  ")}
    assert roles == {"HuggingFaceTB/SmolLM2-1.7B": "new", "allenai/OLMo-2-0425-1B": "new", SLICE[0]: "calibration",
                     SLICE[1]: "calibration"}
    assert "preflight: 96 units" in out


def test_notebook_08_stepped_through_on_a_profile_without_it_says_which_to_use():
    with pytest.raises(params.PrerequisiteError, match=r"08_placement: profile 'mini' has no stage 08_placement"):
        notebook.check_prerequisites(params.load_profile("mini"), "08_placement")


def test_new_models_given_as_folders_are_found_by_their_store_names(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert placement.store_name(str(folder)) == "my-model"          # as lib.pipeline.evaluate.resolve_model names it
    assert placement.store_name("Qwen/Qwen2.5-7B") == "Qwen/Qwen2.5-7B"
