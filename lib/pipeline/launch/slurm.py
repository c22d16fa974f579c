"""Everything about Slurm in one place: the scheduler's answers (:func:`limits`, :func:`states`), the
executor that submits our jobs (submitit runs :class:`RequeueableJob` inside them), the waiter that
follows them (:func:`run`, :func:`wait`), and the record of what a stage submitted (:class:`Record`),
written the moment ``sbatch`` returns, so that a run can be left and the next one re-attaches.
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

from ... import paths
from ...errors import UserError
from ...progress import clock, tell
from ...util import atomic_write_json
from .outcome import JobError, JobOutcome

SUBMIT_ONLY_ENV = "TBT_SUBMIT_ONLY"   # `make submit`: a Slurm stage submits its jobs and returns (:func:`run`)
ACCOUNTING_LAG_S = 60.0                 # how long a job may be in neither squeue nor sacct
# how long a job that left the queue without a result must stay out before it counts as ended: a
# requeue (`scontrol requeue`, preemption) kills the run and puts the job back, and in between squeue
# may not list it while sacct reports the killed run FAILED (seen in a clean-clone test run)
REQUEUE_GRACE_S = 15.0
MAX_REQUEUES = 3                        # requeues of a job after time limits (preemptions do not count)

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
    "JobHeldAdmin": "an administrator holds it: ask them to release it (`scontrol release <job>`), or "
                    "`scancel <job>` and run again",
    "QOSMaxJobsPerUserLimit": "your QOS allows no more running jobs: they start as others finish",
    "AssocGrpGRES": "your account's GPU allowance is used up: they start as others finish",
    "InvalidAccount": "the account is not valid: set slurm_account in resources",
    "InvalidQOS": "the QOS is not valid: set slurm_qos in resources",
    "BadConstraints": "no node meets the request (memory, CPUs, GPUs): change resources",
}


class SchedulerDown(UserError, RuntimeError):
    """The scheduler's commands are missing or do not answer (the message says which and why)."""


class JobsSubmitted(JobError):
    """``make submit``: the jobs are submitted (or were already queued) and nobody waits for them;
    ``make status`` follows them, ``make all`` re-attaches, waits and goes on."""


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


def scheduler_resources(resources: dict) -> tuple[dict, list[str]]:
    """(``resources`` with the partition's real time limit applied, lines that say so): a
    ``timeout_min`` over its ``MaxTime`` would be refused or pend forever. Where no scheduler answers,
    ``resources`` as they are. An unknown partition, or a request no node of the partition can meet
    (:func:`node_problems`), raises ValueError."""
    try:
        lim = limits(resources.get("slurm_partition"))
    except SchedulerDown as exc:
        return dict(resources), [f"preflight: no Slurm scheduler answers here ({exc}): trusting timeout_min "
                                 "and max_array as given"]
    problems = node_problems(resources, lim.partition)
    if problems:
        raise ValueError(f"resources.{problems[0][0]}: {problems[0][1]}")
    out, notes = dict(resources), []
    wanted = resources.get("timeout_min")
    if lim.max_time_min is not None and (wanted is None or wanted > lim.max_time_min):
        out["timeout_min"] = int(lim.max_time_min)
        notes.append(f"preflight: partition {lim.partition} allows {lim.max_time_min:g} min a job, not timeout_min "
                     f"{wanted if wanted is not None else '(unset)'}: planning with {lim.max_time_min:g} min")
    return out, notes


