"""Launching: how the pipeline's units are RUN (what a unit computes is the rest of lib.pipeline).

    jobs        the (model, benchmark, lr) grid: planning, one job under its unit locks, the launch
                in this process, a process pool, submitit's local executor or Slurm; the unit counter
    slurm       everything Slurm: limits, job states, the executor, submission, the waiter, the
                submission record, ``make submit``
    outcome     JobOutcome (what a job reports), failure records, the retry command, the failure list
    locks       one lock file per unit, so two jobs never work on (or delete) the same unit
    preflight   ``make preflight``: GPU-hours and memory of every unit before submission, split or refused

(``make status`` and ``make models`` are commands of the runner: runner.status, runner.fetch.)
"""
