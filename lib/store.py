"""The results store: one small JSON file per (protocol, benchmark, model), written atomically, so
an interrupted run never leaves a half-written result that could be read as one. Published results
(``runner.published``) and our own runs (``lib.pipeline``) land here in the same format; loading the
store gives one tidy DataFrame::

    <root>/<protocol>/<benchmark>/<model slug>.json     one result
    <root>/_meta/<kind>.json                             extra metadata (models, benchmarks)
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from . import paths
from .errors import UserError
from .stages import DIRECT, TBT
from .util import CorruptFile, atomic_write_json, note_read, read_json

# The two protocols, spelled the same way in the store, the job grid, the tables and the figures.
PROTOCOLS = (DIRECT, TBT)
# Cheaper variants of them (issue 42), stored under names of their own: direct evaluation with k
# examples of the training split in the prompt, and train-before-test on a reduced budget.
REDUCED = f"{TBT}_reduced"


def fewshot_protocol(k: int) -> str:
    """The store's name of direct evaluation with ``k`` in-context examples (0: direct evaluation)."""
    return f"{DIRECT}_{k}shot" if k else DIRECT


def base_protocol(name: str) -> str:
    """The protocol a store protocol name is a form of (DIRECT or TBT); raises on any other name."""
    for base in (TBT, DIRECT):
        if name == base or name.startswith(base + "_"):
            return base
    raise ValueError(f"unknown protocol {name!r}: expected {DIRECT!r}, {TBT!r} or a form of one "
                     f"({fewshot_protocol(5)!r}, {REDUCED!r})")
SCHEMA = 1
COLUMNS = ["protocol", "benchmark", "model", "metric", "score", "stderr",
           "higher_is_better", "n", "provenance"]


class StoreError(UserError, ValueError):
    """A result (file) is malformed; the message names it."""


def slug(name: str) -> str:
    """A file-name-safe, reversible form of a model or benchmark id (``org/model`` -> ``org__model``)."""
    if not name or name.strip() != name:
        raise StoreError(f"invalid name {name!r}: empty or surrounded by whitespace")
    if "__" in name or "\\" in name or name.startswith("."):
        raise StoreError(f"invalid name {name!r}: may not contain '__' or '\\' or start with '.'")
    return name.replace("/", "__")


@dataclass(frozen=True)
class Result:
    protocol: str
    benchmark: str
    model: str
    metric: str
    score: float
    stderr: float | None = None
    higher_is_better: bool = True
    n: int | None = None
    provenance: dict = field(default_factory=dict)

    def validate(self) -> Result:
        where = f"result ({self.protocol}, {self.benchmark}, {self.model})"
        for key in ("protocol", "benchmark", "model", "metric"):
            val = getattr(self, key)
            if not isinstance(val, str) or not val:
                raise StoreError(f"{where}: {key} must be a non-empty string, got {val!r}")
        if isinstance(self.score, bool) or not isinstance(self.score, (int, float)) \
                or not math.isfinite(self.score):
            raise StoreError(f"{where}: score must be a finite number, got {self.score!r}")
        if self.stderr is not None and (isinstance(self.stderr, bool) or not isinstance(self.stderr, (int, float))):
            raise StoreError(f"{where}: stderr must be a number or null, got {self.stderr!r}")
        if not isinstance(self.higher_is_better, bool):
            raise StoreError(f"{where}: higher_is_better must be true/false, got {self.higher_is_better!r}")
        if not isinstance(self.provenance, dict):
            raise StoreError(f"{where}: provenance must be a mapping")
        return self


def path_for(root: str | os.PathLike, protocol: str, benchmark: str, model: str) -> Path:
    return Path(root) / slug(protocol) / slug(benchmark) / f"{slug(model)}.json"


def write(root: str | os.PathLike, result: Result, fsync: bool = True) -> Path:
    """Validate and atomically write one result; returns its path."""
    result.validate()
    record = {"schema": SCHEMA, **asdict(result)}
    if record["stderr"] is not None and not math.isfinite(record["stderr"]):
        record["stderr"] = None
    return atomic_write_json(path_for(root, result.protocol, result.benchmark, result.model), record, fsync=fsync)


def read(path: str | os.PathLike) -> Result:
    """Read one result file; a :class:`StoreError` names a bad one and the command that remakes it."""
    path = Path(path)

    def bad(why: str) -> StoreError:
        fix = f"delete it and run `{paths.make_command(path)}` (it redoes only what is missing)"
        return StoreError(f"{why}; {fix}")

    try:
        data = read_json(path)
    except CorruptFile as exc:
        raise bad(str(exc)) from None
    if not isinstance(data, dict):
        raise bad(f"corrupted result file {path}: not a JSON object")
    if data.get("schema") != SCHEMA:
        raise bad(f"corrupted result file {path}: schema {data.get('schema')!r}, expected {SCHEMA}")
    fields = {k: data.get(k) for k in Result.__dataclass_fields__}
    missing = [k for k in ("protocol", "benchmark", "model", "metric", "score") if fields[k] is None]
    if missing:
        raise bad(f"corrupted result file {path}: missing {', '.join(missing)}")
    fields["provenance"] = fields["provenance"] or {}
    if fields["higher_is_better"] is None:
        fields["higher_is_better"] = True
    try:
        return Result(**fields).validate()
    except StoreError as exc:
        raise bad(f"corrupted result file {path}: {exc}") from None


