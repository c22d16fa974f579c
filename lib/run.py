"""Run the notebooks of a profile, in order, through papermill: ``python -m lib.run PROFILE``.

Each stage writes ``outputs/<profile>/<stage>/`` (the executed notebook, summary.json, tables,
figures). A stage is skipped when nothing it depends on changed since its last successful run
(:func:`stale` says what did):

- its *key*: the notebook's source, its resolved parameters, and the source of the ``lib``
  modules it imports (followed through their own imports, :func:`lib.util.lib_closure`);
- its *reads*: every input it read while it ran (results store, earlier stages' summary.json,
  item files, published data, task folders), recorded by the stage itself through
  :func:`lib.util.note_read` by content digest, under a name relative to the outputs folder, the
  published data folder or the repository (:func:`lib.paths.portable`): other data behind the same
  ``HARMONY_DATA`` re-runs what read it, a moved outputs folder or checkout re-runs nothing;
- its *results*: the summary, numbers and tables its folder held when it finished (not the
  figures, whose PDFs record when they were drawn), so that a notebook run by hand in JupyterLab
  that changed them is redone; and a summary.json that parses.

So editing ``lib/benchalign`` re-runs only 07, and a stage whose upstream outputs came out the
same stays cached. Long stages also cache per unit of work (``lib.pipeline.launch.jobs``, and 07's
``lib.benchalign.experiments``), so an interrupted run resumes where it stopped.

One run per profile at a time: a run holds ``outputs/<profile>/.lock`` (``flock``, released by the
operating system when the process ends, however it ends); a second run stops with one line naming
the first (pid, command, start time), or waits for it with ``--wait``. While a stage runs, the
console gets a line whenever nothing else was printed for :data:`HEARTBEAT_S` seconds (cell i of n,
elapsed), so a log file or CI shows the run is alive. Notebooks run in this interpreter, whichever
kernels are registered (:func:`kernel_manager_class`). The ``published`` profile downloads its data
(:mod:`lib.data`) when it is missing, ``HARMONY_DATA`` is unset and the network answers; ``make all``
runs it first (``--with-published``: the paper's results in minutes, before mini's hour), and a run of
whole profiles starts with a few lines saying what runs and about how long each part takes here
(:mod:`lib.plan`; each stage's stamp records its seconds and the model's, which calibrate the next plan).

Whatever fails (a corrupt file, a full or read-only disk, Ctrl-C, a failed cell) ends in one line
that says what to do and names the log file that holds the traceback (:func:`failure_line`), and
exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import errno
import fcntl
import functools
import hashlib
import importlib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from . import paths
from .params import (
    KERNEL,
    LOCK_FILE,
    PREPARED_STAMP,
    ParamsError,
    Profile,
    check_stage,
    load_profile,
    lock_holder,
    notebook_path,
)
from .pipeline.device import pin_arithmetic
from .pipeline.launch.slurm import SUBMIT_ONLY_ENV
from .pipeline.launch.status import JOB_STAGES
from .progress import HEARTBEAT_ENV, STAGE_ENV, clock
from .util import (
    READS_ENV,
    CorruptFile,
    atomic_write_json,
    atomic_write_text,
    digest,
    jsonable,
    lib_closure,
    mark,
    read_json,
    sha256_bytes,
)

pin_arithmetic()          # before any torch import here or in the kernels and jobs it starts

HEARTBEAT_S = 15.0        # a console line at least this often while a stage runs (when nothing else printed)
# The kernel's own progress bars (lm-eval, datasets) would be stored, a few hundred lines of them, in
# the executed notebook, which no one watches while it runs: the console gets lib.progress lines.
QUIET_KERNEL = {"TQDM_DISABLE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
QUIET_WARNINGS = "ignore:IProgress not found"      # tqdm.auto without ipywidgets, at import


# --------------------------------------------------------------------------- what a stage depends on
def _code_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _notebook_source_hash(path: Path) -> str:
    nb = json.loads(path.read_text())
    return sha256_bytes(json.dumps([(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]))


def stage_key(stage: str, params: dict, root: Path | None = None) -> dict:
    """What determines a stage besides its inputs: notebook source, parameters, lib closure."""
    root = root or paths.ROOT
    nb = notebook_path(stage)
    files = lib_closure(_code_cells(nb), root)
    return {"notebook": _notebook_source_hash(nb), "params": params,
            "lib": {str(p.relative_to(root)): digest(p) for p in files}}


def _changed_inputs(reads: dict[str, str]) -> list[str]:
    """The recorded inputs whose content differs now (each looked up where it lies today)."""
    return [p for p, d in reads.items() if digest(paths.located(p)) != d]


def _key_change(old: dict, new: dict) -> str:
    """Which part of a stage's key changed, in words."""
    if not isinstance(old, dict):
        return "its cache stamp is from another version"
    if old.get("notebook") != new["notebook"]:
        return "its notebook changed"
    if old.get("params") != jsonable(new["params"]):
        changed = sorted(k for k in set(new["params"]) | set(old.get("params") or {})
                         if (old.get("params") or {}).get(k) != jsonable(new["params"]).get(k))
        return f"its parameters changed ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''})"
    lib = [f for f in set(new["lib"]) | set(old.get("lib") or {}) if (old.get("lib") or {}).get(f) != new["lib"].get(f)]
    return f"{sorted(lib)[0]} changed" + (f" (and {len(lib) - 1} more lib files)" if len(lib) > 1 else "") \
        if lib else "its key changed"


