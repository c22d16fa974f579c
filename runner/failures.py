"""When a run fails: one console line that says what happened and what to do, the traceback in a log.

Every failure ends in one line naming the log file that holds the traceback, and exit code 2
(:func:`failure_line`, :func:`write_log`): a :class:`lib.errors.UserError` in its class's words,
also when the notebook's kernel raised it (known by its class name only: :func:`kernel_class`); a
full disk, a read-only folder or a missing permission as what to do here (:func:`os_error_line`);
Ctrl-C as where the same command resumes (:func:`interrupted_line`); anything else as its class and
first line, and for a failed cell the partly executed notebook. :class:`Where` is what the runner
is doing, handed to these functions instead of kept in a module variable.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime
import errno
import logging
import os
import re
import shlex
import shutil
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

from lib import paths
from lib.errors import UserError, user_errors

_ERRNO = re.compile(r"\[Errno (\d+)\][^:']*(?::\s*'([^']*)')?")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Where:
    """What the runner is doing: the profile, the stage (``index`` of ``n``) and its units done."""
    profile: str | None = None
    stage: str | None = None
    index: int = 0
    n: int = 0
    units: tuple[int, int, str] | None = None      # (done, total, what) from lib.progress


# --------------------------------------------------------------------------- the console line
def failure_line(exc: BaseException, where: Where) -> str:
    """One line: what went wrong and what to do (the traceback goes to the log file)."""
    profile = where.profile or "?"
    prefix = f"[{profile}] {where.stage}: " if where.stage else ""
    cls, text = raised(exc)
    if cls is not None and issubclass(cls, KeyboardInterrupt):
        return interrupted_line(where)
    if type(exc).__name__ == "DeadKernelError":     # nbclient's: the kernel process ended mid-cell
        return (f"{prefix}the notebook's kernel died (killed, or out of memory: `dmesg | tail` says which); "
                f"`{_command(profile)}` resumes from this stage (the stages before it are cached, finished units kept)")
    filename, err = getattr(exc, "filename", None), None
    if isinstance(exc, OSError) and exc.errno is not None:
        err = exc.errno
    elif (m := _ERRNO.search(text)) is not None:
        err, filename = int(m.group(1)), m.group(2) or filename
    if err is not None and (line := os_error_line(err, filename, profile, where)):
        return prefix + line
    if cls is not None and issubclass(cls, UserError):
        return prefix + cls.console(text)
    first = text.strip().splitlines()[0] if text.strip() else ""
    if _kernel_failure(exc):
        partial = paths.stage_dir(profile, where.stage) / f".{where.stage}.partial.ipynb"
        return f"{prefix}a cell failed ({exc.ename}: {first}); the partly executed notebook is {paths.show(partial)}"
    return f"{prefix}{type(exc).__name__}: {first}"


def _command(profile: str) -> str:
    """The command that resumes the run: the one typed under make, else the profile's."""
    return os.environ.get("TBT_MAKE_GOAL") or paths.make_command(profile)


def raised(exc: BaseException) -> tuple[type | None, str]:
    """(class, message) of what was raised: for a failed cell, of the kernel's exception (its class
    when :func:`kernel_class` knows it, else None)."""
    if _kernel_failure(exc):
        return kernel_class(exc.ename), exc.evalue
    return type(exc), str(exc)


def kernel_class(name: str) -> type[BaseException] | None:
    """The class of an exception a notebook's kernel raised, known here by its name only: one of
    Python's own, or a :class:`lib.errors.UserError` (lib's modules are imported when it is not
    among those defined so far); None otherwise."""
    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return found
    if name not in user_errors():
        _import_lib()
    return user_errors().get(name)


def _import_lib() -> None:
    import importlib
    import pkgutil

    import lib

    for mod in pkgutil.walk_packages(lib.__path__, "lib."):
        with contextlib.suppress(Exception):
            importlib.import_module(mod.name)


def _kernel_failure(exc: BaseException) -> bool:
    """A cell of the notebook failed (papermill's error, carrying the kernel's ``ename`` and ``evalue``)."""
    from papermill.exceptions import PapermillExecutionError

    return isinstance(exc, PapermillExecutionError)


def interrupted_line(where: Where) -> str:
    """Ctrl-C: where the same command resumes."""
    if not where.stage:
        return "interrupted before any stage started; the same command starts again"
    command = _command(where.profile)
    at = f"{where.stage} (stage {where.index + 1} of {where.n})"
    if where.units and where.units[1]:
        done, total, what = where.units
        return (f"interrupted in {at}; `{command}` resumes from {done} of {total} {what} "
                "(finished units are kept)")
    return f"interrupted in {at}; `{command}` resumes from this stage (the stages before it are cached)"


