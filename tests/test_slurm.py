"""The cluster path against a real Slurm: a one-machine cluster (slurm/cluster.sh: munge, MariaDB +
slurmdbd, slurmctld, slurmd) started by the fixture, the smoke profile submitted through it, and the
faults a cluster brings, each ending in the line a user reads.

`make test-slurm` runs these alone (and fails when the cluster cannot start); `make test` runs them
too, and where the cluster cannot start (not root, no apt, the daemons refuse) it skips them with
that reason in one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from lib import layout, paths, store
from lib.pipeline.launch import jobs, slurm
from lib.store import DIRECT, TBT
from lib.util import digest

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
ROOT = Path(__file__).resolve().parents[1]
PROFILE = "smoke_slurm"


# --------------------------------------------------------------------------- the cluster
@pytest.fixture(scope="module")
def cluster():
    """A one-machine Slurm cluster of its own (state in .cache/test-slurm, ports apart from the
    user's `make slurm-up`), started for this module and stopped after it."""
    state = ROOT / ".cache" / "test-slurm"
    env = {**os.environ, "TBT_SLURM_STATE": str(state), "TBT_SLURM_PORT_BASE": "16910",
           "TBT_SLURM_SHORT_MIN": "1", "TBT_SLURM_MAX_ARRAY_SIZE": "3"}
    script = ROOT / "slurm" / "cluster.sh"
    up = subprocess.run([str(script), "up"], env=env, capture_output=True, text=True, timeout=600)
    if up.returncode != 0:
        why = (up.stderr.strip() or up.stdout.strip() or "no reason given").splitlines()[-1]
        if os.environ.get("TBT_REQUIRE_SLURM"):
            pytest.fail(f"the one-machine Slurm cluster did not start: {why}")
        pytest.skip(f"no Slurm cluster here: {why}")
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(state / "etc" / "slurm.conf")
    poll = jobs.POLL_SECONDS["slurm"]
    jobs.POLL_SECONDS["slurm"] = 1.0                  # the tests' jobs take seconds, not hours
    try:
        yield {"env": {**env, "SLURM_CONF": os.environ["SLURM_CONF"]}, "script": script, "state": state}
    finally:
        jobs.POLL_SECONDS["slurm"] = poll
        subprocess.run([str(script), "down"], env=env, capture_output=True, timeout=120)
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved


def _sh(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout


def _sacct(job_ids) -> dict[str, str]:
    out = _sh("sacct", "--noheader", "--parsable2", "--allocations", "--duplicates", "--format=JobID,State",
              *[f"--jobs={j}" for j in job_ids])
    return {line.split("|")[0]: line.split("|")[1] for line in out.splitlines() if "|" in line}


def _wait_until(what, timeout: float = 120.0, every: float = 0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what.__doc__ or what}")


def _queue() -> dict[str, tuple[str, str]]:
    out = _sh("squeue", "--noheader", "--array", "--format=%i|%T|%r")
    return {x.split("|")[0]: tuple(x.split("|")[1:]) for x in out.splitlines() if x.count("|") == 2}


@contextlib.contextmanager
def _release_requeued(settle: float = 5.0):
    """Slurm holds a requeued job back two minutes (its BeginTime); this lets it start after
    ``settle`` seconds. Not at once: a job restarted 0.5 s after its requeue, while its killed run's
    step was still being torn down, was killed again ("Job credential revoked") and ended FAILED
    (slurmctld's log of a run with three test workers)."""
    stop, held = threading.Event(), {}

    def loop():
        while not stop.wait(1.0):
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                for jid, (state, reason) in _queue().items():
                    if state == "PENDING" and reason == "BeginTime" and \
                            time.monotonic() - held.setdefault(jid, time.monotonic()) >= settle:
                        subprocess.run(["scontrol", "update", f"JobId={jid}", "StartTime=now"],
                                       capture_output=True, timeout=30)
                        held.pop(jid)
                    elif state == "PENDING" and reason.startswith("JobHeld"):
                        subprocess.run(["scontrol", "release", jid], capture_output=True, timeout=30)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=5)


# --------------------------------------------------------------------------- the profile through Slurm
@pytest.fixture(scope="module")
def slurm_run(cluster, smoke):
    """`make submit`, `make status`, then `make all` of smoke_slurm (stages 00-04: 02 and 03 through the cluster)."""
    from runner import run, status

    prof_dir = paths.profile_dir(PROFILE)
    for sub in ("01_select_benchmarks", "02_finetune", "03_direct_eval", "store", "work/train_before_test",
                "work/items", "work/submitit", "work/failed"):
        subprocess.run(["rm", "-rf", str(prof_dir / sub)], check=True)
    world = paths.work_dir("smoke") / "world" / "tasks"     # smoke's, which smoke_slurm links to
    world_before = digest(world)
    os.environ[slurm.SUBMIT_ONLY_ENV] = "1"
    try:
        submitted = run.run_profile(PROFILE)
    finally:
        os.environ.pop(slurm.SUBMIT_ONLY_ENV, None)
    before = _stored()
    status_lines = status.lines(PROFILE)
    after = _stored()                   # the jobs run on meanwhile: status's "done" lies between the two
    # `make all` again: waits for the jobs, then 04, the first stage the submission stopped at (05-07
    # read the store as smoke's do and never meet the cluster: left out to keep `make test` short)
    finished = run.run_profile(PROFILE, stages=["00", "01", "02", "03", "04"])
    return {"submitted": submitted, "status": status_lines, "stored": (before, after), "finished": finished,
            "smoke's world": (world_before, digest(world))}


def _stored() -> dict[str, int]:
    """Result files in smoke_slurm's store, per protocol."""
    return {p: len(list((paths.store_dir(PROFILE) / p).glob("*/*.json"))) for p in (TBT, DIRECT)}


def test_profile_through_slurm_equals_the_processes_run(slurm_run, smoke):
    """smoke_slurm's results equal smoke's (executor processes) value for value, and sacct lists
    the jobs, in arrays of at most MaxArraySize (3) tasks."""
    assert slurm_run["submitted"]["02_finetune"]["status"] == "submitted"
    assert slurm_run["submitted"]["03_direct_eval"]["status"] == "submitted"
    assert slurm_run["submitted"]["04_rank_agreement"]["status"] == "waits"
    assert all(v["status"] in ("ran", "cached") for v in slurm_run["finished"].values())
    for protocol in (DIRECT, TBT):
        ours, theirs = store.load(paths.store_dir(PROFILE), protocol), store.load(smoke["store"], protocol)
        cols = ["model", "benchmark", "score", "stderr", "n"]
        a = ours[cols].sort_values(["model", "benchmark"]).reset_index(drop=True)
        b = theirs[cols].sort_values(["model", "benchmark"]).reset_index(drop=True)
        assert len(a) == 16 and a.equals(b), f"{protocol}: Slurm and processes runs differ"
    # the shared world is used as it is: its task YAMLs (which name their folder) were not rewritten
    # with smoke_slurm's path, which made smoke's stages 01-03 re-run after it
    before, after = slurm_run["smoke's world"]
    assert before == after != "missing"
    for stage in ("02_finetune", "03_direct_eval"):
        record = slurm.Record(layout.submitit_dir(paths.work_dir(PROFILE), stage)).read()
        ids = sorted(e["job_id"] for e in record.values())
        assert len(ids) == 4
        sizes = sorted(Counter(i.split("_")[0] for i in ids).values())
        assert sizes == [1, 3]                           # two arrays: 3 tasks + 1 (MaxArraySize 3)
        assert set(_sacct(ids).values()) == {"COMPLETED"}
    assert (paths.stage_dir(PROFILE, "04_rank_agreement") / "summary.json").exists()


def test_status_after_submit_counts_units_from_store_and_scheduler(slurm_run):
    lines = slurm_run["status"]
    assert lines[0].startswith(f"{PROFILE} 02_finetune: 16 units: ")
    assert lines[1].startswith(f"{PROFILE} 03_direct_eval: 16 units: ")
    before, after = slurm_run["stored"]
    for line, protocol in zip(lines[:2], (TBT, DIRECT)):
        counts = {k: int(n) for n, k in re.findall(r"(\d+) (done|running|pending|failed)\b", line)}
        assert set(counts) == {"done", "running", "pending", "failed"} and sum(counts.values()) == 16, line
        assert counts["failed"] == 0, line
        assert before[protocol] <= counts["done"] <= after[protocol], (line, before, after)   # done: in the store
        if counts["running"] + counts["pending"]:
            assert "; jobs in the queue: " in line, line
    assert "make all PROFILE=smoke_slurm" in lines[-1]


# --------------------------------------------------------------------------- faults
def _direct_specs(tmp: Path, models: list[str], benchmarks=("mw_facts",)):
    src = paths.store_dir(PROFILE)
    for kind in ("models", "benchmarks"):
        store.write_meta(tmp / "store", kind, store.read_meta(src, kind))
    from lib import outputs

    sel = outputs.read_summary(PROFILE, "01_select_benchmarks")
    return jobs.plan(DIRECT, models, {**sel, "selected": list(benchmarks)}, store_root=tmp / "store",
                     work_root=tmp / "work", bootstrap_iters=200, eval_batch_size=32, max_gen_toks=0)


def _tbt_specs(tmp: Path, models: list[str], benchmarks):
    from lib import outputs, params
    from lib.pipeline import finetune as ft

    src = paths.store_dir(PROFILE)
    for kind in ("models", "benchmarks"):
        store.write_meta(tmp / "store", kind, store.read_meta(src, kind))
    sel = outputs.read_summary(PROFILE, "01_select_benchmarks")
    recipe = ft.Recipe.from_params(params.load_profile(PROFILE).params("02_finetune"))
    return jobs.plan(TBT, models, {**sel, "selected": list(benchmarks)}, store_root=tmp / "store",
                     work_root=tmp / "work", recipe=recipe, bootstrap_iters=200, eval_batch_size=32, max_gen_toks=0)


def _same_as_profile(spec) -> None:
    for bench in spec.benchmarks:
        ours = store.read(store.path_for(spec.store_root, spec.protocol, bench, spec.model))
        ref = store.read(store.path_for(paths.store_dir(PROFILE), spec.protocol, bench, spec.model))
        assert (ours.score, ours.stderr, ours.n) == (ref.score, ref.stderr, ref.n), (spec.model, bench)


def test_job_warned_of_its_time_limit_is_requeued_and_resumes(slurm_run, cluster, tmp_path, capsys):
    """Slurm warns a job ``slurm_signal_delay_s`` before its time limit (USR2): submitit checkpoints,
    the job requeues itself, resumes after its last finished epoch and ends with the numbers of an
    uninterrupted run. The test sends that warning itself, mid-unit (the job paused with STOP the
    moment an epoch is saved, warned, continued): Slurm's own timing is too coarse for a test
    (documented "up to 60 seconds earlier"; on this cluster 2-25 s into a 1-minute job, once before
    Python had started)."""
    specs = _tbt_specs(tmp_path, ["mw-llama-s"], ["mw_quiz", "mw_recall"])
    res = {"timeout_min": 10, "slurm_signal_delay_s": 30, "cpus_per_task": 1}
    box = {}
    with _release_requeued():
        t = threading.Thread(target=lambda: box.update(out=jobs.launch(
            specs, executor="slurm", resources=res, log_folder=tmp_path / "logs", max_requeues=3,
            progress_every=3600)))
        t.start()
        _wait_until(_epoch_saved(tmp_path), timeout=180, every=0.05)
        (jid,) = [e["job_id"] for e in slurm.Record(tmp_path / "logs").read().values()]
        for sig in ("STOP", "USR2", "CONT"):
            _sh("scancel", f"--signal={sig}", jid)
        t.join(timeout=900)                            # a loaded machine: the requeued job imports again
    assert "out" in box, f"the requeued job did not finish; queue: {_queue()}"
    text = "".join(capsys.readouterr())
    runs = _sh("sacct", "--noheader", "--parsable2", "--allocations", "--duplicates", "--format=JobID,State",
               f"--jobs={jid}").split()
    assert any("REQUEUED" in r for r in runs) and runs[-1].endswith("COMPLETED"), runs
    assert "was requeued (its time limit); it resumes after its last finished epoch" in text
    assert "this job is timed-out" in "".join(p.read_text() for p in (tmp_path / "logs").glob("*_log.err"))
    script = next((tmp_path / "logs").glob("*_submission.sh")).read_text()
    assert "#SBATCH --signal=USR2@30" in script and "#SBATCH --requeue" in script and "#SBATCH --time=10" in script
    _resumed(tmp_path)
    _same_as_profile(specs[0])


def _launch_behind(specs, tmp: Path, box: dict, **options) -> threading.Thread:
    """jobs.launch of ``specs`` through Slurm in a thread (its result in ``box["out"]``), started."""
    kw = {"resources": {"cpus_per_task": 1}, "log_folder": tmp / "logs", "progress_every": 3600, **options}
    t = threading.Thread(target=lambda: box.update(out=jobs.launch(specs, executor="slurm", **kw)))
    t.start()
    return t


def _epoch_saved(tmp: Path):
    def saved():
        """an epoch of the job saved (a unit's resume state)"""
        try:
            return any((tmp / "work").rglob("resume"))
        except FileNotFoundError:                      # a folder pruned while the walk was in it
            return False
    return saved


def _resumed(tmp: Path) -> None:
    resumed = [json.loads(p.read_text()).get("resumed_after") for p in (tmp / "work").rglob(layout.UNIT_FILE)]
    assert any(resumed), "no unit resumed after its last finished epoch"


def test_preempted_job_is_requeued_and_resumes(slurm_run, tmp_path):
    """Preemption as a scheduler does it with PreemptMode=REQUEUE (the job killed and put back in
    the queue): the requeued job skips what the killed run finished and does the rest; the scores
    equal the uninterrupted run's. (Where a kill lands inside a unit, the unit resumes after its last
    finished epoch: the test above, and test_pipeline_smoke's kill test bit for bit.)"""
    specs = _tbt_specs(tmp_path, ["mw-gpt2-s"], ["mw_quiz", "mw_recall"])
    box = {}
    with _release_requeued():
        t = _launch_behind(specs, tmp_path, box)

        def running():
            """the job's Python runs (its log has begun): a requeue in the instant its batch step is
            still being launched gets the restarted job killed ("Job credential revoked", FAILED)"""
            jid = slurm.Record(tmp_path / "logs").job_id(specs[0])
            logs = list((tmp_path / "logs").glob(f"{jid}_*_log.*")) if jid else []
            started = any(p.stat().st_size for p in logs)
            return jid if started and slurm.states([jid])[jid].state == "RUNNING" else None
        jid = _wait_until(running, timeout=180, every=0.2)
        _sh("scontrol", "requeue", jid)                  # while it imports (seconds) or trains
        t.join(timeout=300)
    assert not t.is_alive() and "out" in box        # the requeued job's report holds what its last run did
    runs = _sh("sacct", "--noheader", "--parsable2", "--allocations", "--duplicates", "--format=JobID,State",
               f"--jobs={jid}").split()
    assert any("REQUEUED" in r for r in runs), runs
    _same_as_profile(specs[0])


def test_cancelled_job_is_listed_with_its_retry_while_the_other_finishes(slurm_run, tmp_path, capsys):
    specs = _direct_specs(tmp_path, ["mw-llama-s", "mw-gpt2-s"])
    box = {}

    def go():
        try:
            jobs.launch(specs, executor="slurm", resources={"cpus_per_task": 1}, log_folder=tmp_path / "logs",
                        progress_every=3600)
        except jobs.JobError as exc:
            box["error"] = exc

    t = threading.Thread(target=go)
    t.start()

    def running():
        """both jobs submitted and the victim running (a pending array task, once cancelled, is known
        to no Slurm command: its line reads UNKNOWN, docs/cluster.md's fault table)"""
        record = slurm.Record(tmp_path / "logs")
        victim = record.job_id(specs[1]) if len(record.read()) == 2 else None
        return victim if victim and slurm.states([victim])[victim].state == "RUNNING" else None
    victim = _wait_until(running, timeout=180, every=0.2)
    _sh("scancel", victim)
    t.join(timeout=300)
    line = str(box["error"])
    assert f"FAILED direct_eval mw-gpt2-s / mw_facts: job {victim} was cancelled (CANCELLED" in line
    assert "retry: " in line and "-m lib.pipeline.launch.jobs" in line
    _same_as_profile(specs[0])                                    # the other one finished


def test_a_job_failing_inside_is_listed_while_the_others_finish(slurm_run, tmp_path):
    """A model folder whose weights cannot be loaded (it passes planning: the folder is there)."""
    good = _direct_specs(tmp_path, ["mw-llama-s"])
    bad_dir = tmp_path / "broken-model"
    src = Path(good[0].source)
    bad_dir.mkdir()
    for f in src.iterdir():
        if f.is_file():
            (bad_dir / f.name).write_bytes(f.read_bytes())
    for weights in bad_dir.glob("*.safetensors"):
        weights.write_bytes(b"not a safetensors file")
    bad = _direct_specs(tmp_path, [str(bad_dir)])
    with pytest.raises(jobs.JobError) as err:
        jobs.launch(good + bad, executor="slurm", resources={"cpus_per_task": 1}, log_folder=tmp_path / "logs",
                    progress_every=3600)
    text = str(err.value)
    assert "1 unit(s) failed" in text and f"FAILED direct_eval {bad[0].model} / mw_facts" in text
    assert "retry: " in text
    _same_as_profile(good[0])


def test_waiting_process_killed_and_restarted_reattaches_and_submits_nothing_twice(slurm_run, tmp_path, capsys):
    specs = _direct_specs(tmp_path, ["mw-llama-s", "mw-gpt2-s", "mw-llama-s-contam50"])
    folder = tmp_path / "logs"
    (tmp_path / "specs.json").write_text(json.dumps([s.to_dict() for s in specs]))
    code = ("import json, sys; from lib.pipeline.launch import jobs; from lib.pipeline.spec import JobSpec; "
            "jobs.POLL_SECONDS['slurm'] = 1.0; "
            f"jobs.launch([JobSpec.from_dict(d) for d in json.load(open({str(tmp_path / 'specs.json')!r}))], "
            f"executor='slurm', resources={{'cpus_per_task': 1}}, log_folder={str(folder)!r})")
    waiter = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, start_new_session=True)

    def recorded():
        """three jobs recorded"""
        return len(slurm.Record(folder).read()) == 3 or None
    _wait_until(recorded, timeout=180)
    before = sorted(e["job_id"] for e in slurm.Record(folder).read().values())
    os.killpg(waiter.pid, signal.SIGKILL)               # the waiting process dies; the jobs run on
    waiter.wait(timeout=30)
    capsys.readouterr()
    out = jobs.launch(specs, executor="slurm", resources={"cpus_per_task": 1}, log_folder=folder,
                      progress_every=3600)
    text = "".join(capsys.readouterr())
    after = sorted(e["job_id"] for e in slurm.Record(folder).read().values())
    assert after == before                                 # nothing submitted twice
    assert "re-attached to" in text or out == {}           # (or every job had finished meanwhile)
    assert "RUNNING ELSEWHERE" not in text
    for spec in specs:
        _same_as_profile(spec)