def results_digest(out_dir: Path) -> str:
    """Content digest of the results a stage folder holds: summary.json, numbers.tex and the
    tables, by relative path. Not the figures (a PDF records when it was drawn) nor the executed
    notebook (only the runner writes it), so a notebook stepped through in JupyterLab that wrote
    the same numbers leaves its stage cached, and one that wrote other numbers does not."""
    h = hashlib.sha256()
    for path in sorted(out_dir.rglob("*")):
        rel = path.relative_to(out_dir)
        if (path.is_file() and rel.parts[0] != "figures" and path.suffix != ".ipynb"
                and not any(part.startswith(".") for part in rel.parts)):
            h.update(f"{rel.as_posix()}\0{digest(path)}\n".encode())
    return h.hexdigest()


def stale(out_dir: Path, key: dict) -> str | None:
    """None when the stage is cached: its stamp holds ``key``, its summary.json parses, every input
    it read holds what it held then (by content, wherever HARMONY_DATA or outputs/ points now), and
    its folder holds the results that run wrote (:func:`results_digest`: a notebook run by hand in
    JupyterLab may have changed them).
    Otherwise the reason it runs, in a few words."""
    stamp = out_dir / paths.STAGE_STAMP
    if not stamp.exists():
        return "no finished run"
    try:
        record = read_json(stamp)
    except CorruptFile:
        return "its cache stamp does not parse"
    if not isinstance(record, dict) or jsonable(record.get("key")) != jsonable(key):
        return _key_change(record.get("key") if isinstance(record, dict) else None, key)
    try:
        read_json(out_dir / "summary.json")
    except FileNotFoundError:
        return "its summary.json is missing"
    except CorruptFile:
        return "its summary.json does not parse"
    changed = _changed_inputs(record.get("reads", {}))
    if changed:
        return f"{changed[0]} changed" + (f" (and {len(changed) - 1} more inputs)" if len(changed) > 1 else "")
    if record.get("outputs") != results_digest(out_dir):
        return "its outputs differ from what its last run wrote"
    return None


def is_cached(out_dir: Path, key: dict) -> bool:
    """True when the stage need not run again (:func:`stale` has no reason)."""
    return stale(out_dir, key) is None


