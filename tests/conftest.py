"""Shared test set-up: offline hub, caches and outputs inside the project's git-ignored folders."""

from __future__ import annotations

import contextlib
import os
import uuid
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
from notebook_project import project  # noqa: E402,F401  (the tiny notebook project of the runner's tests)

# Under `pytest -n 2` (pytest-xdist, `make test`) the modules that write and read the same profile's
# outputs run on one worker, one after another, in their order: the smoke profile's (built once by
# the `smoke` fixture; test_lab changes its 04 and runs it again) and the tiny mini world's (one
# build). The Slurm lane (its own profile, smoke_slurm, sharing smoke's zoo) is a group of its own,
# beside them: it only reads smoke's store, through the `smoke` fixture, which builds it once per
# test run whichever worker asks first. Every other test goes wherever a worker is free. (xdist's
# own `--dist loadgroup` marks do not reach its scheduler under pytest 9, whose node ids are no
# longer plain strings.)
SERIAL = {"smoke": ("test_analysis_notebooks.py", "test_lab.py", "test_pipeline_smoke.py", "test_smoke_profile.py",
                   "test_placement.py", "test_leaderboard_browser.py"),
          "slurm": ("test_slurm.py",),
          "published-07": ("test_docs.py", "test_benchalign_experiments.py"),     # share published 07's run
          "miniworld-test": ("test_miniworld_notebook.py", "test_miniworld_zoo.py")}
_SERIAL_GROUP = {module: group for group, modules in SERIAL.items() for module in modules}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class Serial(LoadScopeScheduling):
        """A work unit per test, except the modules of :data:`SERIAL`: one unit per group."""

        def _split_scope(self, nodeid: str) -> str:
            return _SERIAL_GROUP.get(nodeid.split("::")[0].rsplit("/", 1)[-1], nodeid)

    return Serial(config, log)


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


# The tests run the published profile on other kernels than `make all` does (MKL's SSE2 branch,
# OpenBLAS's Sandybridge kernels): a stand-in for another CPU, so the docs check (test_docs) finds
# every quoted number as quoted or within its stated spread (docs/spreads.json). torch's own kernels
# stay AVX2: its portable ones made 07 take 252 s instead of 164 s. OpenBLAS's kernels only where
# they are the project's pin: a machine that sets its own keeps them.
OTHER_ARITHMETIC = {"MKL_CBWR": "COMPATIBLE"}
if os.environ.get("OPENBLAS_CORETYPE") == "Haswell":
    OTHER_ARITHMETIC["OPENBLAS_CORETYPE"] = "Sandybridge"


@contextlib.contextmanager
def other_arithmetic():
    before = {k: os.environ.get(k) for k in OTHER_ARITHMETIC}
    os.environ.update(OTHER_ARITHMETIC)           # read by the kernels the run starts
    try:
        yield
    finally:
        for k, v in before.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture(scope="session")
def published_analyses(harmony_data) -> dict:
    """The published profile's analysis stages 04-06, run (or found cached) once per test session
    (on :data:`OTHER_ARITHMETIC`); their summaries."""
    from lib import outputs
    from runner import run

    with other_arithmetic():
        run.run_profile("published", stages=["04", "05", "06"], wait=True)    # another worker may be running it
    return {s: outputs.read_summary("published", s) for s in ("04_rank_agreement", "05_perplexity", "06_pca")}


@pytest.fixture(scope="session")
def published_run(harmony_data) -> Path:
    """Stages 04-07 of the published profile, run (or found cached) once per test session on
    :data:`OTHER_ARITHMETIC` (07 alone takes about two minutes: the docs check and 07's own test
    share it); the profile's folder."""
    from lib import paths
    from runner import run

    with other_arithmetic():
        run.run_profile("published", stages=["04", "05", "06", "07"], wait=True)
    return paths.profile_dir("published")


# One id per test run, the same in every xdist worker (one process: made here).
RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex
SMOKE = "smoke"
SMOKE_STAGES = ("01_select_benchmarks", "02_finetune", "03_direct_eval")


@pytest.fixture(scope="session")
def smoke():
    """Run prepare + 01-03 of the smoke profile once per test run (from a clean store, so no result
    of an older code version is reused; the world and its models are kept: they are cached by the
    world's data and the zoo's builder version). The worker that asks first builds it under a file
    lock; another waits for it and reads what it built (the run's id, written last, says so)."""
    import fcntl
    import shutil

    from lib import outputs, paths
    from runner import run

    prof_dir = paths.profile_dir(SMOKE)
    prof_dir.mkdir(parents=True, exist_ok=True)
    built = prof_dir / "test-run-id"
    with open(prof_dir / ".test-smoke.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fresh = built.exists() and built.read_text() == RUN_ID and \
            all((paths.stage_dir(SMOKE, s) / "summary.json").exists() for s in SMOKE_STAGES)
        if not fresh:
            built.unlink(missing_ok=True)
            for sub in (*SMOKE_STAGES, "store", "work/train_before_test", "work/items"):
                shutil.rmtree(prof_dir / sub, ignore_errors=True)
            run.run_profile(SMOKE, stages=["01", "02", "03"], force=True)
            built.write_text(RUN_ID)
    return {"store": paths.store_dir(SMOKE), "work": paths.work_dir(SMOKE),
            "selection": outputs.read_summary(SMOKE, "01_select_benchmarks")}
