"""One lock file per unit of work, so two jobs never work on (or delete) the same unit.

A unit's folder is redone from scratch when it holds no finished record, which is right after a
kill and wrong while another job is still writing it: a second submission of the same grid (a
re-run while the first jobs still run, a retried array task) would delete the live job's partial
work. :class:`UnitLock` prevents that, also across the nodes of a cluster sharing a file system:

- the lock is a file created with ``O_CREAT | O_EXCL`` (atomic on local file systems and NFS v3+),
  holding the owner's host, process id, Slurm job id and start time;
- its owner touches it every ``heartbeat`` seconds from a background thread;
- another process takes it over only when it is *stale*: its owner's process is gone (same host),
  or it has not been touched for ``stale_after`` seconds (another host; a killed job stops
  touching it). Processes taking over at the same time queue on a second file, so only one wins.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path


class UnitBusy(RuntimeError):
    """The unit is being worked on elsewhere (the message names the owner)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # exists, owned by someone else
        return True
    return True


def owner() -> dict:
    """Who takes a lock: host, process id, Slurm job id (when under Slurm), time."""
    job = os.environ.get("SLURM_ARRAY_JOB_ID") and \
        f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}"
    return {"host": socket.gethostname(), "pid": os.getpid(), "job": job or os.environ.get("SLURM_JOB_ID"),
            "since": time.strftime("%Y-%m-%d %H:%M:%S")}


class UnitLock:
    """``with UnitLock(path):`` holds the lock of one unit (raises :class:`UnitBusy` if it is held)."""

    def __init__(self, path: str | os.PathLike, heartbeat: float = 60.0, stale_after: float = 600.0):
        self.path = Path(path)
        self.heartbeat, self.stale_after = float(heartbeat), float(stale_after)
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- state of the file
    def holder(self) -> dict | None:
        """The current holder's record, or None when the lock is free."""
        try:
            return json.loads(self.path.read_text() or "{}")
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}                          # being written this instant, or damaged

    def stale(self, info: dict | None = None) -> bool:
        """True when the holder is gone: its process died (same host) or its heartbeat stopped."""
        info = self.holder() if info is None else info
        try:
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return True
        if info and info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int):
            if not _alive(info["pid"]):
                return True
        return age > self.stale_after

    def describe(self, info: dict | None) -> str:
        info = info or {}
        job = f", job {info['job']}" if info.get("job") else ""
        return (f"{self.path} is held by process {info.get('pid', '?')} on {info.get('host', '?')}{job} "
                f"since {info.get('since', '?')}")

    # ----------------------------------------------------------------- taking and giving back
    def _create(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps({**owner(), "token": self.token}))
        return True

    def acquire(self) -> UnitLock:
        if not self._create():
            if not self._take_over():
                raise UnitBusy(self.describe(self.holder()))
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, daemon=True, name=f"lock-{self.path.name}")
        self._thread.start()
        return self

    def _take_over(self) -> bool:
        """Replace a stale lock by ours. Processes that find it stale at the same time queue on a
        second file (``<lock>.break``, itself taken over after a minute), and each checks again
        that the lock is still stale before it removes it."""
        breaker = self.path.with_name(self.path.name + ".break")
        try:
            fd = os.open(breaker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                if time.time() - breaker.stat().st_mtime > 60:
                    breaker.unlink(missing_ok=True)
            except FileNotFoundError:
                pass
            return False
        os.close(fd)
        try:
            if not self.stale():
                return False
            self.path.unlink(missing_ok=True)
            return self._create()
        finally:
            breaker.unlink(missing_ok=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                os.utime(self.path)
            except OSError:
                return

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        info = self.holder()
        if info is not None and info.get("token") == self.token:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> UnitLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
