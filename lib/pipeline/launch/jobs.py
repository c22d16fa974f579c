"""The job grid: every (protocol, model, benchmark, learning rate) unit, resumable, run locally or on Slurm.

A *job* is one model with a list of benchmarks: the base model is loaded once per job and kept
in memory across benchmarks, learning rates and epochs (adapters are attached and removed). Each
(model, benchmark) runs under its lock (:mod:`lib.pipeline.launch.locks`), so a second job for the
same unit skips it instead of deleting its work; a benchmark that fails does not stop the others,
and every failure is reported at the end with the command that retries it (:func:`launch`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from ... import layout, store
from ...progress import Progress, tell
from ...util import did_you_mean
from .. import evaluate as ev
from .. import finetune as ft
from .. import protocols
from .. import tasks as tk
from ..device import free_memory, pin_arithmetic
from ..spec import JobSpec, planned_benchmarks
from . import slurm
from .locks import UnitBusy, UnitLock
from .outcome import JobError, JobOutcome, record_failure, summarise

EXECUTORS = ("local", "processes", "slurm", "submitit_local")
POLL_SECONDS = {"local": 2.0, "processes": 2.0, "submitit_local": 2.0, "slurm": 30.0}   # job state checks


def unit_lock(spec: JobSpec, benchmark: str) -> UnitLock:
    """The lock a job holds while it works on one of its benchmarks (a job of one learning rate:
    on that rate of it)."""
    return UnitLock(layout.lock_path(spec.work_root, spec.protocol, spec.model, benchmark, spec.only_lr))


# ---------------------------------------------------------------------------------------------
# planning (validates everything before any training)


def plan(protocol: str, models: list[str], selection: dict, *, store_root: str | Path, work_root: str | Path,
         recipe: ft.Recipe | None = None, chat_template: bool = False, eval_batch_size: int | str = 1,
         bootstrap_iters: int = 1000, benchmarks_per_job: int = 0, dtype: str = "float32",
         add_bos_token: bool = True, max_gen_toks: int = 256, num_fewshot: int = 0,
         train_fraction: float = 1.0) -> list[JobSpec]:
    """One :class:`JobSpec` per model (and chunk of ``benchmarks_per_job`` benchmarks, 0 = all) of
    notebook 01's ``selection`` (so 02 and 03 test on the same documents). ``chat_template`` applies
    to instruction-tuned models only. Unknown models, tasks or dtype raise here, before any training.
    """
    from ... import metadata

    trains = store.base_protocol(protocol) == store.TBT
    if trains and recipe is None:
        raise ValueError("plan: train-before-test needs a recipe")
    if dtype not in ev.DTYPES:
        raise ev.ModelError(f"dtype must be one of {list(ev.DTYPES)}, got {dtype!r}{did_you_mean(dtype, ev.DTYPES)}")
    names = planned_benchmarks(protocol, selection)
    if not names:
        raise tk.TaskError("no benchmarks selected (notebook 01 selected none)")
    if not models:
        raise ev.ModelError("no models given")
    include = tk.selected_include_paths(selection)
    manager = tk.task_manager(include, bool(selection.get("include_defaults")))
    tk.check_names(manager, names)
    for name, row in (selection.get("tasks") or {}).items():
        if name in names and row.get("count_source") == "dataset":
            tk.validate_for_training(tk.TaskInfo.from_dict(row))
    rule = tk.SplitRule.from_selection(selection)
    resolved = [ev.resolve_model(m, store_root) for m in models]
    seen = {}
    for (name, _), entry in zip(resolved, models):
        if name in seen:
            raise ev.ModelError(f"models {seen[name]!r} and {entry!r} get the same name {name!r}")
        seen[name] = entry
    chunk = benchmarks_per_job or len(names)
    specs = []
    for name, source in resolved:
        try:
            instruct = metadata.model_info(name, store_root).instruct
        except metadata.MetadataError:
            instruct = False
        for i in range(0, len(names), chunk):
            specs.append(JobSpec(protocol=protocol, model=name, source=source, benchmarks=names[i:i + chunk],
                                 include_paths=[str(p) for p in include],
                                 include_defaults=bool(selection.get("include_defaults")),
                                 store_root=str(store_root), work_root=str(work_root),
                                 recipe=recipe if trains else None, num_fewshot=num_fewshot,
                                 train_fraction=train_fraction,
                                 splits=rule.to_dict(), chat_template=bool(chat_template and instruct),
                                 dtype=dtype, add_bos_token=add_bos_token, max_gen_toks=max_gen_toks,
                                 eval_batch_size=eval_batch_size, bootstrap_iters=bootstrap_iters,
                                 task_timeout=float(selection.get("task_timeout", 300.0))))
    return specs


# ---------------------------------------------------------------------------------------------
# running one job


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_job(spec: JobSpec | dict, progress=None) -> JobOutcome:
    """Run the pending benchmarks of one job, each under its lock; one that fails does not stop
    the others. Returns its :class:`JobOutcome`; every failure is also written to ``<work>/failed/``
    with its traceback and a spec that retries it."""
    spec = JobSpec.from_dict(spec) if isinstance(spec, dict) else spec
    say = progress or _log
    outcome = JobOutcome.of(spec)
    pending = spec.pending()
    if not pending:
        return outcome
    try:
        manager = tk.task_manager(spec.include_paths, spec.include_defaults)
        model, tokenizer = ev.load_model(spec.source, dtype=spec.dtype)          # once per job
    except Exception as exc:  # noqa: BLE001 - every benchmark of the job fails with the reason
        for bench in pending:
            outcome.failed[bench] = record_failure(spec, bench, exc)
        return outcome
    for bench in pending:
        try:
            with unit_lock(spec, bench):
                if spec.done(bench):                      # finished by another job meanwhile
                    continue
                score = protocols.run(spec, manager, model, tokenizer, bench, say)
        except UnitBusy as busy:
            outcome.busy[bench] = str(busy)
            say(f"{spec.model} / {bench}: skipped, running elsewhere ({busy})")
            continue
        except Exception as exc:  # noqa: BLE001 - recorded, reported at the end of the launch
            outcome.failed[bench] = record_failure(spec, bench, exc)
            say(f"{spec.model} / {bench}: FAILED ({outcome.failed[bench]})")
            free_memory()
            continue
        layout.failure_path(spec.work_root, spec.protocol, spec.model, bench, spec.only_lr).unlink(missing_ok=True)
        if score is None:                                 # a job of one learning rate: its unit is trained
            outcome.trained.append(bench)
            say(f"{spec.model} / {bench}: {layout.lr_name(spec.only_lr)} trained")
            continue
        outcome.scores[bench] = score
        say(f"{spec.model} / {bench}: {score:.4f}")
    return outcome


# ---------------------------------------------------------------------------------------------
# progress: units done, counted from the files the jobs write


class UnitCounter:
    """Counts the units of ``specs`` finished since it was made: for train-before-test one unit
    per learning rate (its ``unit.json``) plus one for the test score (the store result); for
    direct evaluation one per benchmark. A file that existed at the start counts only once it is
    rewritten (a unit of another configuration is redone)."""

    def __init__(self, specs: list[JobSpec]):
        self.paths: list[Path] = []
        for spec in specs:
            for bench in spec.pending():
                if spec.trains:
                    for lr in (spec.recipe.lrs if spec.only_lr is None else (spec.only_lr,)):
                        udir = layout.unit_dir(spec.work_root, spec.model, bench, lr, spec.protocol)
                        if ft.read_unit(udir, spec.config(lr)) is None:
                            self.paths.append(udir / layout.UNIT_FILE)
                if spec.only_lr is None:
                    self.paths.append(store.path_for(spec.store_root, spec.protocol, bench, spec.model))
        self.start = {p: self._mtime(p) for p in self.paths}

    @staticmethod
    def _mtime(path: Path) -> float | None:
        try:
            return path.stat().st_mtime_ns
        except FileNotFoundError:
            return None

    @property
    def total(self) -> int:
        return len(self.paths)

    def done(self) -> int:
        return sum(1 for p in self.paths if (m := self._mtime(p)) is not None and m != self.start[p])


# ---------------------------------------------------------------------------------------------
# launching


def default_max_jobs() -> int:
    """The CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:      # not on Linux
        return os.cpu_count() or 1


