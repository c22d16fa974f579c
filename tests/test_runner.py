"""The papermill runner: parameters injected, stages cached by fingerprint, failures leave no result."""

from __future__ import annotations

import json

import nbformat
import pytest

from lib import params, run


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
ctx = params.stage("01_demo", profile)
report.write_summary(ctx.out, {"n_squared": n * n})
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
    assert not (out / "01_demo.ipynb").exists() and not (out / run.FINGERPRINT).exists()


def test_unknown_stage_selection_is_an_error(project):
    with pytest.raises(params.ParamsError, match="no stage '09'"):
        run.run_profile("x", stages=["09"])
