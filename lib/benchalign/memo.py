"""Notebook 07's finished units of work, kept on disk so that an interrupted run resumes.

A unit is what :class:`lib.progress.Progress` counts in :func:`lib.benchalign.experiments.benchalign_report`:
one method with all its seeds, one ranking loss of the ablation, one (kind, count) of the data-needs
study, the cross-paper experiment. Each is stored under ``<work>/benchalign/<unit>.pkl``
(:func:`lib.layout.benchalign_dir`), written atomically, with the key it was made under: the item
data and the split (by content), the settings, the seeds, the unit's own arguments, the source of
the ``lib`` modules that compute it and the library versions and thread count that decide its
floating-point results. A unit whose key differs, or whose file does not read, is computed again,
so a resumed run ends with exactly the numbers of an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .. import paths
from ..util import atomic_write_bytes, code_digest, jsonable, lib_closure

T = TypeVar("T")


def data_key(data) -> str:
    """Content digest of an :class:`lib.benchalign.data.ItemData` (what the fits see of it)."""
    h = hashlib.sha256()
    for arr in (data.X, data.item_benchmark, data.item_id, data.target, data.size_b, data.instruct):
        if arr is None:
            h.update(b"none")
            continue
        arr = np.asarray(arr)
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(arr.tobytes() if arr.dtype != object else json.dumps(arr.tolist()).encode())
    h.update(json.dumps(list(data.models)).encode())
    return h.hexdigest()


def code_key() -> dict:
    """The ``lib`` source files 07's computations run (by what they do: :func:`lib.util.code_digest`,
    so a comment or docstring redoes nothing) and the versions, threads and
    pinned kernels (lib.pipeline.device's arithmetic: an earlier MKL_CBWR gave other last bits) that
    decide their floating-point results."""
    import torch

    files = lib_closure(["import lib.benchalign.experiments"])
    return {"lib": {p.relative_to(paths.ROOT).as_posix(): code_digest(p) for p in files},
            "numpy": np.__version__, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "kernels": str(torch.backends.cpu.get_cpu_capability()), "mkl_cbwr": os.environ.get("MKL_CBWR"),
            "python": sys.version.split()[0]}


class Memo:
    """``memo(name, compute, **args)``: the stored value of unit ``name`` when it was made under the
    same key (``self.key`` plus ``args``), else ``compute()``, stored before it is returned.
    ``folder=None`` keeps nothing (every unit is computed)."""

    def __init__(self, folder: str | Path | None, **key: Any):
        self.folder = Path(folder) if folder is not None else None
        self.key = jsonable(key)
        self.reused: list[str] = []
        self.redone: list[str] = []       # units whose stored file did not read

    @classmethod
    def for_report(cls, folder, data, split, cfg, seeds: int, n_boot: int) -> Memo:
        if folder is None:
            return cls(None)
        split = {"source": np.asarray(split.source).tolist(),
                 "groups": {g: np.asarray(v).tolist() for g, v in split.groups.items()}}
        return cls(folder, data=data_key(data), split=split, cfg=asdict(cfg), seeds=seeds, n_boot=n_boot,
                   code=code_key())

    def __call__(self, name: str, compute: Callable[[], T], **args: Any) -> T:
        if self.folder is None:
            return compute()
        key = hashlib.sha256(json.dumps({**self.key, "unit": name, "args": jsonable(args)},
                                        sort_keys=True).encode()).hexdigest()
        path = self.folder / f"{name}.pkl"
        if path.exists():
            try:
                stored = pickle.loads(path.read_bytes())
                if stored["key"] == key:
                    self.reused.append(name)
                    return stored["value"]
            except Exception:  # noqa: BLE001 - a truncated or foreign file: computed again
                self.redone.append(name)
        value = compute()
        atomic_write_bytes(path, pickle.dumps({"key": key, "value": value}, protocol=pickle.HIGHEST_PROTOCOL),
                           fsync=False)
        return value

    def line(self, total: int) -> str | None:
        """One line about what an earlier run had finished (None when nothing was reused)."""
        if not self.reused and not self.redone:
            return None
        text = f"{len(self.reused)} of {total} units finished by an earlier run, reused from {paths.show(self.folder)}"
        if self.redone:
            text += f"; {len(self.redone)} stored units did not read and were computed again ({', '.join(self.redone)})"
        return text
