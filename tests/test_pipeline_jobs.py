"""The job grid on a cluster's terms: every failure collected and reported with its retry command,
a unit running elsewhere left alone, Slurm arrays chunked, at most ``max_jobs`` local jobs at
once, progress counted from the files jobs write, the hub cache and token respected, gated models
named, and the memory / time estimate."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib import layout, paths, store
from lib.pipeline import finetune as ft
from lib.pipeline import localtasks, tiny
from lib.pipeline import tasks as tk
from lib.pipeline.launch import jobs, outcome, preflight
from lib.pipeline.launch.locks import UnitBusy, UnitLock
from runner import fetch
from runner.published import compare, published_scores

RECIPE = dict(lrs=(1e-3, 3e-3), epochs=1, lora_r=4, lora_alpha=8, lora_dropout=0.0, max_length=64)  # 02's, small


def _mc(n, tag=""):
    return [{"query": f"q{tag}{i}: it says", "choices": ["moo", "woof"], "label": i % 2} for i in range(n)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Three local tasks and a tiny (untrained) model folder."""
    root = tmp_path_factory.mktemp("world")
    for name in ("t_a", "t_b", "t_c"):
        localtasks.write_task(root / "tasks", name, "multiple_choice",
                              {"train": _mc(24, name), "validation": _mc(6, name), "test": _mc(8, name)})
    tok = tiny.train_tokenizer([r["query"] + " moo woof" for r in _mc(40)], 300)
    model = tiny.make_model("gpt2", tok, d_model=32, n_layers=1, n_heads=2, max_len=64)
    model.save_pretrained(root / "tiny-m")
    tok.save_pretrained(root / "tiny-m")
    return root


def _specs(world, tmp, protocol=store.DIRECT, names=("t_a", "t_b", "t_c"), models=None):
    rows = tk.select(list(names), [world / "tasks"], min_train=1)
    selection = tk.selection_summary(rows, [world / "tasks"], False, 1, tk.SplitRule(caps={}), task_timeout=60.0)
    recipe = ft.Recipe.default(**RECIPE) if protocol == store.TBT else None
    return jobs.plan(protocol, models or [str(world / "tiny-m")], selection, store_root=tmp / "store",
                     work_root=tmp / "work", recipe=recipe, bootstrap_iters=0)


