"""Notebook hygiene: committed without outputs, in the current nbformat with stable cell ids, naming
the project's kernel, thin, one parameters cell, every profile valid; the git filter that keeps
outputs out of commits; result files readable like the figures."""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys

import nbformat
import pytest

from lib import params, paths

NOTEBOOKS = sorted(paths.NOTEBOOKS.glob("*.ipynb"))
PROFILES = sorted(p.stem for p in paths.PARAMS.glob("*.yaml"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_clean_and_thin(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, c in enumerate(nb["cells"])
             if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; strip them before committing"
    assert len(nb["cells"]) <= 30, f"{path.name}: {len(nb['cells'])} cells; move logic into lib/"
    assert nb["cells"][0]["cell_type"] == "markdown", f"{path.name}: start with the question it answers"
    params.notebook_parameters(path.stem)          # exactly one literal-only parameters cell
    assert (nb["nbformat"], nb["nbformat_minor"]) == (4, 5), f"{path.name}: store it in nbformat 4.5"
    ids = [c.get("id") for c in nb["cells"]]
    assert all(ids) and len(set(ids)) == len(ids), f"{path.name}: every cell needs a stable, unique id"
    nbformat.validate(nbformat.reads(path.read_text(), as_version=4))
    assert nb["metadata"]["kernelspec"]["name"] == params.KERNEL, f"{path.name}: name the project's kernel"
    first = nb["cells"][1]["source"]
    assert "tags" in nb["cells"][1]["metadata"] and f'profile = "{params.DEFAULT_PROFILE}"' in "".join(first)


def _makefile_strip_command() -> list[str]:
    """The nbstripout command the Makefile installs as git's clean filter (run with this interpreter)."""
    text = (paths.ROOT / "Makefile").read_text().replace("\\\n", " ")
    line = re.search(r"^NBSTRIP := (.*)$", text, re.M).group(1)
    return shlex.split(line.replace("$(VENV)/bin/python", sys.executable)) + ["-t"]


@pytest.mark.slow
def test_git_strips_notebook_outputs_before_commit():
    """.gitattributes sends every notebook through the Makefile's nbstripout filter: a committed
    notebook is left as it is (git status stays clean), and one saved by JupyterLab after running
    (outputs, counts, timings, full language_info) comes out as the committed file."""
    attrs = (paths.ROOT / ".gitattributes").read_text()
    assert "*.ipynb filter=nbstripout" in attrs
    make = (paths.ROOT / "Makefile").read_text()
    assert "git config filter.nbstripout.clean '$(NBSTRIP_FILTER)'" in make
    assert "filter.nbstripout.required true" in make
    assert "then $(NBSTRIP) \"$$@\"" in make.split("NBSTRIP_FILTER :=")[1].split("\n")[0]   # the same command
    strip = _makefile_strip_command()
    out = subprocess.run(strip + [str(p) for p in NOTEBOOKS], capture_output=True, text=True, check=True).stdout
    for path in NOTEBOOKS:                               # one process, the notebooks' texts one after another
        text = path.read_text()
        assert out[:len(text)] == text, f"{path.name}: not what the git filter writes; run the filter on it"
        out = out[len(text):]
    assert out == ""
    path = NOTEBOOKS[0]
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.execution_count = i
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 1000)]
            cell.metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00Z"}
            cell.metadata["scrolled"] = True
    nb.metadata["language_info"].update(version="3.11.9", mimetype="text/x-python", file_extension=".py",
                                        codemirror_mode={"name": "ipython", "version": 3},
                                        nbconvert_exporter="python", pygments_lexer="ipython3")
    saved = nbformat.writes(nb) + "\n"
    out = subprocess.run(strip, input=saved, capture_output=True, text=True, check=True).stdout
    assert out == path.read_text()


def test_result_files_are_readable_like_the_figures(tmp_path):
    """Under a 022 umask, summary.json, numbers.tex, tables and folders made atomically are 0644 / 0755."""
    code = f"""
import os, pandas as pd
os.umask(0o022)
from lib import outputs, util
out = {str(tmp_path)!r}
outputs.write_summary(out, {{"x": 1}})
outputs.write_numbers_tex(out, {{"x": 1.5}})
outputs.write_table(pd.DataFrame({{"a": [1]}}), out, "table")
util.atomic_dir(os.path.join(out, "folder"), lambda d: open(os.path.join(d, "f.txt"), "w").close())
"""
    subprocess.run([sys.executable, "-c", code], cwd=paths.ROOT, check=True)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.rglob("*")}
    assert modes == {"summary.json": 0o644, "numbers.tex": 0o644, "table.csv": 0o644, "folder": 0o755,
                     "f.txt": 0o644}, {k: oct(v) for k, v in modes.items()}


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_validates(name):
    prof = params.load_profile(name)
    assert prof.description and prof.stages


def test_smoke_profile_executes_every_notebook():
    """The test suite runs the smoke profile, so every notebook must be one of its stages; notebook 08
    places models among a reference's, so the suite runs it in place_smoke, placed among smoke
    (tests/test_placement.py)."""
    smoke = params.load_profile("smoke")
    placed = params.load_profile("place_smoke")
    assert placed.reference == "smoke"
    missing = sorted(p.stem for p in NOTEBOOKS if p.stem not in smoke.stages and p.stem not in placed.stages)
    assert not missing, f"notebooks not exercised by params/smoke.yaml: {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_parameters_cell_reads_as_papermill_reads_it(path):
    """lib reads the defaults with ast (no papermill in the kernel); papermill, which injects the
    values after that cell, finds the same names with the same values in the same order."""
    import papermill as pm

    theirs = {k: ast.literal_eval(v["default"]) for k, v in pm.inspect_notebook(str(path)).items()}
    assert list(params.notebook_parameters(path.stem).items()) == list(theirs.items())


@pytest.mark.parametrize("cell,message", [
    ('profile = "x"\nn = len("ab")', "parameter 'n' = len(\"ab\") is not a literal"),
    ('profile = "x"\na, b = 1, 2', "parameters cell, line 2: one `name = literal  # comment` per statement"),
    ('profile = "x"\nprint(1)', "parameters cell, line 2: one `name = literal  # comment` per statement"),
    ('profile = "x"\nn = (1', "cannot read its parameters cell"),
])
def test_a_parameters_cell_that_is_not_name_equals_literal_is_an_error_naming_the_line(project, cell, message):
    from notebook_project import notebook

    notebook(project / "notebooks" / "01_demo.ipynb", "pass", params_cell=cell)
    with pytest.raises(params.ParamsError, match=re.escape(message)):
        params.notebook_parameters("01_demo")
