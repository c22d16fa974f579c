"""Run the notebooks of a profile, in order, through papermill: ``python -m runner.run PROFILE``.

Each stage writes ``outputs/<profile>/<stage>/`` and is skipped while nothing it depends on changed
(:mod:`runner.stagecache`); long stages also cache per unit of work, so an interrupted run resumes
where it stopped. One run per profile at a time (:func:`profile_lock`). ``make all`` runs
``published`` first (``--with-published``: the paper's results in minutes, before mini's hour),
downloading its data when it is missing, and a run of whole profiles starts by saying what runs and
for about how long (:mod:`runner.plan`). Whatever fails ends in one line that says what to do and
names the log file that holds the traceback (:mod:`runner.failures`), and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import importlib
import json
import os
import sys
import time
from pathlib import Path
from unittest import mock

from lib import paths
from lib.errors import UserError
from lib.notebook import lock_holder
from lib.params import LOCK_FILE, PREPARED_STAMP, ParamsError, Profile, check_stage, load_profile
from lib.pipeline.device import pin_arithmetic
from lib.util import FORCE_ENV, atomic_write_json, mark, read_json
from runner import plan
from runner.failures import Where, command_line, failure_line, quiet_after_ctrl_c, raised, write_log
from runner.kernel import Heartbeat, execute
from runner.stagecache import results_digest, stage_key, stale


def main(argv: list[str] | None = None) -> int:
    pin_arithmetic()          # before any torch import here or in the kernels and jobs the run starts
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m runner.run", description=__doc__.splitlines()[0])
    ap.add_argument("profile", help="params/<profile>.yaml")
    ap.add_argument("--stages", nargs="*", help="run only these stages (full name or number, e.g. 04)")
    ap.add_argument("--force", action="store_true", help="ignore cached stages")
    ap.add_argument("--wait", action="store_true", help="wait for another run of the profile instead of stopping")
    ap.add_argument("--with-published", action="store_true",
                    help="first run the `published` profile, the paper's own results in a few minutes "
                         "(downloading its data when it is missing), then this one")
    args = ap.parse_args(argv)
    where = Where()
    quiet_after_ctrl_c()
    try:
        prof = load_profile(args.profile)
        missing = ensure_published_data(f"[{args.profile}]") if needs_published_data(prof) else None
        if missing:
            raise paths.DataMissing(f"published data not found: {missing}")
        first = ["published"] if args.with_published and args.profile != "published" else []
        if not args.stages:
            print_plan([*first, args.profile], args.force)
        if first:                            # the paper's results first: minutes, where the profile takes an hour
            missing = ensure_published_data()
            if missing:
                print(f"[published] skipped: published data not found: {missing}", flush=True)
            else:
                run_profile("published", None, args.force, wait=args.wait, where=where)
        run_profile(args.profile, args.stages, args.force, wait=args.wait, where=where)
    except (Exception, KeyboardInterrupt) as exc:    # every failure: one line, the traceback in a log
        if isinstance(exc, UserError) and exc.plain:   # it explains itself (a mistyped key, a lock held): no log
            print(f"error: {exc}", file=sys.stderr)
            return 2
        line, log = failure_line(exc, where), write_log(exc, argv, where)
        told = f"traceback in {paths.show(log)}" if log else "no log file could be written"
        print(f"error: {line} ({told})", file=sys.stderr, flush=True)
        return 2
    return 0


def _forced(since: float | None):
    """While a stage runs under FORCE=1: its jobs redo the results and units written before ``since``
    (:func:`lib.layout.forced_out`); this stage only, so a later run in this process reuses them."""
    return mock.patch.dict(os.environ, {} if since is None else {FORCE_ENV: str(since)})


def run_profile(name: str, stages: list[str] | None = None, force: bool = False, wait: bool = False,
                where: Where | None = None) -> dict[str, dict]:
    """Run (or skip, when cached) the stages of profile ``name``; returns per-stage status/timing.
    Holds the profile's lock throughout (:func:`profile_lock`); ``where`` follows the stage running."""
    from lib.pipeline.launch.slurm import SUBMIT_ONLY_ENV, JobsSubmitted, check_profile
    from lib.stages import JOB_STAGES
    from runner.fetch import (  # here: the runner starts without pandas
        check_named_models,
        check_store_models,
    )

    pin_arithmetic()          # also for callers from Python: the kernels inherit it
    where = where if where is not None else Where()
    where.profile = name                          # a failure in prepare names the profile too
    prof = load_profile(name)                     # validates every stage before any work starts
    check_profile(prof)                           # and its Slurm resources against the partition's nodes
    selected = _select(prof, stages)
    # Hugging Face's per-file download/load bars drown the stage lines (our own progress lines stay).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if prof.offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    check_named_models(prof, selected)           # hub models: cached, or the hub answers (before prepare)
    modelled = _modelled(name)
    with profile_lock(name, wait=wait):
        t_start = time.time()
        run_prepare(prof)
        check_store_models(prof, selected)        # the models it names are among those prepare built
        log: dict[str, dict] = {}
        submit_only = bool(os.environ.get(SUBMIT_ONLY_ENV))
        for i, stage in enumerate(selected):
            # ---- is it cached, or waiting for jobs that `make submit` left running?
            where.profile, where.stage, where.index, where.n, where.units = name, stage, i, len(selected), None
            params = check_stage(prof, stage)
            key = stage_key(stage, params)
            out_dir = paths.stage_dir(name, stage)
            reason = "FORCE=1" if force else stale(out_dir, key)
            if reason is None:
                print(f"[{name}] {stage}: cached", flush=True)
                log[stage] = {"status": "cached", "seconds": 0.0}
                continue
            if submit_only and any(v["status"] == "submitted" for v in log.values()) and stage not in JOB_STAGES:
                print(f"[{name}] {stage}: waits for the submitted jobs", flush=True)
                log[stage] = {"status": "waits", "seconds": 0.0}
                continue
            # ---- run its notebook
            (out_dir / paths.STAGE_STAMP).unlink(missing_ok=True)
            print(f"[{name}] {stage}: running ({reason}) ...", flush=True)
            t0 = time.time()
            try:
                with _forced(t0 if force else None):
                    reads = execute(stage, params, out_dir, label=f"[{name}] {stage}", where=where)
            except Exception as exc:
                cls, text = raised(exc)
                if not (submit_only and cls is not None and issubclass(cls, JobsSubmitted)):
                    raise
                print(f"[{name}] {stage}: {text}", flush=True)
                log[stage] = {"status": "submitted", "seconds": time.time() - t0}
                continue
            # ---- stamp it: what it read and wrote, and how long it took
            dt = time.time() - t0
            read_json(out_dir / "summary.json", rebuild=paths.make_command(out_dir))    # it exists and parses
            mark(out_dir / paths.STAGE_STAMP, key, reads=reads, outputs=results_digest(out_dir), seconds=dt,
                 modelled_s=modelled.get(stage), finished=time.time())
            print(f"[{name}] {stage}: done in {dt:.1f}s -> {paths.show(out_dir)}", flush=True)
            log[stage] = {"status": "ran", "seconds": dt}
        total = time.time() - t_start
        where.profile = where.stage = where.units = None
        if any(v["status"] == "submitted" for v in log.values()):
            print(f"[{name}] submitted: `make status PROFILE={name}` follows the jobs; `make all PROFILE={name}` "
                  "re-attaches to them, waits and runs the rest", flush=True)
            return log
        # ---- the profile's pages: figures checked, leaderboard
        atomic_write_json(paths.profile_dir(name) / "run_log.json", {"stages": log, "total_seconds": total})
        from runner.contactsheet import review
        print(review(name), flush=True)          # the figures' checks and outputs/<profile>/figures.html
        from runner.leaderboard import review as leaderboard
        print(leaderboard(name), flush=True)     # outputs/<profile>/leaderboard.html
    print(f"[{name}] all stages finished in {total:.1f}s", flush=True)
    return log