@pytest.mark.slow
def test_one_failing_unit_does_not_stop_the_others_and_is_reported_with_its_retry(world, tmp_path, capfd):
    (spec,) = _specs(world, tmp_path)
    broken = world / "tasks" / "t_b" / "test.jsonl"
    good = broken.read_text()
    broken.write_text("{not json\n")                              # the dataset breaks after notebook 01
    try:
        with pytest.raises(jobs.JobError, match=r"1 unit\(s\) failed") as err:
            jobs.launch([spec], executor="local")
    finally:
        broken.write_text(good)
    text = str(err.value)
    assert "FAILED direct_eval tiny-m / t_b: TaskError" in text and "retry: " in text
    assert "t_a" not in text.split("(listed above):")[1] and "t_c" not in text.split("(listed above):")[1]
    assert {r.benchmark for r in store.load(tmp_path / "store").itertuples()} == {"t_a", "t_c"}   # the others ran
    record = json.loads(layout.failure_path(spec.work_root, store.DIRECT, "tiny-m", "t_b").read_text())
    assert record["spec"]["benchmarks"] == ["t_b"] and "Traceback" in record["traceback"]
    assert "FAILED direct_eval tiny-m / t_b" in capfd.readouterr().err      # on the console too
    # the printed command retries just that unit, now that the data is back
    command = text.split("retry: ")[1].split("\n")[0].split()
    done = subprocess.run(command, cwd=paths.ROOT, capture_output=True, text=True,
                          env={**os.environ, "TBT_TORCH_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["scores"].keys() == {"t_b"}
    assert not layout.failure_path(spec.work_root, store.DIRECT, "tiny-m", "t_b").exists()
    assert jobs.launch([spec], executor="local") == {}              # everything done: nothing runs


_HOLD = """
import sys, time
from lib.pipeline.launch.locks import UnitLock
lock = UnitLock(sys.argv[1], heartbeat=0.2).acquire()
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_a_duplicate_never_deletes_the_work_of_a_running_unit(world, tmp_path):
    (spec,) = _specs(world, tmp_path, store.TBT, names=("t_a",))
    partial = layout.unit_dir(spec.work_root, spec.model, "t_a", 1e-3)
    partial.mkdir(parents=True)
    (partial / "half-written").write_text("a live job's partial work")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(jobs.unit_lock(spec, "t_a").path)], cwd=paths.ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        report = jobs.run_job(spec)                                 # a duplicate job for the same unit
        assert report.scores == {} and report.failed == {} and "t_a" in report.busy
        assert f"process {holder.pid}" in report.busy["t_a"]
        assert (partial / "half-written").exists()                  # untouched
        with pytest.raises(jobs.JobError, match="RUNNING ELSEWHERE train_before_test tiny-m / t_a"):
            jobs.launch([spec], executor="local")                   # not resubmitted
        assert (partial / "half-written").exists()
    finally:
        holder.kill()
        holder.wait()
    report = jobs.run_job(spec)                                     # its owner died: the lock is stale
    assert set(report.scores) == {"t_a"} and not (partial / "half-written").exists()
    assert not jobs.unit_lock(spec, "t_a").path.exists()


def test_unit_lock_heartbeat_and_stale_takeover(tmp_path):
    path = tmp_path / "u.lock"
    with UnitLock(path, heartbeat=0.05) as lock:
        first = path.stat().st_mtime_ns
        time.sleep(0.3)
        assert path.stat().st_mtime_ns > first                       # the owner keeps it fresh
        with pytest.raises(UnitBusy, match=f"process {os.getpid()}"):
            UnitLock(path).acquire()
        assert lock.holder()["pid"] == os.getpid()
    assert not path.exists()
    path.write_text(json.dumps({"host": "another-node", "pid": 1, "since": "yesterday"}))
    assert UnitLock(path, stale_after=600).why_stale() is None            # another host, recently touched: alive
    old = time.time() - 3600
    os.utime(path, (old, old))
    with UnitLock(path, stale_after=600):                           # silent for an hour: taken over
        assert json.loads(path.read_text())["host"] != "another-node"


class _FakeJob:
    def __init__(self, spec, polls=0, fail=False):
        self.spec, self.polls, self.fail, self.job_id = spec, polls, fail, f"job-{spec.model}"

    def done(self):
        self.polls -= 1
        return self.polls < 0

    def result(self):
        if self.fail:
            raise RuntimeError("Job (task=0) failed during processing with trace: killed by the OOM killer")
        return outcome.JobOutcome.of(self.spec, scores={b: 0.5 for b in self.spec.benchmarks})


def _many_specs(world, tmp, n):
    (spec,) = _specs(world, tmp, names=("t_a",))
    return [dataclasses.replace(spec, model=f"m{i}") for i in range(n)]


def test_slurm_helpers_without_a_scheduler(world, tmp_path, monkeypatch):
    """What the Slurm path computes by itself (tests/test_slurm.py runs it against a real cluster)."""
    from lib.pipeline.launch import slurm

    assert slurm.chunks(list(range(1464)), 1000) == [list(range(1000)), list(range(1000, 1464))]
    assert [slurm.minutes(t) for t in ("2:00", "00:02:00", "30", "1-00:00:00", "2-12", "UNLIMITED")] == \
        [2.0, 2.0, 30.0, 1440.0, 3600.0, None]
    assert slurm._expand("12_[0-2,5]") == ["12_0", "12_1", "12_2", "12_5"] and slurm._expand("12_3") == ["12_3"]
    drained = slurm.JobState("7", "PENDING", "ReqNodeNotAvail, UnavailableNodes:n1")
    assert "State=RESUME" in drained.stuck and slurm.JobState("8", "PENDING", "Resources").stuck is None
    specs = _many_specs(world, tmp_path, 2)
    note = slurm.pending_note([(specs[0], drained), (specs[1], slurm.JobState("9", "RUNNING"))])
    assert note.startswith("slurm: 1 job(s) pending (ReqNodeNotAvail, UnavailableNodes:n1): its node is drained")
    record = slurm.Record(tmp_path / "logs")
    record.add([(specs[0], "41_0"), (specs[1], "41_1")])
    assert record.job_id(specs[1]) == "41_1" and len(record.read()) == 2
    shown = ("JobId=40 ArrayJobId=39 ArrayTaskId=0 JobName=wrap JobState=CANCELLED Reason=None\n"   # scontrol's
             "JobId=39 ArrayJobId=39 ArrayTaskId=1 JobName=wrap JobState=PENDING Reason=Resources\n")  # lines
    with monkeypatch.context() as m:
        m.setattr(slurm, "_run", lambda cmd, timeout=30.0: shown)
        assert [slurm._controller_state(j) for j in ("39_0", "39_1", "39_2", "40")] == \
            ["CANCELLED", "PENDING", None, "CANCELLED"]
    gone = slurm.ended_outcome(specs[1], "41_1", slurm.JobState("41_1", "UNKNOWN"))
    assert "neither squeue, sacct nor scontrol knows it" in next(iter(gone.failed.values()))
    monkeypatch.setenv("PATH", str(tmp_path))                 # no Slurm commands here
    with pytest.raises(slurm.SchedulerDown, match="^scontrol is not installed here"):
        slurm.limits()
    assert slurm.array_size(1000) == 1000                       # nobody to ask: max_array as given
    monkeypatch.setenv(slurm.SUBMIT_ONLY_ENV, "1")
    with pytest.raises(jobs.JobError, match="`make submit` needs executor: slurm"):
        jobs.launch(specs, executor="processes")


def test_local_subprocess_jobs_never_exceed_max_jobs(world, tmp_path, monkeypatch):
    import submitit

    running, peak, submitted = [], [0], []

    class FakeLocalExecutor:
        def __init__(self, folder):
            pass

        def update_parameters(self, **kw):
            pass

        def submit(self, fn, spec):
            job = _FakeJob(spec, polls=2)
            real_done = job.done

            def done():
                finished = real_done()
                if finished and job in running:
                    running.remove(job)
                return finished

            job.done = done
            running.append(job)
            peak[0] = max(peak[0], len(running))
            submitted.append(spec.model)
            return job

    monkeypatch.setattr(submitit, "LocalExecutor", FakeLocalExecutor)
    monkeypatch.setitem(jobs.POLL_SECONDS, "submitit_local", 0.0)
    specs = _many_specs(world, tmp_path, 7)
    out = jobs.launch(specs, executor="submitit_local", max_jobs=3)
    assert peak[0] == 3 and submitted == [f"m{i}" for i in range(7)] and sorted(out) == submitted
    assert jobs.default_max_jobs() >= 1


def test_units_are_counted_from_the_files_jobs_write(world, tmp_path):
    (spec,) = _specs(world, tmp_path, store.TBT, names=("t_a", "t_b"))
    stale = layout.unit_dir(spec.work_root, spec.model, "t_b", 3e-3) / layout.UNIT_FILE
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"lr": 3e-3, "curve": [], "config": {"another": "recipe"}}))
    counter = jobs.UnitCounter([spec])
    assert counter.total == 2 * (2 + 1) and counter.done() == 0      # two learning rates and a test score each
    unit = layout.unit_dir(spec.work_root, spec.model, "t_a", 1e-3) / layout.UNIT_FILE
    unit.parent.mkdir(parents=True)
    unit.write_text("{}")
    assert counter.done() == 1
    time.sleep(0.01)
    stale.write_text(json.dumps({"lr": 3e-3, "curve": [], "config": {}}))   # the stale unit redone
    assert counter.done() == 2


def _make_var(var: str, env: dict) -> str:
    out = subprocess.run(["make", "--no-print-directory", "-s", "--eval", f"show: ; @echo \"$${var}\"", "show"],
                         cwd=paths.ROOT, env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_hf_home_from_the_environment_wins(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env["HOME"] = str(tmp_path)
    assert _make_var("HF_HOME", {**env, "HF_HOME": "/shared/hf-cache"}) == "/shared/hf-cache"
    assert _make_var("HF_HOME", env) == str(paths.ROOT / ".cache" / "hf")       # the repository's, only when unset
    assert _make_var("HF_TOKEN_PATH", env) == ""
    (tmp_path / ".cache" / "huggingface").mkdir(parents=True)
    (tmp_path / ".cache" / "huggingface" / "token").write_text("hf_x")
    assert _make_var("HF_TOKEN_PATH", env) == str(tmp_path / ".cache" / "huggingface" / "token")  # login still found
    assert _make_var("HF_TOKEN_PATH", {**env, "HF_TOKEN": "hf_y"}) == ""


def _http_error(cls, message):
    import httpx2

    return cls(message, response=httpx2.Response(403, request=httpx2.Request("GET", "https://huggingface.co")))


def test_gated_models_are_named_in_one_line(monkeypatch, tmp_path):
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    def download(repo, filename, **kw):
        if repo.startswith(("meta-llama/", "google/")):
            raise _http_error(GatedRepoError, f"Access to model {repo} is restricted")
        if repo.startswith("nobody/"):
            raise _http_error(RepositoryNotFoundError, "404")
        return str(tmp_path / "config.json")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    models = ["EleutherAI/pythia-70m-deduped", "meta-llama/Llama-3.2-1B", "google/gemma-2b", "nobody/x", str(tmp_path)]
    (tmp_path / "config.json").write_text("{}")
    problems = fetch.check_models(models, download=False)
    assert problems["ok"] == ["EleutherAI/pythia-70m-deduped", str(tmp_path)]
    assert problems["gated"] == ["meta-llama/Llama-3.2-1B", "google/gemma-2b"] and problems["missing"] == ["nobody/x"]
    first = fetch.models_error(problems, "paper").splitlines()[0]
    assert first.startswith("gated models need access (2): meta-llama/Llama-3.2-1B, google/gemma-2b; request access")
    assert "make models PROFILE=paper" in first
    assert fetch.models_error({"ok": models}, "paper") is None


@pytest.mark.slow                 # starts make / python subprocesses
def test_models_are_not_downloaded_into_the_repository(monkeypatch):
    monkeypatch.setattr(fetch, "hub_cache", lambda: paths.ROOT / ".cache" / "hf" / "hub")
    with pytest.raises(fetch.HubError, match="inside the repository: set HF_HOME"):
        fetch.fetch("paper_slice")


def test_memory_and_time_estimate(world, tmp_path):
    (spec,) = _specs(world, tmp_path, store.TBT)
    rows = tk.select(["t_a", "t_b", "t_c"], [world / "tasks"], min_train=1)
    selection = tk.selection_summary(rows, [world / "tasks"], False, 1, tk.SplitRule(caps={}))
    shape = preflight.model_shape(spec.source)
    from transformers import AutoModelForCausalLM

    assert shape["n_params"] == sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(spec.source).parameters())
    row = preflight.preflight([spec], selection, gpu_memory_gb=80).table.iloc[0]
    assert row["family"] == "gpt2" and row["gpu_hours"] > 0 and row["micro_batch"] == 8 and not row["checkpointing"]
    mem = [preflight.training_memory_gb(shape, "float32", m, 1024) for m in (1, 2, 8)]
    assert mem[0] < mem[1] < mem[2]
    # a 9B Gemma in float32 at batch 8 x 1,024 tokens does not fit 80 GB; a micro-batch does
    gemma = {"family": "gemma2", "n_params": 9.24e9, "layers": 42, "hidden": 3584, "heads": 16, "vocab": 256000}
    assert preflight.training_memory_gb(gemma, "float32", 8, 1024) > 80 > \
        preflight.training_memory_gb(gemma, "float32", 1, 1024)
    assert preflight.training_memory_gb(gemma, "float32", 8, 1024, checkpointing=True) < \
        preflight.training_memory_gb(gemma, "float32", 2, 1024)                     # checkpointing: 42 layers -> ~1
    tight = preflight.preflight([spec], selection, gpu_memory_gb=1.0)       # less than the CUDA context
    assert tight.refused and "does not fit 1 GB even at micro-batch 1 with gradient checkpointing" in tight.refused[0]


def test_published_comparison_of_a_first_run(harmony_data, tmp_path):
    models, benchmarks = ["EleutherAI/pythia-160m-deduped", "Qwen/Qwen2.5-0.5B"], ["arc_easy", "rte", "medmcqa"]
    assert fetch.profile_needs("paper_slice") == (models, benchmarks)
    pub = published_scores(models, benchmarks)
    first = pub.iloc[0]
    store.write(tmp_path, store.Result(protocol=store.DIRECT, benchmark=first["benchmark"], model=first["model"],
                                       metric="acc_norm", score=first["published"] + first["published_stderr"]))
    table = compare(tmp_path, models, benchmarks)
    assert table.iloc[0]["z"] == pytest.approx(1.0) and table.iloc[0]["within"]
    assert table["ours"].isna().sum() == 5
    # docs/cluster.md's table of what paper_slice should reproduce is the published data
    guide = (paths.ROOT / "docs" / "cluster.md").read_text()
    for r in pub.itertuples():
        assert f"| {r.model} | {r.benchmark} | {r.published:.4f} | {r.published_stderr:.4f} |" in guide, r


@pytest.mark.slow
def test_a_unit_split_by_learning_rate_ends_where_one_job_would(world, tmp_path):
    """The preflight's split: one job per learning rate trains its unit and stops; the unit's own job
    then finds them finished, chooses and tests, with the score of a single job."""
    (whole,) = _specs(world, tmp_path / "whole", store.TBT, names=("t_a",))
    jobs.launch([whole], executor="local")
    expected = store.read(store.path_for(whole.store_root, store.TBT, "t_a", "tiny-m"))
    (spec,) = _specs(world, tmp_path / "split", store.TBT, names=("t_a",))
    first = spec.by_lr()[0]
    report = jobs.run_job(first)                                    # one rate alone: trained, nothing scored
    assert report.trained == ["t_a"] and report.scores == {} and first.done("t_a") and not spec.done("t_a")
    assert ft.read_unit(layout.unit_dir(spec.work_root, "tiny-m", "t_a", 3e-3)) is None
    results = jobs.launch([*spec.by_lr(), spec], executor="local")  # the other rate, then choose and test
    got = store.read(store.path_for(spec.store_root, store.TBT, "t_a", "tiny-m"))
    assert results == {"tiny-m": {"t_a": got.score}} and got.score == expected.score
    assert (got.provenance["lr"], got.provenance["epoch"]) == (expected.provenance["lr"], expected.provenance["epoch"])
    assert got.provenance["val_curves"] == expected.provenance["val_curves"]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["lora", "full"])
def test_a_unit_is_bit_identical_in_this_process_and_in_a_worker_beside_another(world, tmp_path, method):
    """Exact reproducibility: the same train-before-test unit run in the notebook's process and in a
    worker process while another worker trains another task ends with the same validation curve,
    choice, test score and saved weights, bit for bit (one torch thread, seeded data order and
    initialisation, the pinned CPU arithmetic)."""
    from lib.util import sha256_file

    recipe = ft.Recipe.default(**{**RECIPE, "method": method, "epochs": 2})
    outcomes = {}
    for layout_name, executor, names in (("in-process", "local", ("t_a",)), ("worker", "processes", ("t_a", "t_b"))):
        tmp = tmp_path / layout_name
        rows = tk.select(list(names), [world / "tasks"], min_train=1)
        selection = tk.selection_summary(rows, [world / "tasks"], False, 1, tk.SplitRule(caps={}), task_timeout=60.0)
        specs = jobs.plan(store.TBT, [str(world / "tiny-m")], selection, store_root=tmp / "store",
                          work_root=tmp / "work", recipe=recipe, bootstrap_iters=0, benchmarks_per_job=1)
        jobs.launch(specs, executor=executor, max_jobs=2, progress_every=3600)
        result = store.read(store.path_for(tmp / "store", store.TBT, "t_a", "tiny-m"))
        chosen = os.path.join(tmp / "work", result.provenance["adapter"])     # recorded relative to the work folder
        weights = sorted(p for p in os.listdir(chosen) if p.endswith(".safetensors"))
        units = [ft.read_unit(layout.unit_dir(tmp / "work", "tiny-m", "t_a", lr)) for lr in recipe.lrs]
        outcomes[layout_name] = (result.score, result.provenance["lr"], result.provenance["epoch"],
                                 result.provenance["val_curves"], [[p["train_loss"] for p in u.curve] for u in units],
                                 [sha256_file(os.path.join(chosen, w)) for w in weights])
    assert outcomes["in-process"] == outcomes["worker"]


KILLER = """
import json, os, signal, sys
from lib.pipeline import training
from lib.pipeline.launch import jobs
n, kill_at = 0, int(sys.argv[2])
step = training.optimizer_step

def counted(*args, **kwargs):                     # SIGKILL in the middle of an epoch, as a time limit would
    global n
    n += 1
    if n == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return step(*args, **kwargs)

training.optimizer_step = counted
jobs.run_job(json.loads(open(sys.argv[1]).read()))
"""


def _killed_run(spec, tmp, kill_at: int) -> int:
    """Run ``spec``'s job in a fresh process that SIGKILLs itself at its ``kill_at``-th optimiser step."""
    spec_file = tmp / "spec.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    done = subprocess.run([sys.executable, "-c", KILLER, str(spec_file), str(kill_at)], cwd=paths.ROOT,
                          capture_output=True, text=True, env={**os.environ, "TBT_TORCH_THREADS": "1"})
    return done.returncode


@pytest.mark.slow
@pytest.mark.parametrize("method,patience", [("lora", 0), ("full", 1)])
def test_a_unit_killed_mid_training_resumes_after_its_last_finished_epoch_bit_identical(
        world, tmp_path, method, patience):
    """Resume inside a unit: a job SIGKILLed in the middle of an epoch (twice: in the first learning
    rate's second epoch, then, resumed, in the second rate's second epoch) resumes after the last
    finished epoch and ends with the choice, test score, curves and chosen weights of a run that was
    never interrupted, bit for bit (dropout on, so the random states matter; with early stopping too).
    Its TensorBoard curves show every step once: what the killed run logged after its last finished
    epoch is dropped."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lib.util import sha256_file

    recipe = ft.Recipe.default(**{**RECIPE, "method": method, "epochs": 3, "lora_dropout": 0.1, "patience": patience,
                          "tensorboard": True,
                          "lrs": (1e-3, 3e-2),
                          "select_on": "metric" if patience else "loss"})   # accuracy on 6 documents plateaus
    rows = tk.select(["t_a"], [world / "tasks"], min_train=1)
    selection = tk.selection_summary(rows, [world / "tasks"], False, 1, tk.SplitRule(caps={}), task_timeout=60.0)

    def spec_in(tmp):
        (spec,) = jobs.plan(store.TBT, [str(world / "tiny-m")], selection, store_root=tmp / "store",
                            work_root=tmp / "work", recipe=recipe, bootstrap_iters=0)
        return spec

    def outcome(spec):
        result = store.read(store.path_for(spec.store_root, store.TBT, "t_a", "tiny-m"))
        chosen = os.path.join(spec.work_root, result.provenance["adapter"])     # relative to work/
        weights = sorted(p for p in os.listdir(chosen) if p.endswith(".safetensors"))
        units = [ft.read_unit(layout.unit_dir(spec.work_root, "tiny-m", "t_a", lr)) for lr in recipe.lrs]
        return (result.score, result.provenance["lr"], result.provenance["epoch"], result.provenance["val_curves"],
                [[(p["epoch"], p["train_loss"]) for p in u.curve] for u in units],
                [sha256_file(os.path.join(chosen, w)) for w in weights])

    whole = spec_in(tmp_path / "whole")
    jobs.launch([whole], executor="local")
    expected = outcome(whole)

    spec = spec_in(tmp_path / "killed")
    steps = 3                                                        # 24 training documents, batch 8
    assert _killed_run(spec, tmp_path, kill_at=steps + 2) == -9      # the first rate's second epoch
    lr1 = layout.unit_dir(spec.work_root, "tiny-m", "t_a", recipe.lrs[0])
    assert not (lr1 / layout.UNIT_FILE).exists() and (layout.resume_dir(lr1) / ft.STATE_JSON).exists()
    assert json.loads((layout.resume_dir(lr1) / ft.STATE_JSON).read_text())["epoch"] == 1
    n1 = len(expected[4][0])                                         # epochs the first rate runs
    assert _killed_run(spec, tmp_path, kill_at=(n1 - 1) * steps + steps + 2) == -9   # the second rate's epoch 2
    first = ft.read_unit(lr1)
    assert first.resumed_after == [1] and not layout.resume_dir(lr1).exists()
    jobs.launch([spec], executor="local")                            # and once more, to the end
    second = ft.read_unit(layout.unit_dir(spec.work_root, "tiny-m", "t_a", recipe.lrs[1]))
    assert second.resumed_after == [1]
    assert outcome(spec) == expected
    board = EventAccumulator(str(lr1))                               # two runs wrote it, the first killed in epoch 2
    board.Reload()
    assert len(list(lr1.glob("events.out.tfevents.*"))) == 2
    assert [e.step for e in board.Scalars("train/loss")] == list(range(1, n1 * steps + 1))
    assert [e.step for e in board.Scalars("validation/val_" + ("score" if patience else "loss"))] == \
        [e * steps for e in range(1, n1 + 1)]
    if patience:                                                     # early stopping was exercised
        assert min(len(c) for c in expected[4]) < recipe.epochs, expected[4]


TIMINGS = ("seconds", "train_seconds", "eval_seconds")       # wall-clock times: the one thing that may differ


def _without_timings(record):
    if isinstance(record, dict):
        return {k: _without_timings(v) for k, v in record.items() if k not in TIMINGS}
    return [_without_timings(v) for v in record] if isinstance(record, list) else record


@pytest.mark.slow
def test_tensorboard_curves_change_no_result_and_read_back_as_trained(world, tmp_path):
    """Issue 54: with ``tensorboard`` on, every learning-rate unit writes TensorBoard event files into
    its folder; the result file, each unit.json and the chosen adapter's weights are byte for byte
    those of a run without (wall-clock times aside), and TensorBoard's own reader finds the loss and
    learning rate of every step taken and the validation loss, mean training loss and kept epoch of
    every epoch, as unit.json has them. The setting is not part of a unit's key."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lib.util import sha256_file

    rows = tk.select(["t_a"], [world / "tasks"], min_train=1)
    selection = tk.selection_summary(rows, [world / "tasks"], False, 1, tk.SplitRule(caps={}), task_timeout=60.0)
    runs = {}
    for on in (False, True):
        recipe = ft.Recipe.default(**{**RECIPE, "epochs": 2, "lora_dropout": 0.1, "tensorboard": on})
        (spec,) = jobs.plan(store.TBT, [str(world / "tiny-m")], selection, store_root=tmp_path / str(on) / "store",
                            work_root=tmp_path / str(on) / "work", recipe=recipe, bootstrap_iters=0)
        jobs.launch([spec], executor="local")
        result = store.path_for(spec.store_root, store.TBT, "t_a", "tiny-m")
        units = [layout.unit_dir(spec.work_root, "tiny-m", "t_a", lr) for lr in recipe.lrs]
        chosen = Path(spec.work_root) / json.loads(result.read_text())["provenance"]["adapter"]
        runs[on] = {"spec": spec, "units": units,
                    "files": [_without_timings(json.loads(p.read_text())) for p in [result] + [
                        u / layout.UNIT_FILE for u in units]],
                    "weights": {p.name: sha256_file(p) for p in sorted(chosen.iterdir())}}
    assert runs[True]["spec"].config() == runs[False]["spec"].config()             # not part of the key
    assert runs[True]["files"] == runs[False]["files"] and runs[True]["weights"] == runs[False]["weights"]
    assert len(runs[True]["weights"]) >= 2
    assert not list((tmp_path / "False").rglob("events.out.tfevents.*"))

    steps = 3                                                          # 24 training documents, batch 8
    for lr, unit in zip(RECIPE["lrs"], runs[True]["units"]):
        record = json.loads((unit / layout.UNIT_FILE).read_text())
        board = EventAccumulator(str(unit))
        board.Reload()
        scalars = {tag: board.Scalars(tag) for tag in board.Tags()["scalars"]}
        assert set(scalars) == {"train/loss", "train/learning_rate", "train/epoch", "train/epoch_loss",
                                "validation/val_loss", "checkpoint/best_epoch"}
        assert [e.step for e in scalars["train/loss"]] == list(range(1, 2 * steps + 1))
        assert [e.value for e in scalars["train/learning_rate"]] == pytest.approx(
            [lr * (1 - s / (2 * steps)) for s in range(2 * steps)])             # the linear decay, step by step
        for tag, field in (("train/epoch", "epoch"), ("train/epoch_loss", "train_loss"), ("validation/val_loss",
                                                                                          "val_loss")):
            assert [e.step for e in scalars[tag]] == [steps, 2 * steps]      # each epoch's last step
            assert [e.value for e in scalars[tag]] == pytest.approx([p[field] for p in record["curve"]], rel=1e-6)
        mean = [sum(e.value for e in scalars["train/loss"][i * steps:(i + 1) * steps]) / steps for i in range(2)]
        assert mean == pytest.approx([p["train_loss"] for p in record["curve"]], rel=1e-5)
        assert scalars["checkpoint/best_epoch"][-1].value == record["best_epoch"]


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_a_deleted_or_corrupt_unit_json_redoes_exactly_that_unit(world, tmp_path, capfd, damage):
    """A finished (model, benchmark) whose learning-rate unit lost its unit.json is not finished: the
    next launch says which file and why, retrains that learning rate only (the other's record is
    untouched) and records the same score and both validation curves again."""
    (spec,) = _specs(world, tmp_path, store.TBT, names=("t_a",))
    jobs.launch([spec], executor="local", progress_every=3600)
    path = store.path_for(spec.store_root, store.TBT, "t_a", "tiny-m")
    before = store.read(path)
    units = {lr: layout.unit_dir(spec.work_root, "tiny-m", "t_a", lr) / layout.UNIT_FILE for lr in RECIPE["lrs"]}
    kept = units[3e-3].stat().st_mtime_ns
    if damage == "deleted":
        units[1e-3].unlink()
    else:
        units[1e-3].write_text('{"lr": 0.001, "curve": [')
    capfd.readouterr()
    assert not spec.done("t_a")
    jobs.launch([spec], executor="local", progress_every=3600)
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("redoing")]
    why = {"deleted": "lr=0.001 has no unit.json (interrupted, or the file was removed)",
           "corrupt": "lr=0.001/unit.json does not parse"}[damage]
    assert said == [f"redoing train_before_test tiny-m / t_a: tiny-m/t_a/{why}"], said
    assert units[3e-3].stat().st_mtime_ns == kept                          # the other unit was not redone
    after = store.read(path)
    assert ft.read_unit(units[1e-3].parent) is not None
    assert (after.score, after.provenance["val_curves"]) == (before.score, before.provenance["val_curves"])
    assert set(after.provenance["val_curves"]) == {"lr=0.001", "lr=0.003"}