def os_error_line(errno_: int, filename: str | None, profile: str, where: Where | None = None) -> str | None:
    """What a full disk, a read-only folder or a missing permission means here, and what to do."""
    folder = _folder(filename, where or Where(profile))
    again = f"then run `{_command(profile)}` again"
    move = ("move outputs/ to another disk and link it back (`mv outputs <disk>/outputs && ln -s "
            "<disk>/outputs outputs`: everything made so far stays cached)")
    if errno_ in (errno.ENOSPC, errno.EDQUOT):
        free = shutil.disk_usage(folder).free if folder.exists() else 0
        made = _size(paths.profile_dir(profile)) if paths.profile_dir(profile).exists() else 0
        what = paths.show(filename) if filename else paths.show(folder)
        return (f"disk full writing {what} ({_bytes(free)} free on the disk of {paths.show(folder)}; "
                f"{paths.show(paths.profile_dir(profile))} holds {_bytes(made)} so far and needs more): free "
                f"space there, {again} (finished work is kept); or {move}")
    if errno_ == errno.EROFS:
        return (f"{paths.show(folder)} is on a read-only file system: remount it read-write, or {move}; "
                f"{again}")
    if errno_ in (errno.EACCES, errno.EPERM):
        return (f"no permission to write in {paths.show(folder)}: `chmod -R u+w {paths.show(folder)}`, or {move}; "
                f"{again}")
    return None


def write_log(exc: BaseException, argv: list[str], where: Where) -> Path | None:
    """The traceback (and a failed cell's) in ``outputs/<profile>/logs/run-<time>.log``, or in the
    temporary folder when outputs/ cannot take it (full, read-only); None when nowhere can."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    text = [f"command: {command_line()}", f"argv: {argv}", f"when: {stamp}",
            f"where: {where if where.profile else 'before any stage'}", "", "".join(traceback.format_exception(exc))]
    if _kernel_failure(exc):
        text += ["the failed cell's traceback:", ANSI.sub("", "\n".join(exc.traceback))]
    profile = where.profile or (argv[0] if argv and not argv[0].startswith("-") else "run")
    for folder in (paths.profile_dir(profile) / "logs", Path(tempfile.gettempdir())):
        name = f"run-{stamp}.log" if folder.name == "logs" else f"tbt-{profile}-{stamp}.log"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text("\n".join(text) + "\n", encoding="utf-8")
            return folder / name
        except OSError:
            with contextlib.suppress(OSError):
                (folder / name).unlink(missing_ok=True)          # no empty or cut log left behind
    return None


def command_line() -> str:
    """The command that started this run, as typed (``make all PROFILE=...`` under make)."""
    if os.environ.get("MAKELEVEL") and os.environ.get("TBT_MAKE_GOAL"):
        return os.environ["TBT_MAKE_GOAL"]
    return " ".join(shlex.quote(a) for a in [Path(sys.executable).name, "-m", "runner.run", *sys.argv[1:]])


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


FULL_BYTES = 64 << 20            # a disk with less free space than this is the full one


def _folder(filename: str | None, where: Where) -> Path:
    """The folder an OSError concerns: the file's existing parent, else the running stage's folder."""
    if filename:
        path = Path(filename)
        while not path.exists() and path != path.parent:
            path = path.parent
        return path if path.is_dir() else path.parent
    here = paths.stage_dir(where.profile, where.stage) if where.stage and where.profile else paths.OUTPUTS
    # no file named: of the disks a run writes to, the one that is full (the temporary folder, the
    # caches and shared memory may lie on other disks than outputs/)
    for folder in (here, paths.ROOT / ".cache", Path(tempfile.gettempdir()), Path("/dev/shm")):
        with contextlib.suppress(OSError):
            if folder.exists() and shutil.disk_usage(folder).free < FULL_BYTES:
                return folder
    return here


# --------------------------------------------------------------------------- Ctrl-C and library warnings
_INTERRUPTED = threading.Event()


def _on_sigint(signum, frame):
    """Ctrl-C: as Python's default (a KeyboardInterrupt), and remember it, so that what the libraries
    log while unwinding (nbclient's "Kernel died while waiting for execute reply.", asyncio's "Task
    exception was never retrieved" at exit) stays off the terminal: the one line says what happened."""
    _INTERRUPTED.set()
    raise KeyboardInterrupt


class _LibraryWarnings(logging.Handler):
    """What libraries without handlers of their own log at WARNING or above goes to stderr, as
    Python's last-resort handler does, until a Ctrl-C."""

    def emit(self, record: logging.LogRecord) -> None:
        logger = logging.getLogger(record.name)
        while logger is not logging.root:       # another handler took it: Python would print nothing
            if logger.handlers:
                return
            logger = logger.parent
        if any(h is not self for h in logger.handlers):
            return
        if record.getMessage().startswith("Kernel died"):      # the run's one line says so, with what to do
            return
        if not _INTERRUPTED.is_set() and logging.lastResort is not None:
            logging.lastResort.handle(record)


def quiet_after_ctrl_c() -> None:
    """In the main thread: Ctrl-C raises KeyboardInterrupt and silences what libraries log while
    unwinding (:func:`_on_sigint`); their warnings reach stderr until then (:class:`_LibraryWarnings`)."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return
    _INTERRUPTED.clear()
    signal.signal(signal.SIGINT, _on_sigint)
    root = logging.getLogger()
    if not any(isinstance(h, _LibraryWarnings) for h in root.handlers):
        root.addHandler(_LibraryWarnings(logging.WARNING))
