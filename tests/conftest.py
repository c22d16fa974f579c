"""Shared test set-up: offline hub, caches and outputs inside the project's git-ignored folders."""

from __future__ import annotations

import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Must happen before lib / transformers / datasets are imported anywhere in the test session.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HOME", str(ROOT / ".cache" / "hf"))
os.environ.setdefault("MPLCONFIGDIR", str(ROOT / ".cache" / "matplotlib"))
os.environ.setdefault("MPLBACKEND", "Agg")
# Generated files of the test session go here, never into outputs/ (stages cache by fingerprint).
os.environ.setdefault("TBT_OUTPUTS", str(ROOT / ".cache" / "test-outputs"))
if not os.environ.get("HARMONY_DATA") and (ROOT.parent / "shared" / "data").is_dir():
    os.environ["HARMONY_DATA"] = str(ROOT.parent / "shared" / "data")

import pytest  # noqa: E402

# Under `pytest -n 2` (pytest-xdist, `make test`) the tests that write the same profile's outputs run
# on one worker, one after another: the ones using these fixtures, and the two modules of the
# tiny mini world.
SHARED_OUTPUTS = {"smoke": "smoke", "published_analyses": "published"}
SHARED_MODULES = {"test_miniworld_zoo.py": "miniworld-test", "test_miniworld_notebook.py": "miniworld-test"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        groups = {g for f, g in SHARED_OUTPUTS.items() if f in item.fixturenames}
        groups |= {SHARED_MODULES[item.path.name]} if item.path.name in SHARED_MODULES else set()
        assert len(groups) <= 1, f"{item.nodeid} writes the outputs of several profiles: {groups}"
        if groups:
            item.add_marker(pytest.mark.xdist_group(groups.pop()))


@pytest.fixture(scope="session")
def harmony_data() -> Path:
    """Folder of the published reference data; skips the test (saying why) when it is absent."""
    from lib import paths

    try:
        return paths.data_dir("lm-harmony/all_results.json")
    except paths.DataMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture
def one_torch_thread():
    """Small torch fits run fastest on one thread (and do not fight other work on 2 cores)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def published_analyses(harmony_data) -> dict:
    """The published profile's analysis stages 04-06, run (or found cached) once per test session;
    their summaries."""
    from lib import report, run

    run.run_profile("published", stages=["04", "05", "06"])
    return {s: report.read_summary("published", s) for s in ("04_rank_agreement", "05_perplexity", "06_pca")}


_SESSION_START = time.time()
SMOKE = "smoke"


@pytest.fixture(scope="session")
def smoke():
    """Run prepare + 01-03 of the smoke profile once per test session (from a clean store, so no
    result of an older code version is reused; the world and its models are kept: they are cached by
    the world's data and the zoo's builder version)."""
    import shutil

    from lib import paths, report, run

    prof_dir = paths.profile_dir(SMOKE)
    log = prof_dir / "run_log.json"
    fresh = log.exists() and log.stat().st_mtime > _SESSION_START and \
        all((paths.stage_dir(SMOKE, s) / "summary.json").exists()
            for s in ("01_select_benchmarks", "02_finetune", "03_direct_eval"))
    if not fresh:
        for sub in ("01_select_benchmarks", "02_finetune", "03_direct_eval", "store", "work/train_before_test",
                    "work/items"):
            shutil.rmtree(prof_dir / sub, ignore_errors=True)
        run.run_profile(SMOKE, stages=["01", "02", "03"], force=True)
    return {"store": paths.store_dir(SMOKE), "work": paths.work_dir(SMOKE),
            "selection": report.read_summary(SMOKE, "01_select_benchmarks")}
