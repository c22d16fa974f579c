"""`make all PROFILE=smoke` in the test suite: every stage runs through papermill, and the analysis
notebooks 04-07 read the numbers the smoke pipeline produced (checked here independently)."""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
from scipy import stats

from lib import figreview, paths, report, run, store

pytestmark = pytest.mark.slow
STAGES = ["00_world", "01_select_benchmarks", "02_finetune", "03_direct_eval", "04_rank_agreement",
          "05_perplexity", "06_pca", "07_benchalign"]


@pytest.fixture(scope="module")
def full_smoke(smoke):
    """The whole profile; 01-03 are cached from the shared `smoke` run, the rest execute now."""
    log = run.run_profile("smoke")
    return {"log": log, "results": store.load(paths.store_dir("smoke")), **smoke}


def test_every_stage_ran_and_left_its_outputs(full_smoke):
    assert list(full_smoke["log"]) == STAGES
    for stage in ("01_select_benchmarks", "02_finetune", "03_direct_eval"):
        assert full_smoke["log"][stage]["status"] == "cached", "01-03 should be reused, not redone"
    for stage in STAGES:
        out = paths.stage_dir("smoke", stage)
        assert (out / "summary.json").exists() and (out / f"{stage}.ipynb").exists(), stage
        pdfs = {p.stem for p in (out / "figures").glob("*.pdf")}
        pngs = {p.stem for p in (out / "figures").glob("*.png")}
        assert pdfs == pngs, f"{stage}: every figure as PDF and PNG"
        executed = (out / f"{stage}.ipynb").read_text()
        for machine in {str(paths.ROOT), os.path.realpath(paths.ROOT), str(paths.OUTPUTS), sys.prefix}:
            assert machine not in executed, f"{stage}: the executed notebook names {machine}"
        assert "it/s]" not in executed and "TqdmWarning" not in executed, f"{stage}: progress bars stored"
    assert run.run_profile("smoke")["07_benchalign"]["status"] == "cached"


def test_every_figure_passes_the_review_and_is_on_the_contact_sheet(full_smoke):
    """Every figure the smoke profile writes: at most 7.0 in wide, no text under 7 pt at print size,
    no overlapping text, every axis labelled, no legend on data, a title and a caption
    (lib.figreview); outputs/smoke/figures.html shows each with its notebook."""
    review = figreview.check(paths.profile_dir("smoke"))
    assert len(review) >= 16
    assert {k: v for k, v in review.items() if v} == {}
    sheet = (paths.profile_dir("smoke") / "figures.html").read_text()
    for key in review:
        stage, name = key.split("/")
        assert f"{stage}/figures/{name}.png" in sheet and f"{stage}/{stage}.ipynb" in sheet


def _tau_b(a, b):
    return stats.kendalltau(a, b, variant="b").statistic


def test_rank_agreement_reads_the_smoke_store(full_smoke):
    df, sel = full_smoke["results"], full_smoke["selection"]
    summary = report.read_summary("smoke", "04_rank_agreement")
    benchmarks = sel["benchmarks"]
    assert summary["n_benchmarks"] == len(benchmarks) == 3
    assert summary["n_pairs"] == 3
    for protocol in store.PROTOCOLS:
        m = store.matrix(df, protocol, benchmarks)
        assert summary["n_models"][protocol] == len(m) == 4
        taus = [_tau_b(m[a], m[b]) for i, a in enumerate(benchmarks) for b in benchmarks[i + 1:]]
        expected = float(np.nanmean(taus)) if not all(math.isnan(t) for t in taus) else None
        got = summary["mean_tau"][protocol]
        if expected is None:
            assert got is None or math.isnan(got)
        else:
            assert got == pytest.approx(expected, abs=1e-9), protocol


def test_perplexity_and_pca_read_the_smoke_store(full_smoke):
    df = full_smoke["results"]
    ppl = report.read_summary("smoke", "05_perplexity")
    assert ppl["corpora"] == ["mw_wiki"]
    # tau between (negated) bits-per-byte and mean downstream score, before fine-tuning
    d = df[df.protocol == "direct_eval"]
    bpb = d[d.benchmark == "mw_wiki"].set_index("model")["score"]
    down = d[d.benchmark != "mw_wiki"].groupby("model")["score"].mean()
    expected = _tau_b(-bpb.sort_index(), down.loc[bpb.sort_index().index])
    got = ppl["tau_average"]["direct"]["all"]
    assert (got is None and math.isnan(expected)) or got == pytest.approx(expected, abs=1e-9)

    pca = report.read_summary("smoke", "06_pca")
    for protocol in store.PROTOCOLS:
        share = pca["pc1_explained"][protocol]
        assert share is None or 1 / 3 - 1e-9 <= share <= 1.0 + 1e-9   # PC1 of <= 3 standardised columns


def test_benchalign_runs_on_pipeline_items(full_smoke):
    summary = report.read_summary("smoke", "07_benchalign")
    assert "main" in summary
    items = paths.work_dir("smoke") / "items" / "direct_eval"
    assert sorted(p.name for p in items.iterdir()) == sorted(full_smoke["selection"]["benchmarks"])


def test_every_docs_table_of_the_mini_world_renders_from_the_smoke_summaries(full_smoke):
    """The tables that docs/ quotes for `mini` (and `real_cpu`'s 01-03) read the keys the smoke
    profile's reports write: each renders a header and at least one row of numbers, so a renamed key
    or a bug in a table fails here, not in a `make check-docs` an hour into `make all`."""
    from test_docs import rendered_against_stand_ins

    tables = rendered_against_stand_ins("smoke")
    assert {k.split(" ")[1] for k in tables} == {"agreement", "quality", "p1", "subsets", "compositions", "leads",
                                                 "budget", "scores", "benchalign-pipeline"}, sorted(tables)
    for where, lines in tables.items():
        assert lines and all(isinstance(line, str) for line in lines), where
        if where.endswith(" benchalign-pipeline") and not report.read_summary("smoke", "07_benchalign")["main"]:
            assert lines == [lines[0]] and lines[0].startswith("(no test group large enough: "), lines
            continue                            # smoke's 4 models leave no test group (its summary says so)
        data = [line for line in lines if line.startswith("| ") and not line.startswith("| ---")][1:]
        assert data and any(any(ch.isdigit() for ch in line) for line in data), (where, lines)

