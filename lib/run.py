"""Run the notebooks of a profile, in order, through papermill: ``python -m lib.run PROFILE``.

Each stage writes ``outputs/<profile>/<stage>/`` (the executed notebook, summary.json, tables,
figures). A stage is skipped when nothing it depends on changed since its last successful run:

- its *key*: the notebook's source, its resolved parameters, and the source of the ``lib``
  modules it imports (followed through their own imports, :func:`lib_closure`), and
- its *reads*: every input it read while it ran (results store, earlier stages' summary.json,
  item files, published data, task folders), recorded by the stage itself through
  :func:`lib.util.note_read` and compared by content digest.

So editing ``lib/benchalign`` re-runs only 07, and a stage whose upstream outputs came out the
same stays cached. Long stages also cache per unit of work (``lib.pipeline.jobs``), so an
interrupted run resumes where it stopped.

One run per profile at a time: a run holds ``outputs/<profile>/.lock`` (``flock``, released by the
operating system when the process ends, however it ends); a second run stops with one line naming
the first (pid, command, start time), or waits for it with ``--wait``. While a stage runs, the
console gets a line whenever nothing else was printed for :data:`HEARTBEAT_S` seconds (cell i of n,
elapsed), so a log file or CI shows the run is alive. Notebooks run in this interpreter, whichever
kernels are registered (:func:`kernel_manager_class`). The ``published`` profile downloads its data
(:mod:`lib.data`) when it is missing, ``HARMONY_DATA`` is unset and the network answers.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import fcntl
import functools
import importlib
import json
import os
import shlex
import sys
import threading
import time
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
from .progress import HEARTBEAT_ENV, STAGE_ENV, clock
from .util import READS_ENV, atomic_write_json, current, digest, mark, sha256_bytes

pin_arithmetic()          # before any torch import here or in the kernels and jobs it starts

HEARTBEAT_S = 15.0        # a console line at least this often while a stage runs (when nothing else printed)


# --------------------------------------------------------------------------- what a stage depends on
def _code_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _notebook_source_hash(path: Path) -> str:
    nb = json.loads(path.read_text())
    return sha256_bytes(json.dumps([(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]))


def _module_file(name: str, root: Path) -> Path | None:
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Names of the ``lib`` modules a module's code imports (anywhere, lazy imports included)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.add(target)
            found |= {f"{target}.{a.name}" for a in node.names}     # `from pkg import module`
    return {n for n in found if n == "lib" or n.startswith("lib.")}


def lib_closure(sources: list[str], root: Path | None = None) -> list[Path]:
    """The ``lib`` source files that code ``sources`` imports, directly or through other ``lib``
    modules (with the ``__init__.py`` of every package on the way), sorted."""
    root = root or paths.ROOT
    todo = set().union(*(_imported(_parse(s), "__main__", False) for s in sources)) if sources else set()
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):                 # lib, lib.x, lib.x.y: packages run first
            sub = ".".join(parts[:i])
            if sub in seen:
                continue
            path = _module_file(sub, root)
            if path is None:
                continue                                    # an attribute imported from a module
            seen[sub] = path
            todo |= _imported(_parse(path.read_text()), sub, path.name == "__init__.py") - set(seen)
    return sorted(set(seen.values()))


def _parse(source: str) -> ast.AST:
    try:
        return ast.parse(source)
    except SyntaxError:      # IPython magics: keep the lines Python can read
        return ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))


def stage_key(stage: str, params: dict, root: Path | None = None) -> dict:
    """What determines a stage besides its inputs: notebook source, parameters, lib closure."""
    root = root or paths.ROOT
    nb = notebook_path(stage)
    files = lib_closure(_code_cells(nb), root)
    return {"notebook": _notebook_source_hash(nb), "params": params,
            "lib": {str(p.relative_to(root)): digest(p) for p in files}}


def _reads_now(reads: dict[str, str]) -> dict[str, str]:
    return {p: digest(p) for p in reads}


def is_cached(out_dir: Path, key: dict) -> bool:
    """True when the stage's stamp holds ``key`` and every input it read is unchanged."""
    record = current(out_dir / paths.STAGE_STAMP, key, needs=[out_dir / "summary.json"])
    return record is not None and _reads_now(record.get("reads", {})) == record.get("reads", {})


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
    env = {READS_ENV: str(reads_log), STAGE_ENV: stage, HEARTBEAT_ENV: str(touch)}
    os.environ.update(env)                       # the kernel (a subprocess) inherits them
    n_cells = sum(c["cell_type"] == "code" for c in json.loads(notebook_path(stage).read_text())["cells"])
    try:
        with Heartbeat(label or stage, cells=n_cells + 1, touch=touch) as beat:   # + papermill's parameters cell
            pm.execute_notebook(str(notebook_path(stage)), str(partial), parameters=params,
                                kernel_name=KERNEL, kernel_manager_class=kernel_manager_class(),
                                cwd=str(paths.NOTEBOOKS), progress_bar=False, log_output=False,
                                on_cell_start=_code_cells_only(beat))
    finally:
        for key in env:
            os.environ.pop(key, None)
        touch.unlink(missing_ok=True)
    reads = sorted(set(reads_log.read_text().split("\n")) - {""}) if reads_log.exists() else []
    reads_log.unlink(missing_ok=True)
    os.replace(partial, final)
    return {p: digest(p) for p in reads}


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
    with profile_lock(name, wait=wait):
        t_start = time.time()
        run_prepare(prof)
        log: dict[str, dict] = {}
        for stage in selected:
            params = check_stage(prof, stage)
            key = stage_key(stage, params)
            out_dir = paths.stage_dir(name, stage)
            if not force and is_cached(out_dir, key):
                print(f"[{name}] {stage}: cached", flush=True)
                log[stage] = {"status": "cached", "seconds": 0.0}
                continue
            (out_dir / paths.STAGE_STAMP).unlink(missing_ok=True)
            print(f"[{name}] {stage}: running ...", flush=True)
            t0 = time.time()
            reads = execute(stage, params, out_dir, label=f"[{name}] {stage}")
            dt = time.time() - t0
            if not (out_dir / "summary.json").exists():
                raise RuntimeError(f"stage {stage} finished without writing {out_dir / 'summary.json'}")
            mark(out_dir / paths.STAGE_STAMP, key, reads=reads, seconds=dt, finished=time.time())
            print(f"[{name}] {stage}: done in {dt:.1f}s -> {paths.show(out_dir)}", flush=True)
            log[stage] = {"status": "ran", "seconds": dt}
        total = time.time() - t_start
        atomic_write_json(paths.profile_dir(name) / "run_log.json", {"stages": log, "total_seconds": total})
        from .figreview import review
        print(review(name), flush=True)          # the figures' checks and outputs/<profile>/figures.html
    print(f"[{name}] all stages finished in {total:.1f}s", flush=True)
    return log


