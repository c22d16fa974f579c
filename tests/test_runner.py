"""The papermill runner: parameters injected, stages cached by fingerprint, failures leave no result."""

from __future__ import annotations

import json

import nbformat
import pytest

from lib import params, paths, run


def _notebook(path, body: str, default: int = 1):
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell(f'profile = "x"\nn = {default}\n')
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# demo"), p, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


BODY = """
import json, os
from lib import params, report
ctx = params.stage("01_demo", globals())
report.write_summary(ctx.out, {"n_squared": n * n})
with open(os.path.join(ctx.out, "calls.txt"), "a") as fh:
    fh.write("x")
"""
READER = """
import os
from lib import params, report
ctx = params.stage("02_reader", globals())
first = report.read_summary(ctx.profile, "01_demo")
report.write_summary(ctx.out, {"twice": 2 * first["n_squared"]})
with open(os.path.join(ctx.out, "calls.txt"), "a") as fh:
    fh.write("x")
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    nb_dir, params_dir, out = tmp_path / "notebooks", tmp_path / "params", tmp_path / "outputs"
    nb_dir.mkdir(), params_dir.mkdir()
    _notebook(nb_dir / "01_demo.ipynb", BODY)
    (params_dir / "x.yaml").write_text("description: demo\nstages:\n  01_demo: {n: 7}\n")
    monkeypatch.setenv("TBT_OUTPUTS", str(out))   # the kernel is a subprocess: it sees the env
    monkeypatch.setattr(params.paths, "NOTEBOOKS", nb_dir)
    monkeypatch.setattr(params.paths, "PARAMS", params_dir)
    monkeypatch.setattr(params.paths, "OUTPUTS", out)
    return tmp_path


@pytest.mark.slow
def test_runner_injects_caches_and_reruns_on_change(project, monkeypatch):
    # The kernel imports lib from the real project; point its outputs and params at the fake ones.
    monkeypatch.setenv("TBT_PARAMS", str(project / "params"))
    monkeypatch.setenv("TBT_NOTEBOOKS", str(project / "notebooks"))
    out = project / "outputs" / "x" / "01_demo"
    log = run.run_profile("x")
    assert log["01_demo"]["status"] == "ran"
    assert json.loads((out / "summary.json").read_text()) == {"n_squared": 49}
    assert (out / "01_demo.ipynb").exists() and not list(out.glob(".*partial*"))
    assert run.run_profile("x")["01_demo"]["status"] == "cached"
    (project / "params" / "x.yaml").write_text("description: demo\nstages:\n  01_demo: {n: 3}\n")
    assert run.run_profile("x")["01_demo"]["status"] == "ran"
    assert json.loads((out / "summary.json").read_text()) == {"n_squared": 9}
    assert (out / "calls.txt").read_text() == "xx"


@pytest.mark.slow
def test_failing_stage_leaves_no_executed_notebook_or_stamp(project, monkeypatch):
    monkeypatch.setenv("TBT_PARAMS", str(project / "params"))
    monkeypatch.setenv("TBT_NOTEBOOKS", str(project / "notebooks"))
    _notebook(project / "notebooks" / "01_demo.ipynb", "raise RuntimeError('boom')")
    with pytest.raises(Exception, match="boom"):
        run.run_profile("x")
    out = project / "outputs" / "x" / "01_demo"
    assert not (out / "01_demo.ipynb").exists() and not (out / paths.STAGE_STAMP).exists()


def test_unknown_stage_selection_is_an_error(project):
    with pytest.raises(params.ParamsError, match="no stage '09'"):
        run.run_profile("x", stages=["09"])


@pytest.mark.slow
def test_a_stage_reruns_when_what_it_reads_changes(project, monkeypatch):
    """02 reads 01's summary: it re-runs when that summary changes, not when 01 merely re-ran."""
    monkeypatch.setenv("TBT_PARAMS", str(project / "params"))
    monkeypatch.setenv("TBT_NOTEBOOKS", str(project / "notebooks"))
    _notebook(project / "notebooks" / "02_reader.ipynb", READER)
    (project / "params" / "x.yaml").write_text("description: demo\nstages:\n  01_demo: {n: 7}\n  02_reader:\n")
    assert [s["status"] for s in run.run_profile("x").values()] == ["ran", "ran"]
    out = project / "outputs" / "x" / "02_reader"
    assert json.loads((out / "summary.json").read_text()) == {"twice": 98}
    assert [s["status"] for s in run.run_profile("x", stages=["01"], force=True).values()] == ["ran"]
    assert run.run_profile("x")["02_reader"]["status"] == "cached"      # 01 re-ran, same summary
    (project / "params" / "x.yaml").write_text("description: demo\nstages:\n  01_demo: {n: 2}\n  02_reader:\n")
    assert [s["status"] for s in run.run_profile("x").values()] == ["ran", "ran"]
    assert json.loads((out / "summary.json").read_text()) == {"twice": 8}


def test_a_stage_key_covers_only_the_lib_modules_it_imports(tmp_path):
    """Editing lib/benchalign/rank.py changes the key of 07 only (the published profile's stages)."""
    import shutil

    root = tmp_path / "repo"
    shutil.copytree(paths.ROOT / "lib", root / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    prof = params.load_profile("published")
    before = {s: run.stage_key(s, prof.params(s), root) for s in prof.stages}
    rank = root / "lib" / "benchalign" / "rank.py"
    rank.write_text(rank.read_text() + "\n# an edit\n")
    after = {s: run.stage_key(s, prof.params(s), root) for s in prof.stages}
    assert [s for s in prof.stages if before[s] != after[s]] == ["07_benchalign"]
    assert "lib/benchalign/rank.py" in after["07_benchalign"]["lib"]
    assert not any(f.startswith("lib/benchalign") for f in after["04_rank_agreement"]["lib"])
    assert "lib/analysis/agreement.py" in after["04_rank_agreement"]["lib"]
