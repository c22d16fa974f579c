"""Issue 40: after a crash, a full disk or a hard kill, no false "running elsewhere", no orphaned
workers, one line instead of a list, and resources checked before any work."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from notebook_project import READER, notebook

from lib.pipeline.launch import locks
from lib.pipeline.launch.locks import UnitBusy, UnitLock
from lib.pipeline.launch.outcome import JobError, JobOutcome, summarise
from lib.pipeline.spec import JobSpec

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- 1. locks a crash cannot leave
@contextlib.contextmanager
def small_disk(tmp_path: Path):
    """A 1 MiB tmpfs when this machine lets us mount one (root on Linux), else None."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        yield None
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_leaves_no_lock_and_the_rerun_takes_it_at_once(tmp_path, monkeypatch, capsys):
    with small_disk(tmp_path) as disk:
        if disk is not None:                               # a real full disk
            lock_path = disk / "locks" / "tbt" / "m" / "b.lock"
            lock_path.parent.mkdir(parents=True)
            filler = _fill(disk)
            with pytest.raises(OSError) as info:
                UnitLock(lock_path).acquire()
            filler.unlink()
        else:                                              # simulated: the record's write raises ENOSPC
            lock_path = tmp_path / "locks" / "tbt" / "m" / "b.lock"
            real_open = open

            def full(path, mode="r", *a, **k):
                fh = real_open(path, mode, *a, **k)
                if "x" in mode:
                    fh.close()
                    raise OSError(errno.ENOSPC, "No space left on device", str(path))
                return fh

            monkeypatch.setattr(locks, "open", full, raising=False)
            with pytest.raises(OSError) as info:
                UnitLock(lock_path).acquire()
            monkeypatch.undo()
        assert info.value.errno == errno.ENOSPC
        assert not lock_path.exists() and list(lock_path.parent.iterdir()) == []   # no lock, no record file
        start = time.monotonic()
        with UnitLock(lock_path) as lock:                    # the rerun at once: no RUNNING ELSEWHERE
            assert lock.holder()["pid"] == os.getpid()
        assert time.monotonic() - start < 2


def test_an_empty_or_unreadable_lock_is_taken_over_after_seconds_with_a_line(tmp_path, capsys):
    """A lock left empty (by an older version on a full disk, or a damaged file) blocks for a few
    seconds, not ten minutes; the take-over says so."""
    path = tmp_path / "b.lock"
    for content in ("", "{not json"):
        path.write_text(content)
        with pytest.raises(UnitBusy):                        # a few seconds old: maybe being written
            UnitLock(path).acquire()
        old = time.time() - 10
        os.utime(path, (old, old))
        with UnitLock(path):
            pass
        out = capsys.readouterr().out
        assert f"lock {path}: taken over, its record is empty or unreadable" in out and "?" not in out, out
        assert not path.exists()


