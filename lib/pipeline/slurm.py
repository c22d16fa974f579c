"""The Slurm scheduler, asked directly: its limits, the state of each job (with the reason it
pends), and the record of what a stage submitted, so that a run can be left and come back to.

submitit writes the job scripts, submits them and runs our function inside the job
(:mod:`lib.pipeline.jobs`); this module is what the waiting process, ``make status`` and the
preflight need from the scheduler itself:

- :func:`limits`: the partition's real time limit and the cluster's ``MaxArraySize``
  (``scontrol``), so the preflight does not trust ``timeout_min`` and ``max_array`` alone;
- :func:`states`: every job's state and reason, from ``squeue`` while it is queued or running and
  from ``sacct`` once it has left the queue; :class:`SchedulerDown` when neither answers (the
  waiting process keeps polling);
- :class:`Record`: ``submitted.json`` beside submitit's logs, one entry per job spec with its job
  id, written the moment ``sbatch`` returns, so a process that dies while waiting loses nothing
  and the next run re-attaches to the jobs instead of submitting them again.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..util import atomic_write_json

RECORD_FILE = "submitted.json"
# states of a job that is still the scheduler's business (squeue lists it); anything else is final
QUEUED = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING", "SUSPENDED",
          "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
# reasons a job pends that no waiting will fix without someone acting, with what to do
STUCK = {
    "ReqNodeNotAvail": "its node is drained or down: an administrator resumes it "
                       "(`scontrol update NodeName=<node> State=RESUME`)",
    "DOWN, DRAINED": "the nodes it needs are drained or down: an administrator resumes them "
                     "(`scontrol update NodeName=<node> State=RESUME`)",
    "PartitionDown": "the partition is down: an administrator sets it up "
                     "(`scontrol update PartitionName=<p> State=UP`)",
    "PartitionInactive": "the partition is inactive: an administrator sets it up",
    "PartitionTimeLimit": "timeout_min exceeds the partition's time limit: cancel (`scancel <job>`), lower "
                          "timeout_min and run again",
    "JobHeldUser": "it is held: `scontrol release <job>`",
    "JobHeldAdmin": "an administrator holds it: ask them, or `scancel <job>` and run again",
    "QOSMaxJobsPerUserLimit": "your QOS allows no more running jobs: they start as others finish",
    "AssocGrpGRES": "your account's GPU allowance is used up: they start as others finish",
    "InvalidAccount": "the account is not valid: set slurm_account in resources",
    "InvalidQOS": "the QOS is not valid: set slurm_qos in resources",
    "BadConstraints": "no node meets the request (memory, CPUs, GPUs): change resources",
}


class SchedulerDown(RuntimeError):
    """The scheduler's commands are missing or do not answer (the message says which and why)."""


def _run(cmd: list[str], timeout: float = 30.0) -> str:
    if shutil.which(cmd[0]) is None:
        raise SchedulerDown(f"{cmd[0]} is not installed here (no Slurm on this machine: `make slurm-up` starts a "
                            "one-machine cluster)")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SchedulerDown(f"{cmd[0]} did not answer within {timeout:.0f} s") from None
    if out.returncode != 0:
        first = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[0]
        raise SchedulerDown(f"{cmd[0]}: {first}")
    return out.stdout


def available() -> str | None:
    """None when a Slurm controller answers here, else why not (one line)."""
    try:
        _run(["scontrol", "ping"], timeout=15)
    except SchedulerDown as exc:
        return str(exc)
    return None


# --------------------------------------------------------------------------- limits
def minutes(text: str) -> float | None:
    """Slurm's time formats in minutes (None when unlimited): ``M``, ``M:S``, ``H:M:S``, ``D-H``,
    ``D-H:M``, ``D-H:M:S``."""
    text = text.strip()
    if text.upper() in {"UNLIMITED", "INFINITE", "NONE", ""}:
        return None
    if "-" in text:
        days, rest = text.split("-", 1)
        h, m, s = ([int(p) for p in rest.split(":")] + [0, 0])[:3]
        return int(days) * 1440 + h * 60 + m + s / 60
    parts = [int(p) for p in text.split(":")]
    if len(parts) == 3:
        return parts[0] * 60 + parts[1] + parts[2] / 60
    return parts[0] + (parts[1] / 60 if len(parts) == 2 else 0)


