"""`make all PROFILE=smoke` in the test suite: every stage runs through papermill, and the analysis
notebooks 04-07 read the numbers the smoke pipeline produced (checked here independently)."""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
from scipy import stats

from lib import layout, outputs, params, paths, store
from runner import contactsheet, run

pytestmark = pytest.mark.slow
STAGES = list(params.load_profile("smoke").stages)


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
    (runner.figreview); outputs/smoke/figures.html shows each with its notebook."""
    review = contactsheet.check(paths.profile_dir("smoke"))
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
    summary = outputs.read_summary("smoke", "04_rank_agreement")
    benchmarks = sel["benchmarks"]
    assert summary["n_benchmarks"] == len(benchmarks) == 3
    assert summary["n_pairs"] == 3
    for protocol in store.PROTOCOLS:
        m = store.matrix(df, protocol, benchmarks)
        assert summary["n_models"][protocol] == len(m) == 4
        taus = [_tau_b(m[a], m[b]) for i, a in enumerate(benchmarks) for b in benchmarks[i + 1:]]
        assert not all(math.isnan(t) for t in taus), f"{protocol}: smoke's store defines no tau (a constant column?)"
        got = summary["mean_tau"][protocol]
        assert got is not None and got == pytest.approx(float(np.nanmean(taus)), abs=1e-9), protocol


def test_perplexity_and_pca_read_the_smoke_store(full_smoke):
    df = full_smoke["results"]
    ppl = outputs.read_summary("smoke", "05_perplexity")
    assert ppl["corpora"] == ["mw_wiki"]
    # tau between (negated) bits-per-byte and mean downstream score, before fine-tuning
    d = df[df.protocol == "direct_eval"]
    bpb = d[d.benchmark == "mw_wiki"].set_index("model")["score"]
    down = d[d.benchmark != "mw_wiki"].groupby("model")["score"].mean()
    expected = _tau_b(-bpb.sort_index(), down.loc[bpb.sort_index().index])
    assert not math.isnan(expected), "smoke's store defines no tau between bits per byte and the mean score"
    got = ppl["tau_average"]["direct"]["all"]
    assert got is not None and got == pytest.approx(expected, abs=1e-9)

    pca = outputs.read_summary("smoke", "06_pca")
    benchmarks = full_smoke["selection"]["benchmarks"]
    for protocol in store.PROTOCOLS:
        m = store.matrix(df, protocol, benchmarks).dropna()
        m = m.loc[:, m.std() > 0]                               # 06 drops constant benchmarks
        z = (m - m.mean()) / m.std()
        eig = np.sort(np.linalg.eigvalsh(np.cov(z.to_numpy(), rowvar=False)))[::-1]
        share = pca["pc1_explained"][protocol]
        assert share is not None and share == pytest.approx(eig[0] / eig.sum(), abs=1e-9), protocol
        assert pca["explained_variance"][protocol] == pytest.approx(list(eig[:len(pca["explained_variance"][protocol])]
                                                                          / eig.sum()), abs=1e-9), protocol


def test_benchalign_runs_on_pipeline_items(full_smoke):
    """07 reads the direct-eval items the pipeline wrote: every selected benchmark as a feature, every
    item counted, the four models; smoke's four leave no test group, and the summary says so."""
    summary = outputs.read_summary("smoke", "07_benchalign")
    benchmarks = full_smoke["selection"]["benchmarks"]
    items = paths.work_dir("smoke") / "items" / "direct_eval"
    assert sorted(p.name for p in items.iterdir()) == sorted(benchmarks)
    data = summary["data"]
    assert data["data_source"] == "pipeline" and data["target"] == "mean train_before_test"
    assert data["features"] == benchmarks and data["models"] == 4
    per_benchmark = {}
    for bench in benchmarks:
        counts = {len(layout.read_items(f)["correct"]) for f in (items / bench).glob("*.json")}
        assert len(counts) == 1, (bench, counts)                # every model answered the same items
        per_benchmark[bench] = counts.pop()
    assert data["items"] == sum(per_benchmark.values())
    assert {b: w["items"] for b, w in summary["weights_by_benchmark"].items()} == per_benchmark
    assert summary["main"] == {} and "no test group could be evaluated: too few models for a source/test split" \
        in summary["notes"]


def test_every_docs_table_of_the_mini_world_renders_from_the_smoke_summaries(full_smoke):
    """The tables that docs/ quotes for `mini` (and `real_cpu`'s 01-03) read the keys the smoke
    profile's reports write: each renders a header and at least one row of numbers, so a renamed key
    or a bug in a table fails here, not in a `make check-docs` an hour into `make all`."""
    from test_docs import rendered_against_stand_ins

    tables = rendered_against_stand_ins("smoke")
    assert {k.split(" ")[1] for k in tables} == {"agreement", "quality", "p1", "subsets", "compositions", "leads",
                                                 "budget", "scores", "benchalign-pipeline", "cheaper"}, sorted(tables)
    for where, lines in tables.items():
        assert lines and all(isinstance(line, str) for line in lines), where
        if where.endswith(" benchalign-pipeline") and not outputs.read_summary("smoke", "07_benchalign")["main"]:
            assert lines == [lines[0]] and lines[0].startswith("(no test group large enough: "), lines
            continue                            # smoke's 4 models leave no test group (its summary says so)
        data = [line for line in lines if line.startswith("| ") and not line.startswith("| ---")][1:]
        assert data and any(any(ch.isdigit() for ch in line) for line in data), (where, lines)