def test_a_lock_whose_owner_is_gone_is_taken_over_at_once(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / "b.lock"
    path.write_text(f'{{"host": "{locks.socket.gethostname()}", "pid": {dead.pid}, "since": "then"}}')
    with UnitLock(path):
        pass
    assert f"its owner, process {dead.pid} on this host, is gone" in capsys.readouterr().out
    live = UnitLock(path).acquire()
    try:
        with pytest.raises(UnitBusy, match=f"held by process {os.getpid()}"):
            UnitLock(path).acquire()
    finally:
        live.release()


# --------------------------------------------------------------------------- 2. workers die with their parent
POOL_OWNER = """
import os, sys, time
from pathlib import Path
from lib.pipeline.launch import jobs
pool = jobs.worker_pool(2, Path(sys.argv[1]))
futures = [pool.submit(time.sleep, 120) for _ in range(2)]
while len(pool._processes) < 2 or not all(p.pid for p in pool._processes.values()):
    time.sleep(0.1)
time.sleep(2)                                    # the initialisers have run
print(" ".join(str(pid) for pid in pool._processes), flush=True)
time.sleep(120)
"""


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_hard_kill_of_the_pool_owner_leaves_no_worker_and_no_resource_tracker(tmp_path):
    owner = subprocess.Popen([sys.executable, "-c", POOL_OWNER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        workers = [int(p) for p in owner.stdout.readline().split()]
        assert len(workers) == 2
        children = _children(owner.pid)              # the workers and multiprocessing's resource tracker
        assert set(workers) <= set(children) and len(children) >= 3, children
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p) for p in children):
            time.sleep(0.1)
        assert not [p for p in children if _alive(p)], "processes of the pool outlived their parent"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(owner.pid, signal.SIGKILL)


# --------------------------------------------------------------------------- 3. one line for an interruption
def _spec(tmp_path: Path, model: str) -> JobSpec:
    return JobSpec(protocol="direct_eval", model=model, source="x", benchmarks=["b1", "b2"], include_paths=[],
                   include_defaults=False, store_root=str(tmp_path / "store"), work_root=str(tmp_path / "work"))


STOPPED = ("job ? died: BrokenProcessPool: A process in the process pool was terminated abruptly while the future "
           "was running or pending.")


def test_an_interruption_or_a_full_disk_is_one_line_and_own_failures_keep_their_retry(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("TBT_MAKE_GOAL", "make all PROFILE=smoke")
    specs = [_spec(tmp_path, m) for m in ("m1", "m2")]
    stopped = [JobOutcome.of(s, failed={"b1": STOPPED, "b2": STOPPED}) for s in specs]
    with pytest.raises(JobError) as info:
        summarise(stopped, specs)
    assert "FAILED" not in capfd.readouterr().err
    assert str(info.value) == ("interrupted: 4 unit(s) stopped with their worker processes (Ctrl-C, a kill, or the "
                               "out-of-memory killer); `make all PROFILE=smoke` resumes them (finished units are kept)")

    full = "OSError: [Errno 28] No space left on device: '/o/smoke/work/x/adapter.safetensors'"
    with pytest.raises(JobError) as info:
        summarise([JobOutcome.of(s, failed={"b1": full}) for s in specs], specs)
    assert "FAILED" not in capfd.readouterr().err
    assert str(info.value).startswith("disk full: 2 unit(s) could not be written ([Errno 28] No space left on device: "
                                      "'/o/smoke/work/x/adapter.safetensors'); free space, then run `make all "
                                      "PROFILE=smoke` again")

    torch_full = "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 234752 vs 234644"
    with pytest.raises(JobError) as info:                      # torch's writer on a full disk names no errno
        summarise([JobOutcome.of(specs[0], failed={"b1": torch_full})], specs)
    assert "FAILED" not in capfd.readouterr().err
    assert str(info.value).startswith(f"disk full: 1 unit(s) could not be written ([Errno 28] No space left on "
                                      f"device: '{tmp_path / 'work'}'); free space")

    own = JobOutcome.of(specs[0], failed={"b1": "ValueError: bad task"})
    with pytest.raises(JobError) as info:
        summarise([own, stopped[1]], specs)
    err = capfd.readouterr().err
    assert err.count("FAILED") == 1 and "FAILED direct_eval m1 / b1: ValueError: bad task" in err
    assert "retry:" in err and "m2" not in err
    assert str(info.value).startswith("interrupted: 2 unit(s) stopped")


# --------------------------------------------------------------------------- 4. no path of this machine recorded
RESOLVED_READER = """
from pathlib import Path
from lib import notebook, outputs, params, util
ctx = notebook.stage("02_reader", globals())
tasks = (ctx.out.parent / "01_demo").resolve()        # as lib.pipeline.tasks resolves its include paths
util.note_read(tasks)
outputs.write_summary(ctx.out, {"twice": 2 * outputs.read_summary(ctx.profile, "01_demo")["n_squared"]})
"""


def test_a_resolved_path_under_a_linked_profile_is_recorded_relative_to_it(tmp_path, monkeypatch):
    from lib import paths

    out, disk = tmp_path / "outputs", tmp_path / "disk"
    (disk / "smoke" / "work" / "world" / "tasks").mkdir(parents=True)
    out.mkdir()
    (out / "smoke").symlink_to(disk / "smoke")
    monkeypatch.setattr(paths, "OUTPUTS", out)
    resolved = (out / "smoke" / "work" / "world" / "tasks").resolve()
    assert str(resolved).startswith(str(disk.resolve()))
    assert paths.portable(resolved) == "outputs:smoke/work/world/tasks"


@pytest.mark.slow
def test_a_linked_profile_moved_back_reruns_nothing(project):
    """A stage run while outputs/<profile> is a link to another disk, that resolved a path through
    it, is cached once the folder is moved back (issue 40: 02 and 03 re-ran)."""
    from runner import run

    tmp_path, out = project, project / "outputs"
    notebook(project / "notebooks" / "02_reader.ipynb", RESOLVED_READER)
    (project / "params" / "x.yaml").write_text("description: demo\nstages:\n  01_demo: {n: 7}\n  02_reader:\n")
    out.mkdir()
    (tmp_path / "disk" / "x").mkdir(parents=True)
    (out / "x").symlink_to(tmp_path / "disk" / "x")                 # the documented full-disk recovery
    assert [s["status"] for s in run.run_profile("x").values()] == ["ran", "ran"]
    recorded = "\n".join(p.read_text() for p in (tmp_path / "disk").rglob("*.json"))
    assert str(tmp_path) not in recorded                            # no path of this machine
    (out / "x").unlink()
    shutil.move(tmp_path / "disk" / "x", out / "x")                 # moved back
    assert [s["status"] for s in run.run_profile("x").values()] == ["cached", "cached"]


# --------------------------------------------------------------------------- 5. resources checked before any work
@pytest.fixture
def params_dir(tmp_path, monkeypatch):
    from lib import paths

    monkeypatch.setattr(paths, "PARAMS", tmp_path)
    return tmp_path


@pytest.mark.parametrize("resources, line", [
    ('{mem_gb: "four"}', "stages.02_finetune.resources.mem_gb: expected a positive number of GB, got 'four'"),
    ("{timeout_min: 0}", "stages.02_finetune.resources.timeout_min: expected a positive whole number of minutes, "
                         "got 0"),
    ("{cpus_per_task: 2.5}", "stages.02_finetune.resources.cpus_per_task: expected a positive whole number of CPUs"),
    ("{mem_gbs: 4}", "stages.02_finetune.resources.mem_gbs: not a submitit parameter (did you mean 'mem_gb'?)"),
])
def test_resources_are_validated_with_the_params_in_one_line(params_dir, resources, line):
    from lib import params

    (params_dir / "x.yaml").write_text(f"description: demo\nstages:\n  02_finetune: {{executor: processes, "
                                       f"resources: {resources}}}\n")
    with pytest.raises(params.ParamsError) as info:
        params.load_profile("x")
    assert str(info.value).startswith(f"{params_dir / 'x.yaml'}: {line}"), str(info.value)
    assert "\n" not in str(info.value)


def test_the_runner_refuses_bad_resources_before_any_work(params_dir, tmp_path, monkeypatch, capsys):
    from lib import paths
    from runner import run

    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    (params_dir / "x.yaml").write_text('description: demo\nstages:\n  00_world: {}\n'
                                       '  02_finetune: {resources: {mem_gb: "four"}}\n')
    assert run.main(["x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {params_dir / 'x.yaml'}: stages.02_finetune.resources.mem_gb: expected a positive number "
                   "of GB, got 'four'"]
    assert not (tmp_path / "outputs").exists()                   # nothing ran


NODES = {
    ("scontrol", "show", "config"): "MaxArraySize            = 1001\n",
    ("scontrol", "show", "partition", "--oneliner"):
        "PartitionName=normal Default=YES MaxTime=UNLIMITED Nodes=tbt-node\n"
        "PartitionName=gpu Default=NO MaxTime=2-00:00:00 Nodes=g[1-2]\n",
    ("scontrol", "show", "node", "--oneliner"):
        "NodeName=tbt-node CPUTot=2 RealMemory=23000 Gres=(null) Partitions=normal\n"
        "NodeName=g1 CPUTot=32 RealMemory=256000 Gres=gpu:a100:4(S:0-1) Partitions=gpu\n"
        "NodeName=g2 CPUTot=32 RealMemory=128000 Gres=gpu:a100:4 Partitions=gpu\n",
}


@pytest.mark.parametrize("resources, key, says", [
    ("{slurm_partition: normal, mem_gb: 100}", "mem_gb",
     "100 GB of memory asked, but the largest node of partition normal has 22.46"),
    ("{cpus_per_task: 8}", "cpus_per_task", "8 CPUs asked, but the largest node of partition normal has 2"),
    ("{slurm_partition: gpu, gpus_per_node: 8}", "gpus_per_node", "8 GPUs asked, but the largest node of partition "
                                                                   "gpu has 4"),
])
def test_resources_no_node_of_the_partition_meets_are_refused_before_any_work(params_dir, monkeypatch, capsys,
                                                                             resources, key, says):
    from lib import params
    from lib.pipeline.launch import slurm

    monkeypatch.setattr(slurm, "_run", lambda cmd, timeout=30.0: NODES[tuple(cmd)])
    monkeypatch.setattr(slurm.shutil, "which", lambda name: f"/usr/bin/{name}")
    (params_dir / "x.yaml").write_text(f"description: demo\ncommon: {{executor: slurm, resources: {resources}}}\n"
                                       "stages:\n  02_finetune:\n")
    with pytest.raises(params.ParamsError) as info:
        slurm.check_profile(params.load_profile("x"))
    assert str(info.value).startswith(f"{params_dir / 'x.yaml'}: common.resources.{key}: {says}"), str(info.value)
    with pytest.raises(ValueError, match=f"resources.{key}: "):        # and in 02's preflight
        slurm.scheduler_resources(params.load_profile("x", validate=False).params("02_finetune")["resources"])
    from lib import paths
    from runner import run

    monkeypatch.setattr(paths, "OUTPUTS", params_dir / "outputs")
    assert run.main(["x"]) == 2                                      # the runner: one line, before any work
    assert not (params_dir / "outputs").exists()
    assert capsys.readouterr().err.strip() == f"error: {info.value}"
    fits = "{slurm_partition: gpu, gpus_per_node: 4, mem_gb: 200, cpus_per_task: 32}"
    (params_dir / "x.yaml").write_text(f"description: demo\ncommon: {{executor: slurm, resources: {fits}}}\n"
                                       "stages:\n  02_finetune:\n")
    slurm.check_profile(params.load_profile("x"))


@pytest.mark.parametrize("text, line", [
    ("description: x\nstages:\n\t02_finetune:\n",
     "x.yaml:3: not valid YAML: found character '\\t' that cannot start any token (a tab: YAML indents with spaces)"),
    ("description: x\nstages:\n  02_finetune:\n  02_finetune: {models: [a]}\n",
     "x.yaml:4: not valid YAML: key '02_finetune' given twice (lines 3 and 4; the last would silently win)"),
])
def test_a_params_yaml_with_a_tab_or_a_key_twice_is_one_line_naming_the_line(params_dir, monkeypatch, capsys,
                                                                               text, line):
    from lib import paths
    from runner import run

    monkeypatch.setattr(paths, "OUTPUTS", params_dir / "outputs")
    (params_dir / "x.yaml").write_text(text)
    assert run.main(["x"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {params_dir / line}"


def test_executor_slurm_without_slurm_is_one_line_before_any_work(params_dir, monkeypatch, capsys):
    from lib import paths
    from lib.pipeline.launch import slurm
    from runner import run

    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    monkeypatch.setattr(paths, "OUTPUTS", params_dir / "outputs")
    (params_dir / "x.yaml").write_text("description: demo\nstages:\n  02_finetune: {executor: slurm}\n")
    assert run.main(["x"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {params_dir / 'x.yaml'}: stages.02_finetune.executor: slurm, but this machine has no Slurm (no "
        "sbatch on PATH): `make slurm-up` starts a one-machine cluster here, or set executor: processes")
    assert not (params_dir / "outputs").exists()                      # nothing ran


def test_a_model_name_with_a_typo_is_named_with_its_key_after_prepare_before_any_stage(params_dir, monkeypatch):
    from lib import params, paths, store
    from runner.fetch import check_store_models

    monkeypatch.setattr(paths, "OUTPUTS", params_dir / "outputs")
    (params_dir / "x.yaml").write_text("description: demo\nstages:\n  02_finetune: {models: [mw-llama-s, "
                                       "mw-llama-s-typo]}\n")
    store.write_meta(paths.store_dir("x"), "models", {m: {"family": "llama", "path": f"../work/models/{m}"}
                                                      for m in ("mw-llama-s", "mw-llama-m")})
    prof = params.load_profile("x")
    with pytest.raises(params.ParamsError) as info:
        check_store_models(prof, ["02_finetune"])
    assert str(info.value).startswith(f"{params_dir / 'x.yaml'}: stages.02_finetune.models[1]: no model "
                                      "'mw-llama-s-typo' in this profile's store (did you mean 'mw-llama-s'"), \
        info.value
    assert str(info.value).endswith("(its prepare step builds 2 models: "
                                    f"{paths.show(paths.store_dir('x') / '_meta' / 'models.json')})")
    check_store_models(prof, ["03_direct_eval"])                       # a stage that does not name them


def test_a_missing_model_folder_is_refused_before_prepare(params_dir, tmp_path):
    from lib import params

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (params_dir / "x.yaml").write_text(f"description: demo\ncommon: {{models: [{tmp_path / 'm'}, "
                                       f"{tmp_path / 'gone'}]}}\nstages:\n  02_finetune:\n")
    with pytest.raises(params.ParamsError) as info:
        params.load_profile("x")
    assert str(info.value) == (f"{params_dir / 'x.yaml'}: common.models[1]: no model folder '{tmp_path / 'gone'}' "
                               "(no config.json there)")


# --------------------------------------------------------------------------- 6. the smaller points
def test_a_damaged_result_being_redone_is_not_told_to_be_deleted(tmp_path):
    from lib import store

    spec = _spec(tmp_path, "m")
    store.write(spec.store_root, store.Result(store.DIRECT, "b1", "m", "acc", 0.5,
                                              provenance={"config": spec.config()}))
    path = store.path_for(spec.store_root, store.DIRECT, "b1", "m")
    path.write_text(path.read_text().replace('"score": 0.5', '"score": NaN'))
    why = spec.unfinished("b1")
    assert why.startswith("its result direct_eval/b1/m.json is damaged (") and "delete it" not in why, why


def test_the_read_only_line_says_what_to_do_first():
    from runner import failures

    line = failures.os_error_line(errno.EROFS, "/proc/x", "smoke")
    assert line.startswith("/proc is on a read-only file system: remount it read-write, or move outputs/"), line


def test_make_status_after_an_interrupted_processes_run(params_dir, tmp_path, monkeypatch):
    from lib import paths, store
    from runner import status

    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    (params_dir / "x.yaml").write_text("description: demo\ncommon: {executor: processes}\nstages:\n"
                                       "  02_finetune:\n  03_direct_eval:\n")
    store.write(paths.store_dir("x"), store.Result(store.TBT, "b", "m", "acc", 0.5))
    assert status.lines("x") == [
        "x 02_finetune: not finished; 1 units in the store so far (executor: processes, not Slurm): "
        "`make all PROFILE=x` resumes it, finished units are kept",
        "x 03_direct_eval: not finished; 0 units in the store so far (executor: processes, not Slurm): "
        "`make all PROFILE=x` resumes it, finished units are kept"]


def test_the_console_counts_steps_of_the_units_make_status_counts(tmp_path, capsys):
    from lib.progress import Progress

    bar = Progress(total=48, label="train_before_test (4 jobs, 16 units of 2 learning rates and a test)",
                   unit="steps", stream=sys.stdout)
    bar.update(8)
    assert capsys.readouterr().out.startswith(
        "train_before_test (4 jobs, 16 units of 2 learning rates and a test): 8/48 steps, ")


class _Job:
    def __init__(self, log: Path):
        self.paths = type("P", (), {"stderr": log})()


def test_a_requeue_is_named_by_its_cause(tmp_path):
    from lib.pipeline.launch import slurm

    log = tmp_path / "1_0_log.err"
    log.write_text("submitit WARNING: Caught signal SIGUSR2 on n1: this job is timed-out.\n")
    assert slurm.requeue_cause(_Job(log), 1) == "its time limit"
    log.write_text("submitit WARNING: Caught signal SIGUSR2 on n1: this job is preempted.\n")
    assert slurm.requeue_cause(_Job(log), 1) == "a preemption"
    assert slurm.requeue_cause(_Job(log), 2).startswith("by an administrator (`scontrol requeue`)")
    log.write_text("submitit WARNING: Bypassing signal SIGTERM\n")               # scontrol requeue
    assert "not by its time limit" in slurm.requeue_cause(_Job(log), 1)
    held = slurm.JobState("1_0", "PENDING", "JobHeldAdmin").stuck
    assert "`scontrol release <job>`" in held and "`scontrol release <job>`" in slurm.JobState(
        "1_0", "PENDING", "JobHeldUser").stuck


def test_two_profiles_sharing_a_zoo_build_it_one_after_the_other(tmp_path, monkeypatch, capsys):
    import threading

    from lib import paths
    from lib.miniworld import zoo

    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    zoo._link_to("smoke_slurm", "smoke")                      # what prepare_as does first
    order = []

    def second():
        with zoo.zoo_lock("smoke_slurm"):
            order.append("b")

    with zoo.zoo_lock("smoke"):
        other = threading.Thread(target=second)
        other.start()
        time.sleep(0.5)
        order.append("a")
    other.join(timeout=5)
    assert order == ["a", "b"]
    assert "[smoke_slurm] waiting: another run is building the world and models in" in capsys.readouterr().out


# --------------------------------------------------------------------------- 2 and 3 on a real run of 02
def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _start_02(smoke, tmp_path) -> tuple[subprocess.Popen, list[str]]:
    """A copy of the smoke profile whose 02 has everything to redo, run by the runner in a session of
    its own; returns once 02's progress line is on the console and its pool workers run."""
    from lib import paths

    out = tmp_path / "outputs"
    shutil.copytree(paths.profile_dir("smoke"), out / "smoke", symlinks=True,
                    ignore=shutil.ignore_patterns("train_before_test", "02_finetune", "03_direct_eval", "logs"))
    env = {**os.environ, "TBT_OUTPUTS": str(out), "TBT_MAKE_GOAL": "make all PROFILE=smoke"}
    proc = subprocess.Popen([sys.executable, "-m", "runner.run", "smoke", "--stages", "02"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines = []
    for line in proc.stderr:
        lines.append(line.rstrip("\n"))
        if "train_before_test (" in line and "started" in line:
            break
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any("multiprocessing" in _cmdline(p) for p in _descendants(proc.pid)):
        time.sleep(0.2)
    return proc, lines


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_hard_kill_of_the_runner_during_02_leaves_no_process_of_the_run(smoke, tmp_path):
    proc, lines = _start_02(smoke, tmp_path)
    try:
        run = _descendants(proc.pid)                 # the kernel, its pool workers, the resource tracker
        workers = [p for p in run if "multiprocessing" in _cmdline(p)]
        assert len(workers) >= 2, (lines, [_cmdline(p) for p in run])
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in run):
            time.sleep(0.2)
        assert not [(_cmdline(p)) for p in run if _alive(p)]
    finally:
        for p in _descendants(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


@pytest.mark.slow
def test_ctrl_c_during_02_is_one_line_without_a_failed_unit(smoke, tmp_path):
    proc, _ = _start_02(smoke, tmp_path)
    time.sleep(3)
    os.killpg(proc.pid, signal.SIGINT)               # a terminal's Ctrl-C reaches the runner's process group
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 2
    assert "FAILED" not in err and "retry:" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: interrupted in 02_finetune (stage 1 of 1); "
                                                     "`make all PROFILE=smoke` resumes from "), err


def test_a_hub_model_missing_from_the_offline_cache_is_refused_before_prepare(params_dir, tmp_path, monkeypatch,
                                                                               capsys):
    from lib import paths
    from runner import run

    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))              # an empty cache
    (params_dir / "x.yaml").write_text("description: demo\nprepare: [lib.miniworld.zoo:prepare]\n"
                                       "common: {models: [nobody/no-such-model]}\nstages:\n  02_finetune:\n")
    assert run.main(["x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {params_dir / 'x.yaml'}: common.models[0]: hub model 'nobody/no-such-model' is "
                          "not in the local cache and HF_HUB_OFFLINE is set: run `make models PROFILE=x`"), err
    assert "\n" not in err and not (tmp_path / "outputs").exists()    # before prepare: nothing made


def test_a_killed_kernel_is_one_line_with_where_the_run_resumes(monkeypatch, caplog):
    import logging

    from nbclient.exceptions import DeadKernelError

    from runner import failures

    monkeypatch.delenv("TBT_MAKE_GOAL", raising=False)
    where = failures.Where(profile="smoke", stage="02_finetune")
    assert failures.failure_line(DeadKernelError("Kernel died"), where) == (
        "[smoke] 02_finetune: the notebook's kernel died (killed, or out of memory: `dmesg | tail` says which); "
        "`make all PROFILE=smoke` resumes from this stage (the stages before it are cached, finished units kept)")
    printed = []

    class Collect(logging.Handler):
        def emit(self, record):
            printed.append(record.getMessage())

    monkeypatch.setattr(logging, "lastResort", Collect())      # what would reach the terminal
    monkeypatch.setattr(logging.getLogger(), "handlers", [])     # (pytest's own capture is not the terminal)
    for text in ("Kernel died while waiting for execute reply.", "another warning"):
        failures._LibraryWarnings().emit(logging.LogRecord("nbclient.x", logging.ERROR, __file__, 1, text, None, None))
    assert printed == ["another warning"]


TASK_HOOK = '''
from lib import paths
from lib.pipeline.localtasks import write_task


def prepare(profile):
    write_task(paths.profile_dir(profile) / "work" / "tasks", "t", "generate_until",
               {"train": [{"question": "a", "answer": "b"}], "test": [{"question": "c", "answer": "d"}]})
'''
TASK_READER = """
from lib import notebook, outputs, params, paths, util
ctx = notebook.stage("01_demo", globals())
tasks = paths.profile_dir(ctx.profile) / "work" / "tasks"
util.note_read(tasks)
outputs.write_summary(ctx.out, {"n_squared": n * n, "tasks": util.digest(tasks)})
"""


@pytest.mark.slow
def test_a_moved_project_finds_every_stage_cached_and_its_tasks_rewritten(project, monkeypatch):
    """Issue 50: after `mv` of the checkout, prepare writes the local tasks again at the new place (lm-eval
    needs absolute paths) and every stage, one of which read those tasks, is cached."""
    from lib import paths
    from runner import run

    hooks = project / "hooks"
    hooks.mkdir()
    (hooks / "taskhook.py").write_text(TASK_HOOK)
    monkeypatch.syspath_prepend(str(hooks))
    notebook(project / "notebooks" / "01_demo.ipynb", TASK_READER)
    notebook(project / "notebooks" / "02_reader.ipynb", READER)
    (project / "params" / "x.yaml").write_text("description: demo\nprepare: [taskhook:prepare]\n"
                                               "stages:\n  01_demo: {n: 7}\n  02_reader:\n")
    assert [s["status"] for s in run.run_profile("x").values()] == ["ran", "ran"]
    moved = project.parent / "moved"
    shutil.move(project, moved)
    for name, sub in (("OUTPUTS", "outputs"), ("PARAMS", "params"), ("NOTEBOOKS", "notebooks")):
        monkeypatch.setenv(f"TBT_{name}", str(moved / sub))
        monkeypatch.setattr(paths, name, moved / sub)
    assert [s["status"] for s in run.run_profile("x").values()] == ["cached", "cached"]
    yaml = (moved / "outputs" / "x" / "work" / "tasks" / "t" / "t.yaml").read_text()
    assert str(moved) in yaml and str(project) + "/" not in yaml


def test_the_environment_finds_lib_by_a_relative_path():
    """The virtual environment names the checkout relative to itself (a `.pth` of ``../../../..``), so
    a moved checkout imports its own lib (issue 50: the editable install held the old path)."""
    import lib
    from lib import paths

    venv = paths.ROOT / ".venv"
    if not venv.exists():
        pytest.skip("no .venv here (make venv makes it)")
    pth = [p for p in venv.glob("lib/python3*/site-packages/*.pth") if "train_before_test" in p.name]
    assert [p.read_text().strip() for p in pth] == ["../../../.."]
    assert Path(lib.__file__).resolve().parent == (pth[0].parent / "../../../../lib").resolve()
