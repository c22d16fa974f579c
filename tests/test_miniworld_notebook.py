"""Notebook 00_world through the real runner, on a tiny-scale world (prepare hook + papermill)."""

from __future__ import annotations

import json

import pytest
from test_miniworld_zoo import SMALL, ZOO

from lib import params, paths
from lib.miniworld import world as mw
from runner import run

PROFILE = "miniworld-test"          # same build as tests/test_miniworld_zoo.py (cached between them)
HOOK = {"lib.miniworld.zoo:prepare": {"seed": 0, **{k: list(v) if isinstance(v, tuple) else v for k, v in ZOO.items()},
                                      **SMALL}}


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
    # 6 bases (3 families x xs, s), 3 twins at s (format 25 %, instruct 75 %, contam 50 %: twin_plan's
    # square cut to one size), 3 shams, 1 answer-contaminated twin (50 %)
    assert summary["n_models"] == 13 and summary["n_families"] == 3 and summary["n_prepared"] == 4
    assert summary["n_kinds"] == 5 and summary["prepared_docs"] > 0
    assert summary["n_benchmarks"] == 6 and summary["n_corpora"] == 2 and summary["corpus_docs"] == 400
    assert summary["mini_world"]
    assert (out / "figures" / "world.pdf").exists() and (out / "figures" / "world.png").exists()
    doses = (out / "doses.csv").read_text().splitlines()
    assert doses[0].split(",")[1:] == list(mw.BENCHMARKS)
    # doses in % of the last phase on each target: format 3 tasks x 25, instruct 6 x 75, contam 3 x 50,
    # answers 3 x 50
    assert sum(int(x) for line in doses[1:] for x in line.split(",")[1:]) == 3 * 25 + 6 * 75 + 3 * 50 + 3 * 50


def test_world_notebook_is_clean_and_thin():
    nb = json.loads((paths.NOTEBOOKS / "00_world.ipynb").read_text())
    assert nb["cells"][0]["cell_type"] == "markdown" and len(nb["cells"]) <= 25
    assert params.notebook_parameters("00_world") == {"profile": "mini"}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