# --------------------------------------------------------------------------- running
def run_prepare(prof: Profile) -> None:
    """Call the profile's prepare hooks: ``"module:function"`` or ``{"module:function": {kwargs}}``.

    Each is called as ``function(profile_name, **kwargs)`` and must cache its own work.
    """
    for item in prof.prepare:
        spec, kwargs = (next(iter(item.items())) if isinstance(item, dict) else (item, {}))
        mod_name, _, func_name = spec.partition(":")
        try:
            func = getattr(importlib.import_module(mod_name), func_name)
        except (ImportError, AttributeError) as exc:
            raise ParamsError(f"{prof.path}: prepare hook {spec!r} cannot be loaded: {exc}") from None
        t0 = time.time()
        print(f"[{prof.name}] prepare {spec} ...", flush=True)
        with Heartbeat(f"[{prof.name}] prepare {spec}"):
            func(prof.name, **(kwargs or {}))
        print(f"[{prof.name}] prepare {spec} done in {time.time() - t0:.1f}s", flush=True)
    if prof.prepare:     # notebooks stepped through in JupyterLab check this before they start
        mark(paths.profile_dir(prof.name) / PREPARED_STAMP, prof.prepare, finished=time.time())


# --------------------------------------------------------------------------- the kernel
@functools.cache
def kernel_manager_class():
    """The kernel manager the runner gives papermill (built on first use: jupyter_client loads lazily).

    - The kernel is this interpreter (``sys.executable``), whatever kernels are registered where:
      a ``train-before-test`` kernel registered by another checkout cannot run our notebooks.
    - Its channels are encrypted with CurveZMQ keys that the manager provisions (the kernel spec
      declares support), so the kernel has no reason to warn about plain-text TCP.
    - A finished notebook's kernel is shut down with a shutdown request only. jupyter_client's
      graceful shutdown first sends SIGINT, which can reach the kernel while it still finishes
      its last reply (papermill asks for ``kernel_info`` right before shutting down); ipykernel
      then logs ``ERROR | KeyboardInterrupt caught in kernel`` although nothing went wrong.
      Interrupting a running cell (nbclient's timeouts) still sends SIGINT.
    """
    import zmq
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpec
    from traitlets import default

    class RunnerKernelManager(AsyncKernelManager):
        @default("transport_encryption")
        def _default_transport_encryption(self):
            return "auto" if zmq.has("curve") else "disabled"

        @property
        def kernel_spec(self):
            if self._kernel_spec is None:
                self._kernel_spec = KernelSpec(
                    argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    display_name=f"{KERNEL} (runner)", language="python", interrupt_mode="signal",
                    metadata={"supported_encryption": ["curve"]})
            return self._kernel_spec

        async def _async_interrupt_kernel(self):
            if self.shutting_down:        # the notebook has finished: nothing to interrupt
                return
            await super()._async_interrupt_kernel()

        interrupt_kernel = _async_interrupt_kernel

    return RunnerKernelManager


# --------------------------------------------------------------------------- console heartbeat
class Heartbeat:
    """While work runs, print ``<label>: cell i of n, 3m10s elapsed`` whenever the console has been
    quiet for ``every`` seconds. :class:`lib.progress.Progress` lines inside the kernel count as
    output (they touch the file named by ``TBT_HEARTBEAT``), so the two never repeat each other."""

    def __init__(self, label: str, cells: int = 0, every: float = HEARTBEAT_S, stream=None,
                 touch: Path | None = None):
        self.label, self.cells, self.every = label, cells, every
        self.stream = stream if stream is not None else sys.stdout
        self.touch = touch
        self.cell = 0
        self.start = self.last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tbt-heartbeat", daemon=True)

    def on_cell_start(self, cell=None, cell_index: int = 0, **_) -> None:
        """nbclient's hook: the cell ``cell_index`` (0-based) starts."""
        self.cell = cell_index + 1

    def line(self) -> str:
        where = f"cell {self.cell} of {self.cells}, " if self.cells else ""
        return f"{self.label}: {where}{clock(time.monotonic() - self.start)} elapsed"

    def _quiet_since(self) -> float:
        last = self.last
        if self.touch is not None:
            with contextlib.suppress(OSError):       # wall clock of the touch -> monotonic clock
                last = max(last, time.monotonic() - (time.time() - self.touch.stat().st_mtime))
        return time.monotonic() - last

    def _loop(self) -> None:
        while not self._stop.wait(min(1.0, self.every / 4)):
            if self._quiet_since() >= self.every:
                self.last = time.monotonic()
                with contextlib.suppress(OSError, ValueError):
                    self.stream.write(self.line() + "\n")
                    self.stream.flush()

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


