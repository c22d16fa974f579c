"""Stepping through the notebooks as in JupyterLab: every notebook runs top to bottom through a
Jupyter kernel with its own defaults (no papermill injection) after its profile has run, and agrees
with what `make all` wrote; whatever a notebook needs and does not find, the error names the command
that makes it."""

from __future__ import annotations

import json
import os
import re

import nbclient
import nbformat
import pytest

from lib import notebook, outputs, params, paths, store
from runner import kernel, run

PROFILE = "smoke"        # the test suite's stand-in for the default profile (mini takes 15-30 minutes)
# every notebook of the smoke profile; 08_placement, which needs a placement profile, is stepped through
# on place_smoke by tests/test_placement.py
NOTEBOOKS = sorted(p.stem for p in paths.NOTEBOOKS.glob("*.ipynb") if p.stem in params.load_profile(PROFILE).stages)
COMMAND = re.compile(r"`(make (run|all|data)[^`]*|export HARMONY_DATA=[^`]*)`")


def _client(nb: nbformat.NotebookNode) -> nbclient.NotebookClient:
    return nbclient.NotebookClient(nb, kernel_name=params.KERNEL, kernel_manager_class=kernel.kernel_manager_class(),
                                   timeout=900, resources={"metadata": {"path": str(paths.NOTEBOOKS)}})


