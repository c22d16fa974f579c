"""The kernel a stage's notebook runs in, and what the console shows meanwhile.

:func:`execute` runs one notebook through papermill in this interpreter, whichever kernels are
registered (:func:`kernel_manager_class`), with the environment that tells the notebook's ``lib``
where to record what it reads and how far its work got; the executed copy appears only when it
succeeded, tidied of machine paths and progress bars (:func:`_tidy`). While it runs, the console gets
a line whenever nothing else was printed for :data:`HEARTBEAT_S` seconds (:class:`Heartbeat`: cell
i of n, elapsed), so a log file or CI shows the run is alive.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import sys
import threading
import time
from pathlib import Path
from unittest import mock

from lib import paths
from lib.params import KERNEL, notebook_path
from lib.progress import HEARTBEAT_ENV, STAGE_ENV, clock
from lib.util import READS_ENV, atomic_write_text, digest
from runner.stagecache import cells

HEARTBEAT_S = 15.0        # a console line at least this often while a stage runs (when nothing else printed)
# The kernel's own progress bars (lm-eval, datasets) would be stored, a few hundred lines of them, in
# the executed notebook, which no one watches while it runs: the console gets lib.progress lines.
QUIET_KERNEL = {"TQDM_DISABLE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
QUIET_WARNINGS = "ignore:IProgress not found"      # tqdm.auto without ipywidgets, at import


def execute(stage: str, params: dict, out_dir: Path, label: str = "", where=None) -> dict[str, str]:
    """Execute one notebook with papermill; the executed copy appears only when it succeeded.
    Returns the inputs the stage recorded as read, with their content digests; ``where`` (a
    :class:`runner.failures.Where`) gets how far the stage's long work got, also when it fails."""
    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / f"{stage}.ipynb"
    partial = out_dir / f".{stage}.partial.ipynb"
    reads_log = out_dir / ".reads.partial"
    touch = out_dir / ".heartbeat"
    reads_log.unlink(missing_ok=True)
    env = {READS_ENV: str(reads_log), STAGE_ENV: stage, HEARTBEAT_ENV: str(touch), **QUIET_KERNEL,
           "PYTHONWARNINGS": ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), QUIET_WARNINGS]))}
    n_cells = sum(kind == "code" for kind, _ in cells(stage))
    beat = Heartbeat(label or stage, cells=n_cells + 1, touch=touch)     # + papermill's parameters cell
    try:
        with mock.patch.dict(os.environ, env), beat:         # the kernel (a subprocess) inherits env
            pm.execute_notebook(str(notebook_path(stage)), str(partial), parameters=params,
                                kernel_name=KERNEL, kernel_manager_class=kernel_manager_class(),
                                cwd=str(paths.NOTEBOOKS), progress_bar=False, log_output=False,
                                on_cell_start=_code_cells_only(beat))
    finally:
        with contextlib.suppress(OSError, ValueError):       # how far its long work got (lib.progress)
            done, total, what = touch.read_text().split(" ", 2)
            if where is not None:
                where.units = (int(done), int(total), what)
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
    count = itertools.count()

    def hook(cell=None, cell_index: int = 0, **_):
        if cell is None or cell.get("cell_type") == "code":
            beat.on_cell_start(cell_index=next(count))
    return hook


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

