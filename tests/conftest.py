"""Shared test set-up: offline hub, caches and outputs inside the project's git-ignored folders."""

from __future__ import annotations

import os
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