def _fields(line: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", line))


@dataclass
class Limits:
    partition: str
    max_time_min: float | None      # None: no time limit
    max_array_size: int | None      # tasks one array may hold (array indices 0 .. MaxArraySize - 1)


def limits(partition: str | None = None) -> Limits:
    """The partition's time limit (the default partition when ``partition`` is None) and the
    cluster's ``MaxArraySize``, from ``scontrol`` (:class:`SchedulerDown` when it does not answer,
    ValueError for an unknown partition)."""
    config = _run(["scontrol", "show", "config"])
    size = re.search(r"^MaxArraySize\s*=\s*(\d+)", config, re.M)
    lines = _run(["scontrol", "show", "partition", "--oneliner"]).splitlines()
    parts = [_fields(line) for line in lines if line.strip()]
    names = [p.get("PartitionName") for p in parts]
    if partition is None:
        chosen = next((p for p in parts if p.get("Default") == "YES"), None)
        if chosen is None:
            raise ValueError(f"the cluster has no default partition: set slurm_partition in resources ({names})")
    else:
        chosen = next((p for p in parts if p.get("PartitionName") == partition), None)
        if chosen is None:
            raise ValueError(f"partition {partition!r} does not exist on this cluster; partitions: {names}")
    return Limits(partition=chosen["PartitionName"], max_time_min=minutes(chosen.get("MaxTime", "UNLIMITED")),
                  max_array_size=int(size.group(1)) if size else None)


# --------------------------------------------------------------------------- job states
@dataclass
class JobState:
    job_id: str
    state: str            # RUNNING, PENDING, COMPLETED, CANCELLED, TIMEOUT, ... ; UNKNOWN when nobody knows
    reason: str = ""      # why it pends (squeue's %r), "" when it runs or ended
    queued: bool = False  # still in the scheduler's queue
    restarts: int = 0     # times it was requeued (time limits, preemptions)

    @property
    def stuck(self) -> str | None:
        """What to do when it pends for a reason that waiting will not fix, else None."""
        if self.state != "PENDING":
            return None
        return next((what for key, what in STUCK.items() if key in self.reason), None)


def _expand(job_id: str) -> list[str]:
    """``123_[0-2,5]`` -> ``123_0 123_1 123_2 123_5`` (sacct and squeue show pending arrays so)."""
    m = re.fullmatch(r"(\d+)_\[([\d,\-%]+)\]", job_id)
    if not m:
        return [job_id]
    out = []
    for part in m.group(2).split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        out += [f"{m.group(1)}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def states(job_ids: list[str]) -> dict[str, JobState]:
    """The state of each of ``job_ids`` (``123`` or array tasks ``123_4``): squeue for those still
    queued, sacct for the rest (UNKNOWN where accounting has no record). Raises
    :class:`SchedulerDown` when squeue does not answer."""
    wanted = set(job_ids)
    if not wanted:
        return {}
    out = _run(["squeue", "--noheader", "--array", f"--user={getpass.getuser()}",
                "--Format=JobArrayID:40|,State:24|,Reason:300|,RestartCnt:8"])
    found: dict[str, JobState] = {}
    for line in out.splitlines():
        if line.count("|") < 3:
            continue
        jid, state, reason, restarts = (x.strip() for x in line.split("|")[:4])
        for one in _expand(jid):
            if one in wanted:
                found[one] = JobState(one, state, "" if reason == "None" else reason, queued=True,
                                      restarts=int(restarts) if restarts.isdigit() else 0)
    rest = sorted(wanted - set(found))
    if rest:
        try:
            acct = _run(["sacct", "--noheader", "--parsable2", "--allocations", "--format=JobID,State",
                         *[f"--jobs={j}" for j in rest]])
        except SchedulerDown:
            acct = ""
        for line in acct.splitlines():
            if "|" not in line:
                continue
            jid, state = line.split("|")[:2]
            for one in _expand(jid.strip()):
                if one in wanted and one not in found:
                    found[one] = JobState(one, state.strip(), queued=state.split()[0] in QUEUED if state else False)
        for one in rest:
            if one not in found:            # accounting has no record (yet): ask the controller, which
                state = _controller_state(one)   # keeps a finished job for MinJobAge (300 s by default)
                found[one] = JobState(one, state or "UNKNOWN",
                                      queued=bool(state) and state.split()[0] in QUEUED)
    return found


def _controller_state(job_id: str) -> str | None:
    """``JobState`` of ``job_id`` (``123`` or ``123_4``) from ``scontrol show job``, or None: the
    controller keeps a finished job for MinJobAge, also where accounting lags or is off. (An array
    task cancelled while it pended is known to neither: scontrol answers "Job 39_2 not found".)"""
    try:
        out = _run(["scontrol", "show", "job", "--oneliner", job_id], timeout=15)
    except SchedulerDown:
        return None
    array, _, task = job_id.partition("_")
    for line in out.splitlines():
        mine = (f"ArrayJobId={array} " in line and f"ArrayTaskId={task} " in line) if task else \
            f"JobId={job_id} " in line
        m = re.search(r"\bJobState=(\S+)", line)
        if mine and m:
            return m.group(1)
    return None


# --------------------------------------------------------------------------- what was submitted
def spec_key(spec) -> str:
    """The identity of a job spec in the record: protocol, model, benchmarks, learning rate."""
    lr = "" if spec.only_lr is None else f"|lr={spec.only_lr:g}"
    return f"{spec.protocol}|{spec.model}|{','.join(spec.benchmarks)}{lr}"


class Record:
    """``<folder>/submitted.json``: {spec key: {"job_id", "submitted", "spec"}} of the jobs submitted
    from this folder (a stage's submitit folder). Written atomically after every ``sbatch``."""

    def __init__(self, folder: str | os.PathLike):
        self.path = Path(folder) / RECORD_FILE

    def read(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return {}                    # damaged: forget it (the unit locks still stop a second job)
        return data if isinstance(data, dict) else {}

    def add(self, pairs: list[tuple]) -> None:
        """Record (spec, job id) pairs."""
        data = self.read()
        now = time.strftime("%Y-%m-%d %H:%M:%S")
        for spec, job_id in pairs:
            data[spec_key(spec)] = {"job_id": str(job_id), "submitted": now, "spec": spec.to_dict()}
        atomic_write_json(self.path, data)

    def job_id(self, spec) -> str | None:
        entry = self.read().get(spec_key(spec))
        return entry["job_id"] if entry else None
