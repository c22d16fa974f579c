"""How a job ended and what a launch makes of it: :class:`JobOutcome` (every way a job ends gives
one), the failure record of a unit (``<work>/failed/``), the command that retries it (the failure
list and ``make status`` name the same one), and the list of failures that ends a launch
(:class:`JobError`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field

from ... import layout, paths
from ...errors import UserError
from ...util import atomic_write_json
from ..spec import JobSpec


class JobError(UserError, RuntimeError):
    """Jobs failed or could not run (the message lists every failed unit and how to retry it)."""
    named = False         # the failed units were listed above, once: the console line is their count


@dataclass
class JobOutcome:
    """The outcome of one job: ``scores`` {benchmark: test score}, ``trained`` (benchmarks whose one
    learning rate it trained), ``failed`` {benchmark: reason}, ``busy`` {benchmark: who holds it}."""
    model: str
    protocol: str
    lr: float | None = None            # a job of one learning rate (the preflight's split)
    scores: dict[str, float] = field(default_factory=dict)
    trained: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    busy: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, spec: JobSpec, **outcome) -> JobOutcome:
        return cls(model=spec.model, protocol=spec.protocol, lr=spec.only_lr, **outcome)

    @classmethod
    def failing(cls, spec: JobSpec, reason: str, trace: str) -> JobOutcome:
        """Every pending benchmark of ``spec`` failed for ``reason`` (each gets its failure record)."""
        failed = {}
        for bench in spec.pending():
            failed[bench] = reason
            write_failure(spec, bench, reason, trace)
        return cls.of(spec, failed=failed)

    @classmethod
    def died(cls, spec: JobSpec, job) -> JobOutcome:
        """The outcome a finished job returned, or, when the job itself died (killed, timed out,
        crashed), one whose pending benchmarks all failed, naming the job's log file."""
        try:
            return job.result()
        except Exception as exc:  # noqa: BLE001 - the job's death is its benchmarks' failure
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            log = getattr(getattr(job, "paths", None), "stderr", None)
            reason = f"job {getattr(job, 'job_id', '?')} died: {type(exc).__name__}: {first[:300]}" + \
                (f" (log: {log})" if log else "")
            return cls.failing(spec, reason, str(exc))

    def to_dict(self) -> dict:
        return asdict(self)


def record_failure(spec: JobSpec, bench: str, exc: BaseException) -> str:
    """Write the failure record of ``exc`` for one unit; returns its one-line reason."""
    reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    write_failure(spec, bench, reason, "".join(traceback.format_exception(exc)))
    return reason


def write_failure(spec: JobSpec, bench: str, reason: str, trace: str) -> None:
    """The failure record of one unit: why, the traceback, when, and the spec that retries it alone
    (none when the disk cannot take it: the reason still reaches the console)."""
    with contextlib.suppress(OSError):
        atomic_write_json(layout.failure_path(spec.work_root, spec.protocol, spec.model, bench, spec.only_lr), {
        "model": spec.model, "benchmark": bench, "protocol": spec.protocol, "reason": reason,
            "traceback": trace, "when": time.strftime("%Y-%m-%d %H:%M:%S"), "spec": spec.only(bench).to_dict()})


def retry_command(spec: JobSpec, bench: str, lr: float | None = None) -> str:
    """The command that retries one failed unit (given ``lr``, one learning rate of it) where it is
    typed, from the repository's root (its spec is in the failure record); re-running the stage
    retries every unfinished unit."""
    path = layout.failure_path(spec.work_root, spec.protocol, spec.model, bench, lr)
    return f"{paths.show(sys.executable)} -m lib.pipeline.launch.jobs {paths.show(path)}"


# Units that did not fail on their own: their worker was killed with the run (Ctrl-C, a hard kill,
# the out-of-memory killer) or the disk was full. Retrying each alone is not what fixes them; one line
# says what does.
STOPPED = re.compile(r"BrokenProcessPool|KeyboardInterrupt|terminated abruptly")
# torch's zip writer says only "unexpected pos" (or "failed writing") when the disk is full under it
DISK_FULL = re.compile(r"\[Errno (?:28|122)\]|No space left on device|Disk quota exceeded|"
                       r"inline_container\.cc.*unexpected pos|PytorchStreamWriter failed writing")
ERRNO = re.compile(r"\[Errno (?:28|122)\][^']*(?:'[^']*')?")


def from_outside(reason: str) -> str | None:
    """``"disk full"``, ``"stopped"`` (its process was killed) or None (the unit failed on its own)."""
    if DISK_FULL.search(reason):
        return "disk full"
    if STOPPED.search(reason):
        return "stopped"
    return None


def _resume_command(specs: list[JobSpec]) -> str:
    return os.environ.get("TBT_MAKE_GOAL") or (paths.make_command(specs[0].work_root) if specs else "make all")


def summarise(outcomes: list[JobOutcome], specs: list[JobSpec]) -> dict[str, dict]:
    """{model: {benchmark: score}} of what the jobs finished; or, when a unit failed or runs
    elsewhere, the list of them (each failure with its retry command) on the console and
    :class:`JobError`. Units stopped from outside (a full disk, their process killed) are not
    listed: the error's first line counts them and says what to run."""
    results: dict[str, dict] = {}
    lines, outside = [], {}
    by_model = {(s.protocol, s.model): s for s in specs}
    for rep in outcomes:
        if rep.scores:
            results.setdefault(rep.model, {}).update(rep.scores)
        spec = by_model[(rep.protocol, rep.model)]
        which = "" if rep.lr is None else f" ({layout.lr_name(rep.lr)})"
        for bench, reason in rep.failed.items():
            if (kind := from_outside(reason)) is not None:
                outside.setdefault(kind, []).append(reason)
                continue
            lines.append(f"FAILED {rep.protocol} {rep.model} / {bench}{which}: {reason}\n"
                         f"    retry: {retry_command(spec, bench, rep.lr)}")
        for bench, who in rep.busy.items():
            lines.append(f"RUNNING ELSEWHERE {rep.protocol} {rep.model} / {bench}{which}: {who}\n"
                         "    wait for it to finish, then run the stage again")
    if not lines and not outside:
        return results
    n_failed = sum(len(r.failed) for r in outcomes) - sum(len(v) for v in outside.values())
    n_busy = sum(len(r.busy) for r in outcomes)
    finished = sum(len(v) for v in results.values())
    command = _resume_command(specs)
    if "disk full" in outside:        # with errno 28 and a file, so the runner's line names the disk
        said = next((m.group(0) for r in outside["disk full"] if (m := ERRNO.search(r))), None)
        said = said or f"[Errno 28] No space left on device: '{specs[0].work_root if specs else ''}'"
        head = (f"disk full: {len(outside['disk full'])} unit(s) could not be written ({said}); free space, "
                f"then run `{command}` again (finished units are kept)")
    elif "stopped" in outside:
        head = (f"interrupted: {len(outside['stopped'])} unit(s) stopped with their worker processes (Ctrl-C, "
                f"a kill, or the out-of-memory killer); `{command}` resumes them (finished units are kept)")
    else:
        head = ""
    if lines:
        text = "\n".join(lines)
        print(text, file=sys.__stderr__ or sys.stderr, flush=True)
        count = (f"{n_failed} unit(s) failed and {n_busy} run elsewhere; {finished} finished now; the others are "
                 f"in the store")
        raise JobError(f"{head + '; ' if head else ''}{count} (listed above):\n{text}")
    raise JobError(head)