# --------------------------------------------------------------------------- one run per profile
class RunLocked(RuntimeError):
    """Another run of the profile holds its lock; the message names it."""


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
        os.write(fd, json.dumps({"pid": os.getpid(), "command": _command(),
                                 "started": datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")}).encode())
        _held[path] = 1
        try:
            yield
        finally:
            _held.pop(path, None)
    finally:
        os.close(fd)         # releases the lock


def _command() -> str:
    if os.environ.get("MAKELEVEL") and os.environ.get("TBT_MAKE_GOAL"):
        return os.environ["TBT_MAKE_GOAL"]
    return " ".join(shlex.quote(a) for a in [Path(sys.executable).name, "-m", "lib.run", *sys.argv[1:]])


# --------------------------------------------------------------------------- running
def execute(stage: str, params: dict, out_dir: Path, label: str = "") -> dict[str, str]:
    """Execute one notebook with papermill; the executed copy appears only when it succeeded.
    Returns the inputs the stage recorded as read, with their content digests."""
    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / f"{stage}.ipynb"
    partial = out_dir / f".{stage}.partial.ipynb"
    reads_log = out_dir / ".reads.partial"
    touch = out_dir / ".heartbeat"
    reads_log.unlink(missing_ok=True)
    env = {READS_ENV: str(reads_log), STAGE_ENV: stage, HEARTBEAT_ENV: str(touch), **QUIET_KERNEL,
           "PYTHONWARNINGS": ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), QUIET_WARNINGS]))}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)                       # the kernel (a subprocess) inherits them
    n_cells = sum(c["cell_type"] == "code" for c in json.loads(notebook_path(stage).read_text())["cells"])
    try:
        with Heartbeat(label or stage, cells=n_cells + 1, touch=touch) as beat:   # + papermill's parameters cell
            pm.execute_notebook(str(notebook_path(stage)), str(partial), parameters=params,
                                kernel_name=KERNEL, kernel_manager_class=kernel_manager_class(),
                                cwd=str(paths.NOTEBOOKS), progress_bar=False, log_output=False,
                                on_cell_start=_code_cells_only(beat))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        with contextlib.suppress(OSError, ValueError):       # how far its long work got (lib.progress)
            done, total, what = touch.read_text().split(" ", 2)
            _where["units"] = (int(done), int(total), what)
        touch.unlink(missing_ok=True)
    reads = sorted(set(reads_log.read_text().split("\n")) - {""}) if reads_log.exists() else []
    reads_log.unlink(missing_ok=True)
    _tidy(partial, final)
    os.replace(partial, final)
    return {p: digest(paths.located(p)) for p in reads}


PROGRESS_BAR = re.compile(r"\d+%\|[^|\n]*\|\s*\d+/\d+|^[^\n]*\d+it \[\d+:\d+")   # tqdm's, with or without a total


def _tidy(notebook: Path, final: Path) -> None:
    """What the executed notebook keeps: no path of the machine it ran on (papermill records the
    input and output notebooks by absolute path: they are named from the repository instead) and no
    progress bars (a library that draws them into its cells' output, as lm-eval does, would leave a
    few hundred lines of them; the console had :mod:`lib.progress` lines meanwhile)."""
    import nbformat

    nb = nbformat.read(notebook, as_version=nbformat.NO_CONVERT)
    meta = nb.metadata.get("papermill", {})
    meta.update(input_path=paths.show(meta.get("input_path", "")), output_path=paths.show(final))
    for cell in nb.cells:
        outputs = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                lines = re.split(r"(?<=\n)|\r", out.get("text", ""))
                out["text"] = "".join(line for line in lines if not PROGRESS_BAR.search(line))
                if not out["text"].strip():
                    continue
            outputs.append(out)
        if "outputs" in cell:
            cell["outputs"] = outputs
    atomic_write_text(notebook, nbformat.writes(nb))


