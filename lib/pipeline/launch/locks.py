"""One lock file per unit of work, so two jobs never work on (or delete) the same unit.

A unit's folder is redone from scratch when it holds no finished record, which is right after a
kill and wrong while another job is still writing it: a second submission of the same grid (a
re-run while the first jobs still run, a retried array task) would delete the live job's partial
work. :class:`UnitLock` prevents that, also across the nodes of a cluster sharing a file system:

- the lock is created with its record in one step: the record (the owner's host, process id, Slurm
  job id and start time) is written to a file of its own, which is then hard-linked to the lock's
  name (``link`` fails when the name exists: atomic on local file systems and NFS v3+). A full disk
  or a kill therefore never leaves an empty lock: the record fails to be written before the lock
  exists;
- its owner touches it every ``heartbeat`` seconds from a background thread;
- another process takes it over when it is *stale*: its owner's process is gone (same host), its
  record is empty or unreadable for more than ``unreadable_after`` seconds (a lock left by an older
  version, or a damaged file), or it has not been touched for ``stale_after`` seconds (another
  host; a killed job stops touching it). Processes taking over at the same time queue on a second
  file, so only one wins; the one that wins says so in one line.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from ...progress import tell


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

    def __init__(self, path: str | os.PathLike, heartbeat: float = 60.0, stale_after: float = 600.0,
                 unreadable_after: float = 5.0):
        self.path = Path(path)
        self.heartbeat, self.stale_after = float(heartbeat), float(stale_after)
        self.unreadable_after = float(unreadable_after)
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

    def why_stale(self, info: dict | None = None) -> str | None:
        """Why the lock may be taken over (its owner's process died on this host, its record is
        empty or unreadable, its heartbeat stopped), or None while its owner may be alive."""
        info = self.holder() if info is None else info
        try:
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return "it is gone"
        if info and info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int):
            if not _alive(info["pid"]):
                return f"its owner, process {info['pid']} on this host, is gone"
        if not info and age > self.unreadable_after:
            return "its record is empty or unreadable (left by a crash or a full disk)"
        if age > self.stale_after:
            return f"its owner has not touched it for {age:.0f} s"
        return None

    def describe(self, info: dict | None) -> str:
        info = info or {}
        job = f", job {info['job']}" if info.get("job") else ""
        return (f"{self.path} is held by process {info.get('pid', '?')} on {info.get('host', '?')}{job} "
                f"since {info.get('since', '?')}")

    # ----------------------------------------------------------------- taking and giving back
    def _create(self) -> bool:
        """Create the lock with its record in one step (the record's own file, hard-linked to the
        lock's name); an OSError (a full disk) leaves no lock behind."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = self.path.with_name(f".{self.path.name}.{self.token}")
        try:
            with open(record, "x") as fh:
                fh.write(json.dumps({**owner(), "token": self.token}))
            os.link(record, self.path)
        except FileExistsError:
            return False
        finally:
            record.unlink(missing_ok=True)
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
            info = self.holder()
            why = self.why_stale(info)
            if why is None:
                return False
            self.path.unlink(missing_ok=True)
            if not self._create():
                return False
            held = f"; it was held by process {info.get('pid', '?')} on {info.get('host', '?')} since " \
                   f"{info.get('since', '?')}" if info else ""
            tell(f"lock {self.path}: taken over, {why}{held}")
            return True
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
