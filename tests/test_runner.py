"""The papermill runner: parameters injected, stages cached by fingerprint, failures leave no result."""

from __future__ import annotations

import json

import nbformat
import pytest

from lib import notebook, params, paths
from runner import failures, kernel, run, stagecache


def _notebook(path, body: str, default: int = 1):
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell(f'profile = "x"\nn = {default}\n')
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# demo"), p, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


BODY = """
import json, os
from lib import notebook, outputs, params
ctx = notebook.stage("01_demo", globals())
outputs.write_summary(ctx.out, {"n_squared": n * n})
with open(os.path.join(ctx.out, "calls.txt"), "a") as fh:
    fh.write("x")
"""
READER = """
import os
from lib import notebook, outputs, params
ctx = notebook.stage("02_reader", globals())
first = outputs.read_summary(ctx.profile, "01_demo")
outputs.write_summary(ctx.out, {"twice": 2 * first["n_squared"]})
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
    before = {s: stagecache.stage_key(s, prof.params(s), root) for s in prof.stages}
    rank = root / "lib" / "benchalign" / "rank.py"
    rank.write_text(rank.read_text() + "\n# an edit\n")
    after = {s: stagecache.stage_key(s, prof.params(s), root) for s in prof.stages}
    assert [s for s in prof.stages if before[s] != after[s]] == ["07_benchalign"]
    assert "lib/benchalign/rank.py" in after["07_benchalign"]["lib"]
    assert not any(f.startswith("lib/benchalign") for f in after["04_rank_agreement"]["lib"])
    assert "lib/analysis/agreement.py" in after["04_rank_agreement"]["lib"]


# --------------------------------------------------------------------------- a quiet, informative console
SLOW_REPLY = """
import time
kernel = get_ipython().kernel
reply = kernel.shell_handlers["kernel_info_request"]

async def slow_reply(*args):      # papermill asks for kernel_info right before it shuts the kernel down
    await reply(*args)
    time.sleep(2.0)               # ... and the kernel is still busy with it when the shutdown begins