# --------------------------------------------------------------------------- published data
def needs_published_data(prof: Profile) -> bool:
    """A profile that imports the published results (its prepare hook is ``lib.published``'s)."""
    specs = [next(iter(i)) if isinstance(i, dict) else i for i in prof.prepare]
    return any(str(s).startswith("lib.published:") for s in specs)


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.run", description=__doc__.splitlines()[0])
    ap.add_argument("profile", help="params/<profile>.yaml")
    ap.add_argument("--stages", nargs="*", help="run only these stages (full name or number, e.g. 04)")
    ap.add_argument("--force", action="store_true", help="ignore cached stages")
    ap.add_argument("--wait", action="store_true", help="wait for another run of the profile instead of stopping")
    ap.add_argument("--then-published", action="store_true",
                    help="afterwards run the `published` profile (downloading its data when it is missing)")
    args = ap.parse_args(argv)
    try:
        prof = load_profile(args.profile)
        missing = ensure_published_data(f"[{args.profile}]") if needs_published_data(prof) else None
        if missing:
            raise paths.DataMissing(f"published data not found: {missing}")
        run_profile(args.profile, args.stages, args.force, wait=args.wait)
        if args.then_published and args.profile != "published":
            missing = ensure_published_data()
            if missing:
                print(f"[published] skipped: published data not found: {missing}", flush=True)
            else:
                run_profile("published", None, args.force, wait=args.wait)
    except (ParamsError, paths.DataMissing, RunLocked) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # papermill's PapermillExecutionError carries the cell's traceback
        if type(exc).__name__ != "PapermillExecutionError":
            raise
        print(f"error: a notebook cell failed ({exc.ename}: {exc.evalue}); the partially executed notebook "
              f"is kept as outputs/<profile>/<stage>/.<stage>.partial.ipynb for inspection", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