def launch(specs: list[JobSpec], executor: str = "local", resources: dict | None = None,
           log_folder: str | Path | None = None, max_jobs: int = 0, max_array: int = 1000,
           progress_every: float = 15.0, max_requeues: int = slurm.MAX_REQUEUES) -> dict[str, dict]:
    """Run the jobs and collect every outcome; returns {model: {benchmark: score}} of what they
    finished, or raises :class:`JobError` listing every unit that failed or is still running
    elsewhere, each with the command that retries it (after all jobs have ended).

    ``local``: in this process, one job after another. ``processes``: ``max_jobs`` worker processes
    (0: one per CPU core) that live for the whole launch and take the jobs in turn, so torch,
    transformers, peft and lm-eval are imported once per worker instead of once per job (about 7
    CPU seconds each); their output goes to ``pool-<pid>.log`` in the log folder.
    ``submitit_local``: a subprocess per job through submitit's ``LocalExecutor``, at most
    ``max_jobs`` at a time, each with submitit's time limit and log files.
    ``slurm``: ``submitit.AutoExecutor`` with ``resources`` (e.g. ``slurm_partition``,
    ``gpus_per_node``, ``timeout_min``, ``mem_gb``, ``cpus_per_task``,
    ``slurm_array_parallelism``), as job arrays of at most ``max_array`` tasks (clusters cap an
    array's size, often at 1,001; the cluster's own ``MaxArraySize`` wins when it is smaller). Jobs
    with nothing pending are not submitted, nor jobs whose every pending unit is locked by a live
    job elsewhere. A console line reports progress every ``progress_every`` seconds.

    On Slurm a job stopped at its time limit (at most ``max_requeues`` times) or preempted is
    requeued and resumes; a later launch re-attaches to the recorded jobs still queued or running.
    With ``TBT_SUBMIT_ONLY=1`` (``make submit``) it raises :class:`lib.pipeline.launch.slurm.JobsSubmitted`
    instead of waiting.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}{did_you_mean(executor, EXECUTORS)}; "
                         f"expected one of {list(EXECUTORS)}")
    submit_only = bool(os.environ.get(slurm.SUBMIT_ONLY_ENV))
    if submit_only and executor != "slurm":
        raise JobError(f"`make submit` needs executor: slurm (this stage's executor is {executor!r}); "
                       "`make all` runs it and waits")
    run = dict(executor=executor, resources=resources or {}, log_folder=log_folder, max_jobs=max_jobs,
               max_array=max_array, progress_every=progress_every, max_requeues=max_requeues)
    split = [s for s in specs if s.only_lr is not None]     # units the preflight split by learning rate
    outcomes = _launch_wave(split, **run) if split else []
    unfinished = {(r.model, b) for r in outcomes for b in (*r.failed, *r.busy)}
    rest = []
    for spec in (s for s in specs if s.only_lr is None):      # a split unit chooses and tests once its rates ran
        keep = [b for b in spec.benchmarks if (spec.model, b) not in unfinished]
        if keep:
            rest.append(replace(spec, benchmarks=keep))
    outcomes += _launch_wave(rest, **run)
    return summarise(outcomes, specs)


def _launch_wave(specs: list[JobSpec], executor: str, resources: dict, log_folder, max_jobs: int, max_array: int,
                 progress_every: float, max_requeues: int = slurm.MAX_REQUEUES) -> list[JobOutcome]:
    """Run ``specs`` side by side (:func:`launch`); one outcome per job."""
    todo, outcomes = [], []
    folder = Path(log_folder or layout.submitit_dir(specs[0].work_root)) if specs else None
    queued = slurm.queued_jobs(specs, folder) if executor == "slurm" and specs else {}
    redone: dict[str, list[str]] = {}        # why a finished unit is redone -> which
    for spec in specs:
        why = {b: spec.unfinished(b) for b in spec.benchmarks}
        pending = [b for b in spec.benchmarks if why[b] is not None]
        for b in pending:
            if why[b]:                       # older code, FORCE=1, or files that went missing or were damaged
                redone.setdefault(why[b], []).append(f"{spec.protocol} {spec.model} / {b}")
        if not pending:
            continue
        if slurm.spec_key(spec) in queued:             # its job is queued or running: re-attach to it
            todo.append(spec)
            continue
        held = {b: unit_lock(spec, b) for b in pending}
        busy = {b: lk.describe(lk.holder()) for b, lk in held.items()
                if lk.holder() is not None and lk.why_stale() is None}
        if len(busy) == len(pending):                  # all of it runs elsewhere: do not resubmit
            outcomes.append(JobOutcome.of(spec, busy=busy))
        else:
            todo.append(spec)
    for why, units in redone.items():
        tell(f"redoing {units[0]}: {why}" if len(units) == 1 else
             f"redoing {len(units)} units ({units[0]}, ...): {why}")
    if todo:
        counter = UnitCounter(todo)
        what, unit = "learning rates of split units" if todo[0].only_lr is not None else f"{len(todo)} jobs", "units"
        if todo[0].trains and todo[0].only_lr is None:   # make status's unit: a (model, benchmark)
            units = sum(len(spec.pending()) for spec in todo)
            n_lrs = sorted({len(spec.recipe.lrs) for spec in todo})     # a reduced budget beside the full: 1 and 4
            what += f", {units} units of {' or '.join(map(str, n_lrs))} learning rates and a test"
            unit = "steps"
        label = " + ".join(dict.fromkeys(spec.protocol for spec in todo))
        with Progress(total=counter.total, label=f"{label} ({what})", every=progress_every,
                      unit=unit) as bar:
            if executor == "local":
                outcomes += _run_local(todo, counter, bar)
            elif executor == "processes":
                outcomes += _run_processes(todo, folder, max_jobs, counter, bar)
            elif executor == "slurm":
                outcomes += slurm.run(run_job, todo, queued, resources, folder, max_array, max_requeues, counter, bar,
                                     poll=POLL_SECONDS["slurm"])
            else:
                outcomes += _run_submitit(todo, executor, resources, folder, max_jobs, counter, bar)
            bar.update(counter.done())
    return outcomes


def _run_local(todo: list[JobSpec], counter: UnitCounter, bar: Progress) -> list[JobOutcome]:
    stop = threading.Event()

    def watch():
        while not stop.wait(POLL_SECONDS["local"]):
            bar.update(counter.done())

    watcher = threading.Thread(target=watch, daemon=True, name="progress")
    watcher.start()
    try:
        return [run_job(spec) for spec in todo]
    finally:
        stop.set()
        watcher.join(timeout=5)


def _run_submitit(todo: list[JobSpec], executor: str, resources: dict, folder: Path, max_jobs: int,
                  counter: UnitCounter, bar: Progress) -> list[JobOutcome]:
    import submitit

    ex = submitit.LocalExecutor(folder=folder)      # it knows only generic parameters
    res = {k: v for k, v in resources.items() if k in ("timeout_min", "gpus_per_node", "cpus_per_task",
                                                       "nodes", "tasks_per_node", "visible_gpus")}
    if res:
        ex.update_parameters(**res)
    return _wait(todo, lambda spec: ex.submit(run_job, spec), counter, bar, max_jobs or default_max_jobs(),
                 poll=POLL_SECONDS[executor])


# ---------------------------------------------------------------------------------------------
# the process pool


PR_SET_PDEATHSIG = 1        # prctl(2): the signal this process gets when its parent dies (Linux)


def die_with_parent(parent: int, poll: float = 1.0) -> None:
    """End this process when its parent dies, however it dies (a SIGKILL, the out-of-memory killer):
    on Linux the kernel sends SIGKILL at once (``prctl(PR_SET_PDEATHSIG)``); everywhere a thread
    checks every ``poll`` seconds that the parent is still the one that started it. A pool worker
    orphaned by a hard kill would otherwise keep training, and its memory, for as long as it lives.
    ``parent``: the process id of the parent that started it (the pool's owner; the spawning thread
    of the pool is the owner's main thread, which lives as long as the pool)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:             # it died before the line above took effect
        os._exit(1)

    def watch():
        while os.getppid() == parent:
            time.sleep(poll)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="die-with-parent").start()