def node_problems(resources: dict, partition: str) -> list[tuple[str, str]]:
    """(key of ``resources``, why) for every request (``mem_gb``, ``cpus_per_task``, ``gpus_per_node``)
    no node of ``partition`` can meet, from ``scontrol show node``: before any work, not sbatch's
    "Memory specification can not be satisfied" at 02."""
    nodes = [_fields(line) for line in _run(["scontrol", "show", "node", "--oneliner"]).splitlines() if line.strip()]
    nodes = [n for n in nodes if partition in n.get("Partitions", "").split(",")]
    if not nodes:
        return []

    def gpus(node: dict) -> int:
        return sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,(]+)?:(\d+)", node.get("Gres", "")))

    have = {"mem_gb": (max(float(n.get("RealMemory", 0) or 0) for n in nodes) / 1024, "GB of memory"),
            "cpus_per_task": (max(int(n.get("CPUTot", 0) or 0) for n in nodes), "CPUs"),
            "gpus_per_node": (max(gpus(n) for n in nodes), "GPUs")}
    problems = []
    for key, (most, what) in have.items():
        wanted = resources.get(key)
        if isinstance(wanted, (int, float)) and wanted > most:
            problems.append((key, f"{wanted:g} {what} asked, but the largest node of partition {partition} has "
                                  f"{most:.4g} ({len(nodes)} node(s), `scontrol show node`): ask for at most "
                                  f"{most:.4g}, or choose another slurm_partition"))
    return problems


def check_profile(prof) -> None:
    """The ``resources`` of every stage of profile ``prof`` (a :class:`lib.params.Profile`) run on
    Slurm against the nodes of its partition, where a scheduler answers: a request no node meets (or
    an unknown partition) is :class:`lib.params.ParamsError`, one line naming the file and key, before
    any work (the runner calls it after validating the params), not sbatch's refusal at 02."""
    from ...params import ParamsError

    for stage_name, values in prof.stages.items():
        merged = {**prof.common, **(values or {})}
        resources = merged.get("resources")
        if merged.get("executor") == "slurm" and shutil.which("sbatch") is None:
            scope = f"stages.{stage_name}" if "executor" in (values or {}) else "common"
            raise ParamsError(f"{prof.path}: {scope}.executor: slurm, but this machine has no Slurm (no sbatch on "
                              "PATH): `make slurm-up` starts a one-machine cluster here, or set executor: processes")
        if merged.get("executor") != "slurm" or not isinstance(resources, dict):
            continue
        scope = f"stages.{stage_name}" if "resources" in (values or {}) else "common"
        try:
            partition = limits(resources.get("slurm_partition")).partition
            problems = node_problems(resources, partition)
        except SchedulerDown:
            return                    # no scheduler here: the preflight says it trusts them
        except ValueError as exc:     # an unknown partition
            raise ParamsError(f"{prof.path}: {scope}.resources.slurm_partition: {exc}") from None
        if problems:
            raise ParamsError(f"{prof.path}: {scope}.resources.{problems[0][0]}: {problems[0][1]}")


def array_size(max_array: int) -> int:
    """Tasks per job array: ``max_array``, or the cluster's ``MaxArraySize`` when that is smaller
    (one line says so)."""
    try:
        cap = limits().max_array_size
    except (SchedulerDown, ValueError):
        return max_array
    if cap and cap < max_array:
        tell(f"slurm: MaxArraySize is {cap} on this cluster, max_array {max_array}: arrays of {cap} tasks")
        return cap
    return max_array


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


def requeue_cause(job, restarts: int) -> str:
    """Why a job was requeued, from its log: submitit writes "this job is timed-out" or "this job is
    preempted" when the signal that precedes a time limit or a preemption reaches it. A requeue
    without such a line (Slurm appends a requeued job's log) came from outside: an administrator's
    ``scontrol requeue`` or a failed node."""
    try:
        text = Path(job.paths.stderr).read_text(errors="replace")
    except (AttributeError, OSError, TypeError):
        text = ""
    said = re.findall(r"this job is (timed-out|preempted)", text)
    if restarts and len(said) >= restarts:
        return "its time limit" if said[-1] == "timed-out" else "a preemption"
    return "by an administrator (`scontrol requeue`) or a failed node, not by its time limit"


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
        except (OSError, ValueError):
            return {}                    # none, or damaged: forget it (the unit locks still stop a second job)
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


