"""``make status PROFILE=p``: where a profile's Slurm jobs stand, in a few lines, from the results
store and the scheduler: units done, running, pending (with Slurm's reason) and failed (with the
command that retries each), per stage that submits jobs.

A *unit* here is one (model, benchmark) of a job: done when its result of this configuration is in
the store, otherwise running, pending or failed as its job is (a job that left the queue without
finishing it failed; its failure record says why).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from lib import layout, paths, store
from lib.pipeline.launch import slurm
from lib.pipeline.launch.outcome import retry_command
from lib.pipeline.spec import JobSpec, code_change
from lib.stages import BY_NAME, JOB_STAGES


def older_code(store_root: str | Path) -> dict[str, int]:
    """{why: how many} of the fine-tuned or evaluated results in a store that other code than today's
    computed (:func:`lib.pipeline.spec.code_change`): what ``make status`` lists and the next run redoes."""
    found: dict[str, int] = {}
    for path in store.iter_paths(store_root) if Path(store_root).is_dir() else ():
        try:
            config = store.read(path).provenance.get("config")
        except store.StoreError:
            continue                                   # a damaged result: the run names it when it redoes it
        why = code_change(config.get("code")) if isinstance(config, dict) else ""
        if why:
            found[why] = found.get(why, 0) + 1
    return found


def stage_status(folder: Path) -> dict:
    """Counts of one stage's recorded jobs' units: ``done``, ``running``, ``pending`` (with
    ``reasons``: {reason: units}), ``failed`` (with ``failures``: lines), ``jobs`` (ids still queued),
    ``scheduler`` (None, or why it did not answer); None when nothing was submitted from ``folder``."""
    entries = slurm.Record(folder).read()
    if not entries:
        return None
    try:
        found, down = slurm.states([e["job_id"] for e in entries.values()]), None
    except slurm.SchedulerDown as exc:
        found, down = {}, str(exc)
    out = {"done": 0, "running": 0, "pending": 0, "failed": 0, "reasons": Counter(), "failures": [], "jobs": [],
           "scheduler": down, "unknown": 0}
    for entry in entries.values():
        spec, jid = JobSpec.from_dict(entry["spec"]), entry["job_id"]
        st = found.get(jid)
        if st is not None and st.queued:
            out["jobs"].append(jid)
        for bench in spec.benchmarks:
            if spec.done(bench):
                out["done"] += 1
            elif st is None:
                out["unknown"] += 1
            elif st.queued and st.state == "PENDING":
                out["pending"] += 1
                out["reasons"][st.reason or "None"] += 1
            elif st.queued:
                out["running"] += 1
            else:
                out["failed"] += 1
                record = layout.failure_path(spec.work_root, spec.protocol, spec.model, bench, spec.only_lr)
                retry = (retry_command(spec, bench, spec.only_lr) if record.exists()
                         else "run the stage again (make all)")
                out["failures"].append(f"  FAILED {spec.model} / {bench}: job {jid} {st.state}; retry: {retry}")
    return out


def lines(profile: str) -> list[str]:
    """The report of ``make status``: a line per stage that submits jobs, then the failed units."""
    from lib import params

    prof = params.load_profile(profile)
    work = paths.work_dir(profile)
    out, failures = [], []
    for stage in JOB_STAGES:
        if stage not in prof.stages:
            continue
        st = stage_status(layout.submitit_dir(work, stage))
        finished = (paths.stage_dir(profile, stage) / paths.STAGE_STAMP).exists()
        executor = prof.params(stage).get("executor", "local")
        if st is None and not finished and executor != "slurm":      # it ran, or runs, in a process of this machine
            protocol = BY_NAME[stage].protocol
            done = len(list((paths.store_dir(profile) / store.slug(protocol)).glob("*/*.json")))
            out.append(f"{profile} {stage}: not finished; {done} units in the store so far (executor: {executor}, "
                       f"not Slurm): `{paths.make_command(profile)}` resumes it, finished units are kept")
            continue
        if st is None:
            out.append(f"{profile} {stage}: " + ("finished" if finished else
                                                 f"nothing submitted (`make submit PROFILE={profile}`)"))
            continue
        total = st["done"] + st["running"] + st["pending"] + st["failed"] + st["unknown"]
        reasons = ", ".join(f"{r}: {n}" for r, n in st["reasons"].most_common())
        parts = [f"{st['done']} done", f"{st['running']} running",
                 f"{st['pending']} pending" + (f" ({reasons})" if reasons else ""), f"{st['failed']} failed"]
        parts += [f"{st['unknown']} unknown"] if st["unknown"] else []
        text = f"{profile} {stage}: {total} units: " + ", ".join(parts)
        if st["jobs"]:
            text += f"; jobs in the queue: {', '.join(st['jobs'][:6])}" + (" ..." if len(st["jobs"]) > 6 else "")
        if finished:
            text += "; stage finished"
        out.append(text)
        if st["scheduler"]:
            out.append(f"  the scheduler does not answer ({st['scheduler']}): units counted from the store only")
        for reason in st["reasons"]:
            hint = slurm.JobState("", "PENDING", reason).stuck
            if hint:
                out.append(f"  pending because {reason}: {hint}")
        failures += st["failures"]
    out += failures
    for why, n in older_code(paths.store_dir(profile)).items():
        out.append(f"{profile}: {n} results {why}; `{paths.make_command(profile)}` redoes them")
    if any("running" in line or "pending" in line for line in out) and not failures:
        out.append(f"when they have finished: `make all PROFILE={profile}` (it re-attaches to jobs still queued, "
                   "waits, and runs the analyses)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.status", description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    args = ap.parse_args(argv)
    print("\n".join(lines(args.profile)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
