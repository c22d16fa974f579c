"""The results tables that README.md and docs/ quote: their registry, number formats, and the reader
of a profile's ``summary.json`` files.

A table is one function ``fn(s: Summaries) -> list[str]`` (Markdown lines), registered with
:func:`table` under the name a docs block names (``<!-- results:<profile>/<name> -->``), in one of
the modules of :mod:`runner.tables`. It reads a summary through ``s(stage)``; a summary never
written raises :class:`Missing`, as does a table that a profile's design leaves out. Anything else
it raises (a ``KeyError`` of a renamed key) is a bug, which :mod:`runner.docblocks` reports as one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lib import paths, util
from lib.outputs import ci, est, f, gain, pair, pct  # the tables' number formats
from lib.stages import BY_NAME
from lib.store import DIRECT as D
from lib.store import TBT as T

__all__ = ["D", "T", "Missing", "Summaries", "TABLES", "table", "f", "ci", "est", "pair", "gain", "pct", "row",
           "header"]


class Missing(Exception):
    """What a table needs has not been written (its profile or stage has not run, or the profile's
    design leaves it out); the message says what and which command makes it."""


class Summaries:
    """The ``summary.json`` files of one profile, read once each."""

    def __init__(self, profile: str):
        self.profile = profile
        self._cache: dict[str, dict] = {}

    def __call__(self, stage: str) -> dict:
        """``stage``'s summary, by its name in :data:`lib.stages.STAGES` (another name is a bug here)."""
        if stage not in BY_NAME:
            raise KeyError(f"no stage {stage!r} in lib.stages.STAGES; stages: {list(BY_NAME)}")
        if stage not in self._cache:
            path = paths.stage_dir(self.profile, stage) / "summary.json"
            run = f"make run PROFILE={self.profile} STAGES={stage[:2]}"
            if not path.exists():
                raise Missing(f"outputs/{self.profile}/{stage}/summary.json is missing (`{run}`)")
            self._cache[stage] = util.read_json(path, rebuild=run)
        return self._cache[stage]


# ----------------------------------------------------------------------------- the registry
Table = Callable[[Summaries], list[str]]
TABLES: dict[str, Table] = {}


def table(name: str) -> Callable[[Table], Table]:
    """Register a table under ``name`` (the part after the profile in a block's marker)."""
    def register(fn: Table) -> Table:
        if name in TABLES and TABLES[name] is not fn:
            raise ValueError(f"results table {name!r} is registered twice ({TABLES[name].__module__}, {fn.__module__})")
        TABLES[name] = fn
        return fn
    return register


def row(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def header(*cells: str) -> list[str]:
    return [row(*cells), row(*["---"] * len(cells))]