def _code_cells_only(beat: Heartbeat):
    count = {"n": 0}

    def hook(cell=None, cell_index: int = 0, **_):
        if cell is None or cell.get("cell_type") == "code":
            beat.on_cell_start(cell_index=count["n"])
            count["n"] += 1
    return hook


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


def run_profile(name: str, stages: list[str] | None = None, force: bool = False, wait: bool = False
                ) -> dict[str, dict]:
    """Run (or skip, when cached) the stages of profile ``name``; returns per-stage status/timing.
    Holds the profile's lock throughout (:func:`profile_lock`)."""
    prof = load_profile(name)                     # validates every stage before any work starts
    selected = _select(prof, stages)
    # Hugging Face's per-file download/load bars drown the stage lines (our own progress lines stay).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if prof.offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    modelled = _modelled(name)
    with profile_lock(name, wait=wait):
        t_start = time.time()
        run_prepare(prof)
        log: dict[str, dict] = {}
        submit_only = bool(os.environ.get(SUBMIT_ONLY_ENV))
        for i, stage in enumerate(selected):
            _where.update(profile=name, stage=stage, index=i, n=len(selected), units=None)
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
            (out_dir / paths.STAGE_STAMP).unlink(missing_ok=True)
            print(f"[{name}] {stage}: running ({reason}) ...", flush=True)
            t0 = time.time()
            try:
                reads = execute(stage, params, out_dir, label=f"[{name}] {stage}")
            except Exception as exc:
                if not (submit_only and getattr(exc, "ename", None) == "JobsSubmitted"):
                    raise
                print(f"[{name}] {stage}: {exc.evalue}", flush=True)
                log[stage] = {"status": "submitted", "seconds": time.time() - t0}
                continue
            dt = time.time() - t0
            read_json(out_dir / "summary.json", rebuild=paths.make_command(out_dir))    # it exists and parses
            mark(out_dir / paths.STAGE_STAMP, key, reads=reads, outputs=results_digest(out_dir), seconds=dt,
                 modelled_s=modelled.get(stage), finished=time.time())
            print(f"[{name}] {stage}: done in {dt:.1f}s -> {paths.show(out_dir)}", flush=True)
            log[stage] = {"status": "ran", "seconds": dt}
        total = time.time() - t_start
        _where.clear()
        if any(v["status"] == "submitted" for v in log.values()):
            print(f"[{name}] submitted: `make status PROFILE={name}` follows the jobs; `make all PROFILE={name}` "
                  "re-attaches to them, waits and runs the rest", flush=True)
            return log
        atomic_write_json(paths.profile_dir(name) / "run_log.json", {"stages": log, "total_seconds": total})
        from .figreview import review
        print(review(name), flush=True)          # the figures' checks and outputs/<profile>/figures.html
        from .leaderboard import review as leaderboard
        print(leaderboard(name), flush=True)     # outputs/<profile>/leaderboard.html
    print(f"[{name}] all stages finished in {total:.1f}s", flush=True)
    return log


def _modelled(name: str) -> dict[str, float]:
    """Each stage's seconds on the reference machine by :mod:`lib.plan`'s model of the work, recorded
    in its stamp next to the seconds it took, so the next run's plan knows this machine's speed."""
    from . import plan

    try:
        return {p.name: p.reference_s for p in plan.parts(name) if p.reference_s is not None}
    except (OSError, ValueError, KeyError, TypeError):          # an estimate never stops a run
        return {}


def print_plan(profiles: list[str], force: bool = False) -> None:
    """The lines :func:`lib.plan.plan_lines` gives for ``profiles``, the stages that are cached now
    counted as free (``force``: none is)."""
    from . import plan

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
    """A profile that imports the published results (its prepare hook is ``lib.published``'s) or is
    placed among them (``reference: published``)."""
    specs = [next(iter(i)) if isinstance(i, dict) else i for i in prof.prepare]
    return any(str(s).startswith("lib.published:") for s in specs) or prof.reference == "published"


