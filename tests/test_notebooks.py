"""Notebook hygiene: committed without outputs, thin, one parameters cell, every profile valid."""

from __future__ import annotations

import json

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


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_validates(name):
    prof = params.load_profile(name)
    assert prof.description and prof.stages


def test_smoke_profile_executes_every_notebook():
    """The test suite runs the smoke profile, so every notebook must be one of its stages."""
    smoke = params.load_profile("smoke")
    missing = sorted(p.stem for p in NOTEBOOKS if p.stem not in smoke.stages)
    assert not missing, f"notebooks not exercised by params/smoke.yaml: {missing}"
