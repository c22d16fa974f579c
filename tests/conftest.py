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

from lib.pipeline.device import pin_arithmetic  # noqa: E402  (imports no torch)

pin_arithmetic()          # the arithmetic of make all, before torch loads (lib/pipeline/device.py)

import pytest  # noqa: E402


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


_SESSION_START = time.time()
SMOKE = "smoke"


@pytest.fixture(scope="session")
def smoke():
    """Run prepare + 01-03 of the smoke profile once per test session (from a clean store, so no
    result of an older code version is reused; the built tiny models are kept, they are cached by
    their definition)."""
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
