"""Notebook 00_world through the real runner, on a tiny-scale world (prepare hook + papermill)."""

from __future__ import annotations

import json

import pytest

from lib import params, paths, run
from lib.miniworld import world as mw

PROFILE = "miniworld-test"          # same build as tests/test_miniworld_zoo.py (cached between them)
HOOK = {"lib.miniworld.zoo:prepare": {
    "seed": 0, "doses": [10, 25], "scale": 0.01, "sizes": ["xs", "s"], "prepared_sizes": ["s"], "workers": 2,
    "n_creatures": 30, "n_corpus_docs": 400, "train": 40, "validation": 10, "test": 20, "reading_train": 40,
    "corpus_train": 10, "corpus_validation": 4, "corpus_test": 4}}


@pytest.mark.slow
def test_world_notebook_runs_and_summarises(tmp_path, monkeypatch):
    import yaml

    pdir = tmp_path / "params"
    pdir.mkdir()
    (pdir / f"{PROFILE}.yaml").write_text(yaml.safe_dump(
        {"description": "tiny mini world", "offline": True, "prepare": [HOOK], "stages": {"00_world": {}}}))
    monkeypatch.setenv("TBT_PARAMS", str(pdir))              # the kernel is a subprocess: it sees the env
    monkeypatch.setattr(params.paths, "PARAMS", pdir)
    log = run.run_profile(PROFILE, force=True)
    assert log["00_world"]["status"] == "ran"
    out = paths.stage_dir(PROFILE, "00_world")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_models"] == 9 and summary["n_families"] == 3 and summary["n_prepared"] == 3
    assert summary["n_benchmarks"] == 6 and summary["n_corpora"] == 2 and summary["corpus_docs"] == 400
    assert summary["mini_world"] and summary["preparation_tokens"] == (2 + 4 + 2) * 16 * 64
    # steps in proportion to the dose: 400 x scale 0.01 = 4 at dose 25, 2 at dose 10 (dose_plan: 10, 25, 10)
    assert (out / "figures" / "world.pdf").exists() and (out / "figures" / "world.png").exists()
    doses = (out / "doses.csv").read_text().splitlines()
    assert doses[0].split(",")[1:] == list(mw.BENCHMARKS)
    # dose_plan: set A (3 tasks) at 10, set B (2 tasks) at 25, set B at 10
    assert sum(int(x) for line in doses[1:] for x in line.split(",")[1:]) == 3 * 10 + 2 * 25 + 2 * 10


def test_world_notebook_is_clean_and_thin():
    nb = json.loads((paths.NOTEBOOKS / "00_world.ipynb").read_text())
    assert nb["cells"][0]["cell_type"] == "markdown" and len(nb["cells"]) <= 25
    assert params.notebook_parameters("00_world") == {"profile": "mini"}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