# --------------------------------------------------------------------------- the stages and prepare hooks
def _select(prof: Profile, stages: list[str] | None) -> list[str]:
    if not stages:
        return list(prof.stages)
    chosen = []
    for s in stages:
        hits = [st for st in prof.stages if st == s or st.split("_")[0] == s]
        if not hits:
            raise ParamsError(f"{prof.path}: no stage {s!r}; stages: {list(prof.stages)}")
        chosen += hits
    return [s for s in prof.stages if s in chosen]


def run_prepare(prof: Profile) -> None:
    """Call each prepare hook as ``function(profile_name, **kwargs)``; each caches its own work."""
    for spec, kwargs in plan.hooks(prof):
        mod_name, _, func_name = spec.partition(":")
        try:
            func = getattr(importlib.import_module(mod_name), func_name)
        except (ImportError, AttributeError) as exc:
            raise ParamsError(f"{prof.path}: prepare hook {spec!r} cannot be loaded: {exc}") from None
        t0 = time.time()
        print(f"[{prof.name}] prepare {spec} ...", flush=True)
        with Heartbeat(f"[{prof.name}] prepare {spec}"):
            func(prof.name, **kwargs)
        print(f"[{prof.name}] prepare {spec} done in {time.time() - t0:.1f}s", flush=True)
    if prof.prepare:     # notebooks stepped through in JupyterLab check this before they start
        mark(paths.profile_dir(prof.name) / PREPARED_STAMP, prof.prepare, finished=time.time())