kernel.shell_handlers["kernel_info_request"] = slow_reply
"""


@pytest.mark.slow
def test_the_runner_kernel_is_quiet(tmp_path, capfd):
    """jupyter_client's graceful shutdown SIGINTs a kernel still finishing its last reply, and ipykernel
    logs `ERROR | KeyboardInterrupt caught in kernel` (the stray line of stage 01); plain-TCP kernels warn
    about encryption. The runner's kernel manager does neither; papermill's default shows both."""
    import papermill as pm

    nb = tmp_path / "slow.ipynb"
    _notebook(nb, SLOW_REPLY)
    pm.execute_notebook(str(nb), str(tmp_path / "default.ipynb"), kernel_name="python3", progress_bar=False)
    before = capfd.readouterr().err
    assert "KeyboardInterrupt caught in kernel" in before and "without encryption" in before
    pm.execute_notebook(str(nb), str(tmp_path / "ours.ipynb"), kernel_name=params.KERNEL, progress_bar=False,
                        kernel_manager_class=kernel.kernel_manager_class())
    after = capfd.readouterr().err
    assert "KeyboardInterrupt" not in after and "WARNING" not in after and "ERROR" not in after, after


def test_heartbeat_prints_cells_and_elapsed_only_when_the_console_is_quiet(tmp_path):
    import io
    import time

    out = io.StringIO()
    with kernel.Heartbeat("[x] 02_demo", cells=5, every=0.2, stream=out) as beat:
        beat.on_cell_start(cell_index=1)
        time.sleep(0.75)
    lines = out.getvalue().splitlines()
    assert 2 <= len(lines) <= 4, lines
    assert all(line.startswith("[x] 02_demo: cell 2 of 5, ") and line.endswith("s elapsed") for line in lines)
    touch, quiet = tmp_path / ".heartbeat", io.StringIO()
    with kernel.Heartbeat("[x] 02_demo", cells=5, every=0.3, stream=quiet, touch=touch):
        for _ in range(10):               # Progress lines of the kernel touch the file: no heartbeat needed
            touch.touch()
            time.sleep(0.08)
    assert quiet.getvalue() == ""


def test_progress_lines_touch_the_heartbeat_file(tmp_path, monkeypatch):
    import io

    from lib.progress import HEARTBEAT_ENV, Progress

    touch = tmp_path / ".heartbeat"
    monkeypatch.setenv(HEARTBEAT_ENV, str(touch))
    with Progress(total=1, label="units", stream=io.StringIO()) as progress:
        progress.advance()
    assert touch.exists()


# --------------------------------------------------------------------------- one run per profile
SLEEPER = """
import time
from lib import notebook, outputs, params
ctx = notebook.stage("01_demo", globals())
time.sleep(n)
outputs.write_summary(ctx.out, {"slept": n})
"""


def _runner(project, *args):
    import os
    import subprocess
    import sys

    env = {**os.environ, "TBT_PARAMS": str(project / "params"), "TBT_NOTEBOOKS": str(project / "notebooks"),
           "TBT_OUTPUTS": str(project / "outputs")}
    return subprocess.Popen([sys.executable, "-m", "runner.run", "x", *args], cwd=paths.ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_lock(project, pid: int, timeout: float = 120.0):
    import time

    lock = project / "outputs" / "x" / params.LOCK_FILE
    deadline = time.time() + timeout
    while time.time() < deadline:
        if lock.exists() and f'"pid": {pid}' in lock.read_text() and notebook.running("x"):
            return
        time.sleep(0.2)
    raise AssertionError("the first run never took the lock")


@pytest.mark.slow
def test_a_second_run_of_a_profile_is_refused_or_waits_and_a_killed_run_leaves_no_lock(project, monkeypatch,
                                                                                       capsys):
    import signal
    import time

    monkeypatch.setenv("TBT_PARAMS", str(project / "params"))
    monkeypatch.setenv("TBT_NOTEBOOKS", str(project / "notebooks"))
    _notebook(project / "notebooks" / "01_demo.ipynb", SLEEPER)
    (project / "params" / "x.yaml").write_text("description: demo\nstages:\n  01_demo: {n: 3}\n")
    summary = project / "outputs" / "x" / "01_demo" / "summary.json"

    first = _runner(project)
    _wait_for_lock(project, first.pid)
    with pytest.raises(run.RunLocked, match=rf"profile 'x' is being run by another process \(pid {first.pid}, "
                                            r"`.*runner.run x`, started 20\d\d-"):
        run.run_profile("x")
    assert run.main(["x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"pid {first.pid}" in err[0] and "WAIT=1" in err[0]
    output, _ = first.communicate(timeout=300)
    assert first.returncode == 0, output
    assert json.loads(summary.read_text()) == {"slept": 3}           # the first run finished, complete

    second = _runner(project, "--force")
    _wait_for_lock(project, second.pid)
    t0 = time.time()
    log = run.run_profile("x", wait=True)                            # queues behind it, then finds it cached
    assert log["01_demo"]["status"] == "cached" and second.wait(timeout=300) == 0
    assert time.time() - t0 > 1.0 and "waiting for the run that holds" in capsys.readouterr().out

    (project / "params" / "x.yaml").write_text("description: demo\nstages:\n  01_demo: {n: 60}\n")
    killed = _runner(project)
    _wait_for_lock(project, killed.pid)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    (project / "params" / "x.yaml").write_text("description: demo\nstages:\n  01_demo: {n: 1}\n")
    assert notebook.running("x") is None
    assert run.run_profile("x")["01_demo"]["status"] == "ran"     # the killed run's lock is gone
    assert json.loads(summary.read_text()) == {"slept": 1}


# --------------------------------------------------------------------------- interactive runs and make all
@pytest.mark.slow
def test_an_interactive_run_with_changed_parameters_is_redone_by_the_next_run(project, monkeypatch, capsys):
    """Stepped through with a value changed by hand, a notebook writes to the stage's folder and
    clears its cache stamp (one line says so); the next run redoes the stage with the params file's
    value, so outputs and params agree again."""
    import nbclient

    monkeypatch.setenv("TBT_PARAMS", str(project / "params"))
    monkeypatch.setenv("TBT_NOTEBOOKS", str(project / "notebooks"))
    out = project / "outputs" / "x" / "01_demo"
    assert run.run_profile("x")["01_demo"]["status"] == "ran"
    nb = nbformat.read(project / "notebooks" / "01_demo.ipynb", as_version=4)
    nb.cells[1].source = nb.cells[1].source.replace("n = 1", "n = 5")          # changed by hand in JupyterLab
    nbclient.NotebookClient(nb, kernel_manager_class=kernel.kernel_manager_class(), kernel_name=params.KERNEL,
                            resources={"metadata": {"path": str(project / "notebooks")}}).execute()
    said = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert "changed by hand: n=5" in said and "clearing its cache" in said and "re-runs this stage" in said
    assert json.loads((out / "summary.json").read_text()) == {"n_squared": 25}
    assert not (out / paths.STAGE_STAMP).exists()
    assert run.run_profile("x")["01_demo"]["status"] == "ran"
    assert json.loads((out / "summary.json").read_text()) == {"n_squared": 49}   # params/x.yaml: n = 7
    assert run.run_profile("x")["01_demo"]["status"] == "cached"


# --------------------------------------------------------------------------- the published data
def test_make_all_downloads_missing_published_data_or_says_how_to_provide_it(tmp_path, monkeypatch, capsys,
                                                                           harmony_data):
    """`make all` (published, the paper's results, first; then mini) with no data: downloaded from the
    pinned sources (here a file:// mirror), sha256-checked, into data/published, where the notebooks find
    it without HARMONY_DATA; offline, one line says how to provide it and mini runs all the same."""
    from lib import data

    mirror = tmp_path / "mirror"
    for r in data.FILES:
        target = mirror / r.repo / r.commit / r.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((harmony_data / r.dest).read_bytes())
    monkeypatch.delenv(paths.DATA_ENV)
    monkeypatch.setattr(paths, "DATA_DOWNLOADS", tmp_path / "data" / "published")
    monkeypatch.setattr(data, "ITEM_FILES", {})                   # the item files are large: skipped here
    monkeypatch.setattr(data, "WHEELS", [])                       # and the wheels come from another host
    monkeypatch.setattr(data, "URL_TEMPLATE", "http://127.0.0.1:9/{repo}/{commit}/{path}")   # nothing listens
    assert run.main(["published"]) == 2                           # `make all PROFILE=published`: stops at once
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "cannot be reached" in err and f"export {paths.DATA_ENV}=" in err
    real = run.load_profile
    monkeypatch.setattr(run, "load_profile", lambda name: params.Profile("x", tmp_path / "x.yaml", "", {})
                        if name == "x" else real(name))
    monkeypatch.setattr(run, "run_profile", lambda name, *a, **k: print(f"ran {name}"))
    monkeypatch.setattr(run, "print_plan", lambda profiles, force=False: print(f"[plan] {' then '.join(profiles)}"))
    assert run.main(["x", "--with-published"]) == 0               # `make all`: one line for published, then x
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == "[plan] published then x" and len(out) == 3
    assert out[1].startswith("[published] skipped: published data not found") and out[2] == "ran x"
    monkeypatch.setattr(data, "URL_TEMPLATE", f"file://{mirror}/{{repo}}/{{commit}}/{{path}}")
    assert run.main(["x", "--with-published"]) == 0               # now downloaded: published runs, then x
    assert [line for line in capsys.readouterr().out.strip().splitlines() if line.startswith("ran ")] == \
        ["ran published", "ran x"]
    assert paths.data_dir(data.REQUIRED) == tmp_path / "data" / "published"
    assert (tmp_path / "data" / "published" / data.REQUIRED).read_bytes() == (harmony_data / data.REQUIRED).read_bytes()
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "elsewhere"))
    assert "does not contain" in run.ensure_published_data()     # an explicit HARMONY_DATA is never overridden


def test_a_kernels_user_error_is_told_by_its_type_not_by_a_list_of_names():
    """The console line of a failed cell: a lib.errors.UserError raised in the kernel (known there by
    its name only) reads as its class says, with its hint; any other exception is a failed cell."""
    from papermill.exceptions import PapermillExecutionError

    from lib.errors import UserError, user_errors
    from lib.pipeline.launch.slurm import JobsSubmitted

    def cell(ename, evalue):
        return PapermillExecutionError(3, 1, "x", ename, evalue, [])

    where = failures.Where("paper", "02_finetune", 2, 8)
    line = failures.failure_line(cell("PreflightError", "2 unit(s) cannot finish\nrefused: m / b"), where)
    assert line == ("[paper] 02_finetune: PreflightError: 2 unit(s) cannot finish (`make preflight "
                    "PROFILE=<profile>` lists each unit's estimate and what to change)")
    assert failures.failure_line(cell("JobError", "1 unit(s) failed\nDetails"), where) == \
        "[paper] 02_finetune: 1 unit(s) failed"                 # the units were listed above
    assert "a cell failed (KeyError: 'x')" in failures.failure_line(cell("KeyError", "'x'"), where)
    assert failures.failure_line(cell("KeyboardInterrupt", ""), where).startswith("interrupted in 02_finetune")
    assert failures.raised(cell("JobsSubmitted", "3 job(s) submitted")) == (JobsSubmitted, "3 job(s) submitted")
    assert failures.kernel_class("NoSuchError") is None
    names = [c.__name__ for c in UserError.__subclasses__()]
    assert len(names) == len(set(names)) and set(names) <= set(user_errors())
    assert {"PreflightError", "HubError", "ModelError", "ZooError", "ItemDataError"} <= set(user_errors())