# --------------------------------------------------------------------------- submitting and waiting
class RequeueableJob:
    """What a Slurm job runs: ``fn(spec)``, requeued as it was when submitit's signal before a time
    limit or a preemption calls :meth:`checkpoint`; the requeued run resumes after the last finished
    epoch, so the numbers are those of an uninterrupted run."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, spec):
        return self.fn(spec)

    def checkpoint(self, spec):
        import submitit

        return submitit.helpers.DelayedSubmission(self, spec)


def executor(folder: Path, resources: dict, max_requeues: int = MAX_REQUEUES):
    """submitit's Slurm executor with ``resources``, jobs requeueable (``--requeue``) and warned
    before their time limit with time to stop (``slurm_signal_delay_s``: a quarter of the limit,
    at most 90 s, unless given)."""
    import submitit

    ex = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=max_requeues)
    res = {"name": "tbt", **resources}
    if "slurm_signal_delay_s" not in res and res.get("timeout_min"):
        res["slurm_signal_delay_s"] = int(min(90, max(10, res["timeout_min"] * 60 // 4)))
    extra = dict(res.pop("slurm_additional_parameters", None) or {})
    extra.setdefault("requeue", True)
    ex.update_parameters(**res, slurm_additional_parameters=extra)
    return ex


def queued_jobs(specs: list, folder: Path) -> dict[str, str]:
    """{spec key: job id} of the recorded jobs of ``specs`` still queued or running."""
    recorded = {k: v["job_id"] for k, v in Record(folder).read().items()}
    mine = {spec_key(s): recorded[spec_key(s)] for s in specs if spec_key(s) in recorded}
    if not mine:
        return {}
    try:
        found = states(list(mine.values()))
    except SchedulerDown as exc:
        raise JobError(f"the scheduler does not answer ({exc}), so it cannot be told which of this stage's "
                       f"{len(mine)} recorded jobs still run; run the same command again once it answers "
                       "(`make slurm-up` restarts the one-machine cluster)") from None
    return {k: j for k, j in mine.items() if found[j].queued}


def run(fn, todo: list, queued: dict[str, str], resources: dict, folder: Path, max_array: int, max_requeues: int,
        counter, bar, poll: float) -> list[JobOutcome]:
    """Submit the specs of ``todo`` that are not ``queued`` (as job arrays running ``fn``, each job id
    recorded at once), re-attach to the queued ones, and wait for all (:func:`wait`)."""
    import submitit

    record = Record(folder)
    attached = [(s, queued[spec_key(s)]) for s in todo if spec_key(s) in queued]
    fresh = [s for s in todo if spec_key(s) not in queued]
    if attached:
        tell(f"slurm: re-attached to {len(attached)} job(s) still queued or running: "
             f"{first_few([j for _, j in attached])}")
    submitted = []
    if fresh:
        ex = executor(folder, resources, max_requeues)
        job_fn = RequeueableJob(fn)
        parts = chunks(fresh, array_size(max_array))
        for part in parts:
            jobs = ex.map_array(job_fn, part)
            record.add([(spec, job.job_id) for spec, job in zip(part, jobs)])   # at once: nothing is submitted twice
            submitted += [(spec, job.job_id) for spec, job in zip(part, jobs)]
        tell(f"slurm: submitted {len(submitted)} job(s) in {len(parts)} array(s): "
             f"{first_few([j for _, j in submitted])}; logs in {paths.show(folder)}")
    entries = [(spec, jid, submitit.SlurmJob(folder=folder, job_id=jid)) for spec, jid in attached + submitted]
    if os.environ.get(SUBMIT_ONLY_ENV):
        raise JobsSubmitted(f"{len(submitted)} job(s) submitted, {len(attached)} already queued or running")
    return wait(entries, counter, bar, poll=poll)


def chunks(items: list, size: int) -> list[list]:
    """``items`` in consecutive chunks of at most ``size`` (a Slurm array each)."""
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    return [items[i:i + size] for i in range(0, len(items), size)]


def first_few(items: list[str], n: int = 6) -> str:
    """The first ``n`` of ``items`` and how many more."""
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def wait(entries: list[tuple], counter, bar, poll: float) -> list[JobOutcome]:
    """Wait for Slurm jobs (spec, job id, submitit job), asking the scheduler every ``poll``
    seconds; one outcome per job. Says in one line when the scheduler stops answering (and goes on
    polling), when it answers again, when a job is requeued, and why jobs pend when that changes
    (with what to do when waiting will not help)."""
    outcomes, seen, down_since, last_note = [], {}, None, None
    entries = list(entries)
    while entries:
        asked = time.monotonic()
        try:
            found = states([jid for _, jid, _ in entries])
        except SchedulerDown as exc:
            if down_since is None:
                down_since = asked
                tell(f"slurm: the scheduler does not answer ({exc}); the jobs run on, still polling every "
                     f"{poll:g} s (Ctrl-C loses nothing: `make all` re-attaches)")
            bar.update(counter.done())
            time.sleep(poll)
            continue
        if down_since is not None:
            tell(f"slurm: the scheduler answers again (after {clock(time.monotonic() - down_since)})")
            down_since = None
        for entry in list(entries):
            spec, jid, job = entry
            st = found[jid]
            if st.restarts > seen.get(jid, st.restarts):
                tell(f"slurm: job {jid} ({spec.model}) was requeued ({requeue_cause(job, st.restarts)}); it "
                     "resumes after its last finished epoch")
            seen[jid] = st.restarts
            if st.queued:
                seen.pop(f"{jid}/gone", None)
                continue
            result = getattr(getattr(job, "paths", None), "result_pickle", None)
            if not (result and result.exists()):
                # accounting (slurmdbd) may lag the queue; a requeued job may be briefly out of it
                grace = ACCOUNTING_LAG_S if st.state == "UNKNOWN" else REQUEUE_GRACE_S
                if time.monotonic() - seen.setdefault(f"{jid}/gone", time.monotonic()) < grace:
                    continue
            entries.remove(entry)
            outcomes.append(JobOutcome.died(spec, job) if result and result.exists() else ended_outcome(spec, jid, st))
        note = pending_note([(s, found[j]) for s, j, _ in entries])
        if note != last_note:
            if note:
                tell(note)
            last_note = note
        bar.update(counter.done())
        if entries:
            time.sleep(poll)
    return outcomes


def pending_note(items: list[tuple]) -> str | None:
    """One line on the jobs that pend, by reason, when one of them needs someone to act."""
    pending = [(spec, st) for spec, st in items if st.state == "PENDING"]
    stuck = [(spec, st) for spec, st in pending if st.stuck]
    if not stuck:
        return None
    spec, st = stuck[0]
    ids = first_few([s.job_id for _, s in stuck])
    return f"slurm: {len(stuck)} job(s) pending ({st.reason}): {st.stuck} [{ids}]"


ENDED = {"CANCELLED": "was cancelled", "TIMEOUT": "reached its time limit too often to be requeued",
         "NODE_FAIL": "lost its node", "OUT_OF_MEMORY": "ran out of memory", "PREEMPTED": "was preempted",
         "UNKNOWN": "left the queue and neither squeue, sacct nor scontrol knows it (an array task "
                    "cancelled while it pended leaves no record)"}


def ended_outcome(spec, jid: str, st: JobState) -> JobOutcome:
    """The outcome of a job that left the queue without a result of its own (cancelled, killed at
    its time limit, node failure): what it finished is in the store, the rest failed."""
    why = ENDED.get(st.state.split()[0] if st.state else "UNKNOWN", "ended")
    return JobOutcome.failing(spec, f"job {jid} {why} ({st.state}) before finishing it", f"slurm job {jid}: {st.state}")