def step_through(stage: str, profile: str = PROFILE, edit: dict[str, str] | None = None,
                 kernel: nbclient.NotebookClient | None = None) -> nbformat.NotebookNode:
    """Execute notebook ``stage`` top to bottom in the project's kernel, as JupyterLab's "Run All"
    does: its own parameters cell, with only the ``profile`` line (and ``edit``: name -> new line)
    changed by hand. Raises nbclient's CellExecutionError when a cell fails. With ``kernel`` (a
    client of a running kernel, :func:`shared_kernel`) the notebook runs there, from a cleared
    namespace; else in a kernel of its own."""
    nb = nbformat.read(paths.NOTEBOOKS / f"{stage}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    lines = cell.source.splitlines()
    for name, line in {"profile": f'profile = "{profile}"', **(edit or {})}.items():
        i = next(i for i, s in enumerate(lines) if s.startswith(f"{name} ="))
        lines[i] = line
    cell.source = "\n".join(lines)
    assert os.environ.get("TBT_READS") is None           # not under the runner: an interactive session
    if kernel is None:
        _client(nb).execute()
        return nb
    reset = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%reset -f")])
    for book in (reset, nb):                             # nbclient stores each executed cell in client.nb
        kernel.nb = book
        for index, c in enumerate(book.cells):
            kernel.execute_cell(c, index)
    return nb


@pytest.fixture(scope="module")
def shared_kernel():
    """One kernel for stepping through every notebook in turn: each starts from a cleared namespace
    (``%reset -f``: no variable and no import of the notebook before survives), as it would in a
    kernel of its own, without starting and importing eight kernels."""
    client = _client(nbformat.v4.new_notebook())
    with client.setup_kernel():
        yield client


def _printed(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


@pytest.fixture(scope="module")
def made(smoke):
    """`make all PROFILE=smoke`: every stage has run; its summaries and cache stamps as written."""
    run.run_profile(PROFILE)
    stages = list(params.load_profile(PROFILE).stages)
    return {s: {"summary": outputs.read_summary(PROFILE, s),
                "stamp": json.loads((paths.stage_dir(PROFILE, s) / paths.STAGE_STAMP).read_text())}
            for s in stages}


@pytest.mark.slow
@pytest.mark.parametrize("stage", NOTEBOOKS)
def test_every_notebook_steps_through_and_agrees_with_make_all(made, stage, shared_kernel):
    nb = step_through(stage, kernel=shared_kernel)
    assert "changed by hand" not in _printed(nb)
    assert outputs.read_summary(PROFILE, stage) == made[stage]["summary"]
    assert (paths.stage_dir(PROFILE, stage) / paths.STAGE_STAMP).exists()     # still cached: nothing changed


@pytest.mark.slow
def test_make_all_after_stepping_through_finds_everything_cached(made):
    log = run.run_profile(PROFILE)
    assert {s: r["status"] for s, r in log.items()} == {s: "cached" for s in made}


@pytest.mark.slow
def test_stepping_through_with_a_changed_parameter_then_make_all(made, capsys):
    """04 with min_models changed by hand writes its outputs, says it cleared the cache, and the
    next `make all` redoes 04 with the params file's value: outputs match the params again."""
    nb = step_through("04_rank_agreement", edit={"min_models": "min_models = 60"})
    said = _printed(nb)
    assert "changed by hand: min_models=60" in said and "the next `make all` re-runs this stage" in said
    assert outputs.read_summary(PROFILE, "04_rank_agreement")["min_models"] == 60
    log = run.run_profile(PROFILE)
    assert log["04_rank_agreement"]["status"] == "ran"
    assert [s for s, r in log.items() if r["status"] == "ran"] == ["04_rank_agreement"]
    expected = params.load_profile(PROFILE).params("04_rank_agreement")["min_models"]
    assert outputs.read_summary(PROFILE, "04_rank_agreement") == made["04_rank_agreement"]["summary"]
    assert made["04_rank_agreement"]["summary"]["min_models"] == expected


# --------------------------------------------------------------------------- prerequisites name a command
@pytest.fixture
def empty_outputs(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    monkeypatch.delenv("TBT_READS", raising=False)
    return tmp_path / "outputs"


@pytest.mark.parametrize("profile", ["mini", "smoke", "published", "paper"])
def test_a_notebook_whose_prerequisites_are_missing_names_the_command(empty_outputs, profile):
    prof = params.load_profile(profile)
    stages = list(prof.stages)
    for i, stage in enumerate(stages):
        if not prof.prepare and i == 0:
            notebook.check_prerequisites(prof, stage)          # the paper profile's first stage needs nothing
            continue
        with pytest.raises(params.PrerequisiteError) as info:
            notebook.check_prerequisites(prof, stage)
        message = str(info.value)
        cmd = f"make run PROFILE={profile} STAGES=" + (" ".join(s[:2] for s in stages[:i]) if i else stage[:2])
        assert f"`{cmd}`" in message.replace("'", "") or f"`{cmd}`" in message.replace('"', ""), message
    for ran in ("mini", "retired"):                          # "retired": outputs of a profile no longer in params/
        (empty_outputs / ran).mkdir(parents=True)
        (empty_outputs / ran / "run_log.json").write_text("{}")
    if profile != "mini" and "04_rank_agreement" in stages:  # another profile has run: say so
        with pytest.raises(params.PrerequisiteError, match="or set profile = 'mini' in the parameters cell"):
            notebook.check_prerequisites(prof, "04_rank_agreement")


def test_prerequisites_are_met_once_the_earlier_stages_and_prepare_ran(empty_outputs):
    from lib import util

    prof = params.load_profile("smoke")
    with pytest.raises(params.PrerequisiteError, match=r"00_world: profile 'smoke' has not run: run `make run "
                                                       r"PROFILE=smoke STAGES=00` \(or `make all PROFILE=smoke`\)"):
        notebook.check_prerequisites(prof, "00_world")
    util.atomic_write_json(empty_outputs / "smoke" / "run_log.json", {})       # a run with another params file
    with pytest.raises(params.PrerequisiteError, match=r"has not been prepared with params/smoke.yaml as it is now"):
        notebook.check_prerequisites(prof, "00_world")
    util.mark(empty_outputs / "smoke" / params.PREPARED_STAMP, prof.prepare)
    notebook.check_prerequisites(prof, "00_world")
    with pytest.raises(params.PrerequisiteError, match=r"stages 00_world of profile 'smoke' have not run: run "
                                                       r"`make run PROFILE=smoke STAGES=00`"):
        notebook.check_prerequisites(prof, "01_select_benchmarks")
    util.atomic_write_json(empty_outputs / "smoke" / "00_world" / "summary.json", {})
    notebook.check_prerequisites(prof, "01_select_benchmarks")


@pytest.mark.slow
def test_a_notebook_stepped_through_before_its_profile_ran_stops_at_once_naming_the_command(empty_outputs,
                                                                                            monkeypatch):
    monkeypatch.setenv("TBT_OUTPUTS", str(empty_outputs))      # the kernel is a subprocess: it sees the env
    with pytest.raises(nbclient.exceptions.CellExecutionError) as info:
        step_through("04_rank_agreement", profile="smoke")
    assert "PrerequisiteError" in str(info.value)
    assert "`make run PROFILE=smoke STAGES='00 01 02 03'`" in str(info.value)


def test_errors_deeper_down_name_the_command_that_fixes_them(tmp_path, monkeypatch):
    """The messages of missing or broken inputs raised inside lib, each with its command."""
    from lib import util
    from lib.benchalign import data as bdata
    from lib.miniworld import overview
    from lib.pipeline import tasks

    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    messages = []
    for call in (lambda: outputs.read_summary("mini", "01_select_benchmarks"),
                 lambda: overview.benchmark_table("mini"),
                 lambda: overview.zoo_table("mini"),
                 lambda: tasks.check_task_yaml([paths.work_dir("mini") / "world" / "tasks"]),
                 lambda: store.load(paths.store_dir("published")),
                 lambda: bdata.load_pipeline(paths.store_dir("smoke"), paths.work_dir("smoke")),
                 ):
        with pytest.raises(Exception) as info:
            call()
        messages.append(str(info.value))
    broken = store.write(paths.store_dir("smoke"), store.Result(
        protocol=store.DIRECT, benchmark="mw_facts", model="m", metric="acc", score=0.5))
    broken.write_text("{")
    with pytest.raises(store.StoreError) as info:
        store.load(paths.store_dir("smoke"))
    messages.append(str(info.value))
    util.atomic_write_text(paths.stage_dir("smoke", "01_select_benchmarks") / "summary.json", "{")
    with pytest.raises(util.CorruptFile) as info:
        outputs.read_summary("smoke", "01_select_benchmarks")
    messages.append(str(info.value))
    monkeypatch.delenv(paths.DATA_ENV, raising=False)
    monkeypatch.setattr(paths, "DATA_DOWNLOADS", tmp_path / "data")
    with pytest.raises(paths.DataMissing) as info:
        paths.data_dir("lm-harmony/all_results.json")
    messages.append(str(info.value))
    expected = ["make run PROFILE=mini STAGES=01", "make run PROFILE=mini STAGES=00", "make run PROFILE=mini STAGES=00",
                "make run PROFILE=mini STAGES=01", "make all PROFILE=published", "make run PROFILE=smoke STAGES=03",
                "make all PROFILE=smoke", "make run PROFILE=smoke STAGES=01", "make data"]
    for message, cmd in zip(messages, expected):
        assert f"`{cmd}`" in message, message
    assert "`export HARMONY_DATA=" in messages[-1] and "%env HARMONY_DATA=" in messages[-1]


def test_a_notebook_left_at_the_default_profile_shows_the_profile_that_ran(empty_outputs, capsys):
    """After `make all PROFILE=smoke` only, notebook 04 unchanged (profile "mini") shows smoke and says so;
    a profile set by hand is never swapped."""
    from lib import util

    prof = params.load_profile("smoke")
    util.mark(empty_outputs / "smoke" / params.PREPARED_STAMP, prof.prepare)
    for stage in list(prof.stages)[:4]:
        util.atomic_write_json(empty_outputs / "smoke" / stage / "summary.json", {})
    util.atomic_write_json(empty_outputs / "smoke" / "run_log.json", {})
    defaults = params.notebook_parameters("04_rank_agreement")
    ns = dict(defaults)
    ctx = notebook.stage("04_rank_agreement", ns)
    assert ctx.profile == ns["profile"] == "smoke" and ctx.out == empty_outputs / "smoke" / "04_rank_agreement"
    said = capsys.readouterr().out
    assert "04_rank_agreement: profile 'mini' has not run; showing profile 'smoke', the last one that ran" in said
    with pytest.raises(params.PrerequisiteError, match="profile 'published' has not run"):
        notebook.stage("04_rank_agreement", {**defaults, "profile": "published"})