def iter_paths(root: str | os.PathLike):
    root = Path(root)
    for protocol_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")):
        yield from sorted(protocol_dir.glob("*/*.json"))


def load(root: str | os.PathLike, protocol: str | None = None) -> pd.DataFrame:
    """All results under ``root`` (of one ``protocol`` if given) as one tidy DataFrame."""
    root = Path(root)
    if not root.is_dir():
        raise StoreError(f"results store {root} does not exist (run the stages that fill it first: "
                         f"`{paths.make_command(root)}`)")
    note_read(root / protocol if protocol else root)
    rows = []
    for path in iter_paths(root):
        if protocol is None or path.parent.parent.name == slug(protocol):
            rows.append(asdict(read(path)))
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.sort_values(["protocol", "benchmark", "model"], ignore_index=True)


def matrix(df: pd.DataFrame, protocol: str, benchmarks: list[str] | None = None) -> pd.DataFrame:
    """Model x benchmark score matrix of one protocol (NaN where a model was not scored)."""
    sub = df[df["protocol"] == protocol]
    if sub.empty:
        raise StoreError(f"no results for protocol {protocol!r}; present: {sorted(df['protocol'].unique())}")
    wide = sub.pivot(index="model", columns="benchmark", values="score")
    if benchmarks is not None:
        unknown = sorted(set(benchmarks) - set(wide.columns))
        if unknown:
            raise StoreError(f"benchmarks not in the store for {protocol}: {unknown}")
        wide = wide[list(benchmarks)]
    wide.columns.name = None
    return wide


def write_meta(root: str | os.PathLike, kind: str, records: dict[str, dict]) -> Path:
    """Merge extra metadata (``kind`` in {'models', 'benchmarks'}) into ``<root>/_meta/<kind>.json``."""
    if kind not in ("models", "benchmarks"):
        raise StoreError(f"unknown metadata kind {kind!r} (expected 'models' or 'benchmarks')")
    path = Path(root) / "_meta" / f"{kind}.json"
    current = read_json(path) if path.exists() else {}
    current.update(records)
    return atomic_write_json(path, current)


def meta_path(root: str | os.PathLike, path: str) -> Path:
    """A path recorded in the metadata (a model's folder) where it lies now: ``outputs:<profile>/...``
    under today's outputs folder (:func:`lib.paths.located`), another relative one under the store
    root, an absolute one as it is."""
    prefix, sep, _ = path.partition(":")
    if sep and prefix in paths.PORTABLE_ROOTS:
        return paths.located(path)
    return Path(root) / path if not Path(path).is_absolute() else Path(path)


def relative_meta_path(root: str | os.PathLike, path: str | os.PathLike) -> str:
    """``path`` as :func:`meta_path` reads it back, naming no folder of this machine: ``outputs:...``
    under the outputs folder, else relative to the store's parent folder, else absolute."""
    name = paths.portable(path)
    if name.startswith("outputs:"):
        return name
    for resolve in (os.path.abspath, os.path.realpath):     # as written, then with links resolved
        try:
            return (Path("..") / Path(resolve(path)).relative_to(Path(resolve(root)).parent)).as_posix()
        except ValueError:
            continue
    return os.path.abspath(path)


def read_meta(root: str | os.PathLike, kind: str) -> dict[str, dict]:
    path = Path(root) / "_meta" / f"{kind}.json"
    note_read(path)
    return read_json(path) if path.exists() else {}


def directions(df: pd.DataFrame) -> dict[str, bool]:
    """``{benchmark: higher_is_better}`` from a tidy store frame (must be consistent per benchmark)."""
    per = df.groupby("benchmark")["higher_is_better"].agg(lambda s: set(s.astype(bool)))
    mixed = [b for b, v in per.items() if len(v) != 1]
    if mixed:
        raise StoreError(f"benchmarks with mixed higher_is_better in the store: {mixed}")
    return {b: next(iter(v)) for b, v in per.items()}


def orient(scores, higher_is_better: Mapping[str, bool] | bool):
    """Scores turned so that higher is better (lower-is-better ones negated): the one place where the
    direction of a score is applied. ``scores``: a model x benchmark matrix with a ``{benchmark: bool}``
    mapping (missing benchmarks count as higher-is-better), or one Series / array with a bool."""
    if isinstance(higher_is_better, bool):
        return scores if higher_is_better else -scores
    out = scores.copy()
    for col in out.columns:
        if not higher_is_better.get(col, True):
            out[col] = -out[col]
    return out
