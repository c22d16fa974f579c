"""A tiny project of notebooks (profile ``x``) that the runner's tests run in a temporary folder:
the ``project`` fixture (conftest.py makes it available to every test module) and its notebooks."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from lib import paths


def notebook(path: Path, *bodies: str, params_cell: str = 'profile = "x"\nn = 1\n') -> None:
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell(params_cell)
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# demo"), p, *(nbformat.v4.new_code_cell(b) for b in bodies)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


WRITER = """
import os
from lib import notebook, outputs, params
ctx = notebook.stage("01_demo", globals())
outputs.write_summary(ctx.out, {"n_squared": n * n})
"""
READER = """
from lib import notebook, outputs, params
ctx = notebook.stage("02_reader", globals())
outputs.write_summary(ctx.out, {"twice": 2 * outputs.read_summary(ctx.profile, "01_demo")["n_squared"]})
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """Notebooks, params and outputs of a profile ``x`` in a temporary folder; the kernels the
    runner starts see them through the environment."""
    nb_dir, params_dir, out = tmp_path / "notebooks", tmp_path / "params", tmp_path / "outputs"
    nb_dir.mkdir(), params_dir.mkdir()
    notebook(nb_dir / "01_demo.ipynb", WRITER)
    (params_dir / "x.yaml").write_text("description: demo\nstages:\n  01_demo: {n: 7}\n")
    for key, value in (("TBT_OUTPUTS", out), ("TBT_PARAMS", params_dir), ("TBT_NOTEBOOKS", nb_dir)):
        monkeypatch.setenv(key, str(value))
    monkeypatch.setattr(paths, "NOTEBOOKS", nb_dir)
    monkeypatch.setattr(paths, "PARAMS", params_dir)
    monkeypatch.setattr(paths, "OUTPUTS", out)
    return tmp_path