def _pool_worker(log_folder: str, parent: int) -> None:
    """Initialiser of a ``processes`` worker: dies with the process that started it, its output into
    its own log file."""
    die_with_parent(parent)
    folder = Path(log_folder)
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / f"pool-{os.getpid()}.log", "a", buffering=1)   # noqa: SIM115 - the worker's lifetime
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log


def _pool_job(spec: JobSpec) -> JobOutcome:
    try:
        return run_job(spec)
    finally:
        free_memory()


def worker_pool(workers: int, folder: Path):
    """The ``processes`` executor's pool: ``workers`` spawned processes that die with this one."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_pool_worker, initargs=(str(folder), os.getpid()))


def _run_processes(todo: list[JobSpec], folder: Path, max_jobs: int, counter: UnitCounter,
                   bar: Progress) -> list[JobOutcome]:
    with worker_pool(min(max_jobs or default_max_jobs(), len(todo)), folder) as pool:
        return _wait(todo, lambda spec: pool.submit(_pool_job, spec), counter, bar, len(todo),
                     poll=POLL_SECONDS["processes"])


def _wait(queue: list[JobSpec], submit, counter: UnitCounter, bar: Progress, limit: int,
          poll: float = 2.0) -> list[JobOutcome]:
    """Start the specs of ``queue`` with ``submit``, at most ``limit`` at once, and wait for them.
    Returns one outcome per job (a failed job: all its pending benchmarks failed, with its log file)."""
    outcomes, running, queue = [], [], list(queue)
    while running or queue:
        while queue and len(running) < limit:
            spec = queue.pop(0)
            running.append((spec, submit(spec)))
        finished = [(s, j) for s, j in running if j.done()]
        for spec, job in finished:
            running.remove((spec, job))
            outcomes.append(JobOutcome.died(spec, job))
        bar.update(counter.done())
        if not finished:
            time.sleep(poll)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    """``python -m lib.pipeline.launch.jobs SPEC.json``: run a JobSpec, a list of them, or a failure record."""
    ap = argparse.ArgumentParser(prog="python -m lib.pipeline.launch.jobs", description=main.__doc__)
    ap.add_argument("spec", help="a JSON file holding one JobSpec, a list of them, or a failure record")
    args = ap.parse_args(argv)
    pin_arithmetic()          # the arithmetic of `make all`, before torch loads (lib.pipeline.device)
    data = json.loads(Path(args.spec).read_text())
    items = data if isinstance(data, list) else [data.get("spec", data) if "reason" in data else data]
    failed = 0
    for item in items:
        outcome = run_job(JobSpec.from_dict(item), progress=_log)
        failed += len(outcome.failed) + len(outcome.busy)
        print(json.dumps(outcome.to_dict()), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