def test_controller_stopped_and_started_mid_run_the_waiter_keeps_polling(slurm_run, cluster, tmp_path, capsys):
    specs = _direct_specs(tmp_path, ["mw-llama-s", "mw-gpt2-s"])
    box = {}
    t = _launch_behind(specs, tmp_path, box)

    def started():
        """both jobs submitted and started (submitit's first log line: srun has its allocation; a job
        whose srun starts while the controller is down fails, which is not what this test is about)"""
        record = slurm.Record(tmp_path / "logs").read().values()
        logs = [tmp_path / "logs" / f"{e['job_id']}_0_log.out" for e in record]
        return len(logs) == 2 and all(p.exists() and "Starting with JobEnvironment" in p.read_text() for p in logs) \
            or None
    _wait_until(started, timeout=180)
    pid = int((cluster["state"] / "run" / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    said = []

    def told():
        """the waiter says the scheduler does not answer"""
        said.append("".join(capsys.readouterr()))
        return "slurm: the scheduler does not answer" in "".join(said)
    _wait_until(told, timeout=90)
    subprocess.run([str(cluster["script"]), "up"], env=cluster["env"], check=True, capture_output=True, timeout=120)
    t.join(timeout=300)
    text = "".join(said) + "".join(capsys.readouterr())
    assert "still polling every" in text and "slurm: the scheduler answers again" in text
    assert "out" in box
    for spec in specs:
        _same_as_profile(spec)


def test_drained_node_jobs_pend_with_the_reason_shown(slurm_run, tmp_path, capsys):
    from runner import status

    specs = _direct_specs(tmp_path, ["mw-gpt2-s"], benchmarks=("mw_quiz",))
    _sh("scontrol", "update", "NodeName=tbt-node", "State=DRAIN", "Reason=maintenance")
    box = {}
    try:
        t = _launch_behind(specs, tmp_path, box)

        def pends():
            """the job pends on the drained node"""
            jid = slurm.Record(tmp_path / "logs").job_id(specs[0])
            st = jid and slurm.states([jid])[jid]
            return st if st and st.state == "PENDING" and st.stuck else None
        st = _wait_until(pends, timeout=60)
        folder = tmp_path / "logs"
        report = status.stage_status(folder)
        assert report["pending"] == 1 and st.reason in report["reasons"]
        time.sleep(2.5)                                      # the waiter says it
    finally:
        _sh("scontrol", "update", "NodeName=tbt-node", "State=RESUME")
    t.join(timeout=300)
    text = "".join(capsys.readouterr())
    assert "slurm: 1 job(s) pending (" in text and "scontrol update NodeName=<node> State=RESUME" in text
    _same_as_profile(specs[0])


def test_preflight_asks_the_scheduler_for_the_partition_limit_and_array_size(slurm_run, capsys):
    lim = slurm.limits("short")
    assert lim.max_time_min == 1 and lim.max_array_size == 3
    assert slurm.limits(None).partition == "normal" and slurm.limits(None).max_time_min is None
    assert slurm.array_size(1000) == 3
    assert "MaxArraySize is 3 on this cluster, max_array 1000: arrays of 3 tasks" in "".join(capsys.readouterr())

    res, lines = slurm.scheduler_resources({"slurm_partition": "short", "timeout_min": 30})
    assert res["timeout_min"] == 1
    assert lines == ["preflight: partition short allows 1 min a job, not timeout_min 30: planning with 1 min"]
    with pytest.raises(ValueError, match="partition 'gpu' does not exist on this cluster"):
        slurm.scheduler_resources({"slurm_partition": "gpu", "timeout_min": 30})