# --------------------------------------------------------------------------- the plan printed first
def _modelled(name: str) -> dict[str, float]:
    """Each stage's seconds on the reference machine by :mod:`runner.plan`'s model of the work, recorded
    in its stamp next to the seconds it took, so the next run's plan knows this machine's speed."""
    try:
        return {p.name: p.reference_s for p in plan.parts(name) if p.reference_s is not None}
    except (OSError, ValueError, KeyError, TypeError):          # an estimate never stops a run
        return {}


def print_plan(profiles: list[str], force: bool = False) -> None:
    """The lines :func:`runner.plan.plan_lines` gives for ``profiles``, the stages that are cached now
    counted as free (``force``: none is)."""
    def cached(profile: str, stage: str) -> bool:
        if force:
            return False
        prof = load_profile(profile)
        return stale(paths.stage_dir(profile, stage), stage_key(stage, check_stage(prof, stage))) is None

    try:
        lines = plan.plan_lines(profiles, cached, goal=os.environ.get("TBT_MAKE_GOAL") or "this run")
    except (OSError, ValueError, KeyError, TypeError) as exc:      # an estimate never stops a run
        lines = [f"[plan] no estimate ({type(exc).__name__}: {exc})"]
    for line in lines:
        print(line, flush=True)


# --------------------------------------------------------------------------- published data
def needs_published_data(prof: Profile) -> bool:
    """A profile that imports the published results (its prepare hook is ``runner.published``'s) or is
    placed among them (``reference: published``)."""
    return any(s.startswith("runner.published:") for s, _ in plan.hooks(prof)) or prof.reference == "published"


def ensure_published_data(label: str = "[published]") -> str | None:
    """None when the published data is present (after downloading it if need be); otherwise one
    line saying why it is not and how to provide it. With ``HARMONY_DATA`` unset and the data not in
    ``data/published/``, it is downloaded there (:mod:`runner.download`: pinned, sha256-checked) when
    the network answers."""
    from lib import data
    from runner import download

    if paths.has_data(data.REQUIRED):
        return None
    if os.environ.get(paths.DATA_ENV):
        return (f"{paths.DATA_ENV}={os.environ[paths.DATA_ENV]} does not contain {data.REQUIRED} (point it at a "
                f"copy of the published data, or `unset {paths.DATA_ENV}` so that `make all` downloads it into "
                f"{paths.show(paths.DATA_DOWNLOADS)})")
    if not download.reachable():
        return (f"it is not in {paths.show(paths.DATA_DOWNLOADS)} and {download.host()} cannot be reached to "
                f"download it (`export {paths.DATA_ENV}=<folder with a copy>`, e.g. ../shared/data, then run the same "
                "command again)")
    print(f"{label} downloading the published data into {paths.show(paths.DATA_DOWNLOADS)} "
          "(pinned commits, sha256-checked) ...", flush=True)
    try:
        download.download(log=lambda line: print(f"{label}   {line}", flush=True))
    except data.DataError as exc:
        return str(exc)
    return None


# --------------------------------------------------------------------------- one run per profile
class RunLocked(UserError, RuntimeError):
    """Another run of the profile holds its lock; the message names it."""
    plain = True


_held: dict[Path, int] = {}      # lock files this process holds -> depth (run_profile may nest)


@contextlib.contextmanager
def profile_lock(profile: str, wait: bool = False, poll: float = 1.0):
    """Hold ``outputs/<profile>/.lock`` for the duration; a second holder is refused with
    :class:`RunLocked` (or, with ``wait``, waits). ``flock`` locks die with their process, so a
    killed run never leaves the profile locked."""
    path = paths.profile_dir(profile) / LOCK_FILE
    if _held.get(path):
        _held[path] += 1
        try:
            yield
        finally:
            _held[path] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = lock_holder(path)
                if not wait:
                    raise RunLocked(f"profile {profile!r} is being run by another process ({holder}): wait for "
                                    "it to finish, or rerun with WAIT=1 (`--wait`) to queue behind it") from None
                if not said:
                    print(f"[{profile}] waiting for the run that holds {paths.show(path)} ({holder}) ...", flush=True)
                    said = True
                time.sleep(poll)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "command": command_line(),
                                 "started": datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")}).encode())
        _held[path] = 1
        try:
            yield
        finally:
            _held.pop(path, None)
    finally:
        os.close(fd)         # releases the lock


if __name__ == "__main__":
    sys.exit(main())