def ensure_published_data(label: str = "[published]") -> str | None:
    """None when the published data is present (after downloading it if need be); otherwise one
    line saying why it is not and how to provide it. With ``HARMONY_DATA`` unset and the data not in
    ``data/published/``, it is downloaded there (:mod:`lib.data`: pinned, sha256-checked) when
    the network answers."""
    from . import data

    if paths.has_data(data.REQUIRED):
        return None
    if os.environ.get(paths.DATA_ENV):
        return (f"{paths.DATA_ENV}={os.environ[paths.DATA_ENV]} does not contain {data.REQUIRED} (point it at a "
                f"copy of the published data, or `unset {paths.DATA_ENV}` so that `make all` downloads it into "
                f"{paths.show(paths.DATA_DOWNLOADS)})")
    if not data.reachable():
        return (f"it is not in {paths.show(paths.DATA_DOWNLOADS)} and {data.host()} cannot be reached to download it "
                f"(`export {paths.DATA_ENV}=<folder with a copy>`, e.g. ../shared/data, then run the same command "
                "again)")
    print(f"{label} downloading the published data into {paths.show(paths.DATA_DOWNLOADS)} "
          "(pinned commits, sha256-checked) ...", flush=True)
    try:
        data.download(log=lambda line: print(f"{label}   {line}", flush=True))
    except data.DataError as exc:
        return str(exc)
    return None


# --------------------------------------------------------------------------- when something goes wrong
# Every failure the runner can meet ends in one line saying what happened and what to do, naming the
# log file that holds the traceback, and exit code 2 (make adds its own `Error 2` line).
_where: dict = {}        # the profile, stage (index of n) and units done of the stage running now
_ERRNO = re.compile(r"\[Errno (\d+)\][^:']*(?::\s*'([^']*)')?")


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


def _folder(filename: str | None) -> Path:
    """The folder an OSError concerns: the file's existing parent, else the running stage's folder."""
    if filename:
        path = Path(filename)
        while not path.exists() and path != path.parent:
            path = path.parent
        return path if path.is_dir() else path.parent
    if _where.get("stage"):
        return paths.stage_dir(_where["profile"], _where["stage"])
    return paths.OUTPUTS


def os_error_line(errno_: int, filename: str | None, profile: str) -> str | None:
    """What a full disk, a read-only folder or a missing permission means here, and what to do."""
    folder = _folder(filename)
    move = ("or move outputs/ to another disk and link it back (`mv outputs <disk>/outputs && ln -s "
            "<disk>/outputs outputs`: everything made so far stays cached), then run the same command again")
    if errno_ in (errno.ENOSPC, errno.EDQUOT):
        free = shutil.disk_usage(folder).free if folder.exists() else 0
        made = _size(paths.profile_dir(profile)) if paths.profile_dir(profile).exists() else 0
        return (f"no space left on the disk of {paths.show(folder)} ({_bytes(free)} free; "
                f"{paths.show(paths.profile_dir(profile))} holds {_bytes(made)} so far and needs more): free "
                f"space there, {move}")
    if errno_ == errno.EROFS:
        return f"{paths.show(folder)} is on a read-only file system: {move}"
    if errno_ in (errno.EACCES, errno.EPERM):
        return (f"no permission to write in {paths.show(folder)}: `chmod -R u+w {paths.show(folder)}`, {move}")
    return None


def _interrupted() -> str:
    w = _where
    if not w.get("stage"):
        return "interrupted before any stage started; the same command starts again"
    command = os.environ.get("TBT_MAKE_GOAL") or paths.make_command(w["profile"])
    units = w.get("units")
    if units and units[1]:
        done, total, what = units
        return (f"interrupted in {w['stage']} (stage {w['index'] + 1} of {w['n']}); `{command}` resumes from "
                f"{done} of {total} units of {what} (finished units are kept)")
    return (f"interrupted in {w['stage']} (stage {w['index'] + 1} of {w['n']}); `{command}` resumes from this "
            "stage (the stages before it are cached)")


