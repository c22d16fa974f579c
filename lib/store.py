"""The results store: one small JSON file per (protocol, benchmark, model).

Files are written atomically (temporary name, then ``os.replace``), so an interrupted run never
leaves a half-written result that could be read as one. Loading the store gives one tidy
DataFrame with a row per result. Published results (``lib.published``) and our own runs
(``lib.pipeline``) land here in the same format, so every analysis reads them the same way.

Layout::

    <root>/<protocol>/<benchmark>/<model slug>.json     one result
    <root>/_meta/<kind>.json                             extra metadata (models, benchmarks)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

PROTOCOLS = ("direct_eval", "train_before_test")
SCHEMA = 1
COLUMNS = ["protocol", "benchmark", "model", "metric", "score", "stderr",
           "higher_is_better", "n", "provenance"]


class StoreError(ValueError):
    """A result (file) is malformed; the message names it."""


def atomic_write_bytes(path: str | os.PathLike, data: bytes, fsync: bool = True) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``.

    ``fsync=False`` skips the per-file flush to disk (bulk writers such as the published importer
    call ``os.sync()`` once at the end instead, before recording that the batch is complete).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str, fsync: bool = True) -> Path:
    """:func:`atomic_write_bytes` of UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _jsonable(obj: Any) -> Any:
    """numpy scalars/arrays and Paths -> plain JSON types."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 1) == 0:
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def atomic_write_json(path: str | os.PathLike, data: Any, fsync: bool = True) -> Path:
    return atomic_write_text(path, json.dumps(_jsonable(data), indent=1, sort_keys=True) + "\n", fsync=fsync)


def read_json(path: str | os.PathLike) -> Any:
    """Read JSON, raising :class:`StoreError` that names the file when it does not parse."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoreError(f"corrupted file {path}: {exc}") from None


def slug(name: str) -> str:
    """A file-name-safe, reversible form of a model or benchmark id (``org/model`` -> ``org__model``)."""
    if not name or name.strip() != name:
        raise StoreError(f"invalid name {name!r}: empty or surrounded by whitespace")
    if "__" in name or "\\" in name or name.startswith("."):
        raise StoreError(f"invalid name {name!r}: may not contain '__' or '\\' or start with '.'")
    return name.replace("/", "__")


def unslug(s: str) -> str:
    return s.replace("__", "/")


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

    def validate(self) -> "Result":
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


def exists(root: str | os.PathLike, protocol: str, benchmark: str, model: str) -> bool:
    return path_for(root, protocol, benchmark, model).exists()


def read(path: str | os.PathLike) -> Result:
    """Read one result file; any problem raises :class:`StoreError` naming the file."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise StoreError(f"corrupted result file {path}: not a JSON object")
    if data.get("schema") != SCHEMA:
        raise StoreError(f"corrupted result file {path}: schema {data.get('schema')!r}, expected {SCHEMA}")
    fields = {k: data.get(k) for k in Result.__dataclass_fields__}
    missing = [k for k in ("protocol", "benchmark", "model", "metric", "score") if fields[k] is None]
    if missing:
        raise StoreError(f"corrupted result file {path}: missing {', '.join(missing)}")
    fields["provenance"] = fields["provenance"] or {}
    if fields["higher_is_better"] is None:
        fields["higher_is_better"] = True
    try:
        return Result(**fields).validate()
    except StoreError as exc:
        raise StoreError(f"corrupted result file {path}: {exc}") from None


def iter_paths(root: str | os.PathLike):
    root = Path(root)
    for protocol_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")):
        for path in sorted(protocol_dir.glob("*/*.json")):
            yield path


def load(root: str | os.PathLike, protocol: str | None = None) -> pd.DataFrame:
    """All results under ``root`` as one tidy DataFrame (columns :data:`COLUMNS`)."""
    root = Path(root)
    if not root.is_dir():
        raise StoreError(f"results store {root} does not exist (run the stages that fill it first)")
    rows = []
    for path in iter_paths(root):
        res = read(path)
        if protocol is None or res.protocol == protocol:
            rows.append(asdict(res))
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


def read_meta(root: str | os.PathLike, kind: str) -> dict[str, dict]:
    path = Path(root) / "_meta" / f"{kind}.json"
    return read_json(path) if path.exists() else {}
