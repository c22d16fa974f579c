"""Progress of long work, shown where the person running it looks.

A notebook executed by ``make all`` writes its output into the executed notebook, so
:class:`Progress` also writes a line to the console (the process's original standard error) when it
starts, at most every ``every`` seconds while work advances, and when it ends::

    [02_finetune] train_before_test: 14/96 units, 3m10s elapsed, about 18m left

Usage: ``with Progress(total=len(units), label="train_before_test") as progress:``, then
``progress.advance()`` per unit (or ``progress.update(done)`` when polling).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

STAGE_ENV = "TBT_STAGE"      # set by runner.run while a stage runs: prefixes the lines with its name
HEARTBEAT_ENV = "TBT_HEARTBEAT"   # set by runner.run: a file written at every line ("done total label"), so
                                  # its heartbeat stays quiet and an interrupted run can say how far it got


def tell(line: str) -> None:
    """A line for the notebook and for the console that runs it."""
    print(line, flush=True)
    if sys.stdout is not sys.__stdout__ and sys.__stderr__ is not None:
        with contextlib.suppress(OSError, ValueError):
            sys.__stderr__.write(line + "\n")
            sys.__stderr__.flush()


def clock(seconds: float) -> str:
    """``42s``, ``3m10s``, ``2h05m``."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, sec = divmod(seconds, 60)
    return f"{minutes}m{sec:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


class Progress:
    """Units done of a total, reported as a console line at most every ``every`` seconds (``unit``
    names what is counted, e.g. ``steps`` when a unit of ``make status`` has several)."""

    def __init__(self, total: int, label: str, every: float = 15.0, stream=None, unit: str = "units"):
        self.total, self.label, self.every, self.unit = int(total), label, float(every), unit
        self.stream = stream if stream is not None else (sys.__stderr__ or sys.stderr)
        self.done = 0
        self.start = time.monotonic()
        self._last = 0.0

    def line(self, note: str = "") -> str:
        elapsed = time.monotonic() - self.start
        text = f"{self.label}: {self.done}/{self.total} {self.unit}, {clock(elapsed)} elapsed"
        if 0 < self.done < self.total:
            text += f", about {clock(elapsed / self.done * (self.total - self.done))} left"
        stage = os.environ.get(STAGE_ENV)
        return (f"[{stage}] " if stage else "") + text + (f" ({note})" if note else "")

    def _emit(self, note: str = "") -> None:
        self._last = time.monotonic()
        try:
            self.stream.write(self.line(note) + "\n")
            self.stream.flush()
            if os.environ.get(HEARTBEAT_ENV):      # the runner's heartbeat (and its message on Ctrl-C) reads it
                with open(os.environ[HEARTBEAT_ENV], "w") as fh:
                    fh.write(f"{self.done} {self.total} {self.unit} of {self.label}")
        except (OSError, ValueError):      # a closed console must never stop the work
            pass

    def update(self, done: int, note: str = "") -> None:
        """Set the number of units done (for callers that poll); reports if ``every`` has passed."""
        self.done = min(int(done), self.total)
        if time.monotonic() - self._last >= self.every or self.done == self.total:
            self._emit(note)

    def advance(self, n: int = 1, note: str = "") -> None:
        self.update(self.done + n, note)

    def __enter__(self) -> Progress:
        self._emit("started")
        return self

    def __exit__(self, *exc) -> None:
        if self.done < self.total or exc[0] is not None:
            self._emit("stopped" if exc[0] is not None else "")