def failure_line(exc: BaseException) -> str:
    """One line: what went wrong and what to do (the traceback goes to the log file)."""
    profile = _where.get("profile") or "?"
    where = f"[{profile}] {_where['stage']}: " if _where.get("stage") else ""
    name, text, filename, err = type(exc).__name__, str(exc), getattr(exc, "filename", None), None
    if name == "PapermillExecutionError":                 # raised in the notebook's kernel
        name, text = exc.ename, exc.evalue
    if isinstance(exc, KeyboardInterrupt) or name == "KeyboardInterrupt":
        return _interrupted()
    if isinstance(exc, OSError) and exc.errno is not None:
        err = exc.errno
    elif (m := _ERRNO.search(text)) is not None:
        err, filename = int(m.group(1)), m.group(2) or filename
    if err is not None and (line := os_error_line(err, filename, profile)):
        return where + line
    first = text.strip().splitlines()[0] if text.strip() else ""
    if name in ("JobError",):                              # the failed units were listed above, once
        return f"{where}{first}"
    if name in ("StoreError", "CorruptFile", "ItemFileError", "CorruptData", "DataMissing", "ParamsError",
                "PrerequisiteError", "MetadataError", "ModelError", "TaskError", "ItemDataError", "ZooError"):
        return f"{where}{name}: {first}"
    if exc.__class__.__name__ == "PapermillExecutionError":
        partial = paths.stage_dir(profile, _where["stage"]) / f".{_where['stage']}.partial.ipynb"
        return (f"{where}a cell failed ({name}: {first}); the partly executed notebook is "
                f"{paths.show(partial)}")
    return f"{where}{name}: {first}"


def write_log(exc: BaseException, argv: list[str]) -> Path | None:
    """The traceback (and a failed cell's) in ``outputs/<profile>/logs/run-<time>.log``, or in the
    temporary folder when outputs/ cannot take it (full, read-only); None when nowhere can."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    text = [f"command: {_command()}", f"argv: {argv}", f"when: {stamp}", f"where: {_where or 'before any stage'}", "",
            "".join(traceback.format_exception(exc))]
    if type(exc).__name__ == "PapermillExecutionError":
        text += ["the failed cell's traceback:", ANSI.sub("", "\n".join(exc.traceback))]
    profile = _where.get("profile") or (argv[0] if argv and not argv[0].startswith("-") else "run")
    for folder in (paths.profile_dir(profile) / "logs", Path(tempfile.gettempdir())):
        name = f"run-{stamp}.log" if folder.name == "logs" else f"tbt-{profile}-{stamp}.log"
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text("\n".join(text) + "\n", encoding="utf-8")
            return folder / name
    return None


ANSI = re.compile(r"\x1b\[[0-9;]*m")
# errors that explain themselves in one line (a mistyped key, a lock held, data not provided): no traceback
PLAIN = (ParamsError, paths.DataMissing, RunLocked)


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
        if not _INTERRUPTED.is_set() and logging.lastResort is not None:
            logging.lastResort.handle(record)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m lib.run", description=__doc__.splitlines()[0])
    ap.add_argument("profile", help="params/<profile>.yaml")
    ap.add_argument("--stages", nargs="*", help="run only these stages (full name or number, e.g. 04)")
    ap.add_argument("--force", action="store_true", help="ignore cached stages")
    ap.add_argument("--wait", action="store_true", help="wait for another run of the profile instead of stopping")
    ap.add_argument("--with-published", action="store_true",
                    help="first run the `published` profile, the paper's own results in a few minutes "
                         "(downloading its data when it is missing), then this one")
    args = ap.parse_args(argv)
    _where.clear()
    if threading.current_thread() is threading.main_thread():
        _INTERRUPTED.clear()
        signal.signal(signal.SIGINT, _on_sigint)
        root = logging.getLogger()
        if not any(isinstance(h, _LibraryWarnings) for h in root.handlers):
            root.addHandler(_LibraryWarnings(logging.WARNING))
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
                run_profile("published", None, args.force, wait=args.wait)
        run_profile(args.profile, args.stages, args.force, wait=args.wait)
    except PLAIN as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (Exception, KeyboardInterrupt) as exc:    # every other failure: one line, the traceback in a log
        line, log = failure_line(exc), write_log(exc, argv)
        where = f"traceback in {paths.show(log)}" if log else "no log file could be written"
        print(f"error: {line} ({where})", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
