"""Small helpers every layer uses: atomic files and folders, digests, JSON, "did you mean", stamps.

- :func:`atomic_write_bytes` / :func:`atomic_write_text` / :func:`atomic_write_json` write a file
  through a temporary sibling and ``os.replace``, so a reader never sees half a file;
  :func:`atomic_dir` does the same for a folder that a callback fills.
- :func:`read_json` names the file when it does not parse (:class:`CorruptFile`).
- :func:`sha256_file` and :func:`digest` (a file or a whole folder, by content); :func:`code_digest`
  (what a Python file does: a comment or docstring leaves it as it is).
- :func:`jsonable` turns numpy values and paths into plain JSON types.
- :func:`did_you_mean`: the one close-match hint of every error that names an unknown thing.
- :func:`current` / :func:`mark`: the one "is this cached and current?" check. A *stamp* is a
  small JSON file holding a ``key`` (whatever determines the cached work: a config, a file's
  sha256); cached work is reused only when its stamp's key equals the key asked for.
- :func:`note_read`: stages record the inputs they read, so the runner can tell when a cached
  stage is stale (:mod:`runner.run`).
- :func:`short_warning_paths`: warnings name their file from its package, not by a path of this
  machine (they end up in executed notebooks).
"""

from __future__ import annotations

import ast
import difflib
import functools
import hashlib
import json
import linecache
import math
import os
import platform
import shutil
import site
import sysconfig
import tempfile
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .errors import UserError
from .paths import ROOT, portable

READS_ENV = "TBT_READS"      # set by runner.run: file to which a running stage appends what it reads
FORCE_ENV = "TBT_FORCE_SINCE"  # set by runner.run under FORCE=1: results and units written before this time are redone


class CorruptFile(UserError, ValueError):
    """A file that should hold JSON does not parse; the message names it and how to rebuild it."""


# --------------------------------------------------------------------------- atomic writes
def atomic_write_bytes(path: str | os.PathLike, data: bytes, fsync: bool = True) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``.

    The file gets the permissions of a normal new file (``0666`` minus the umask), like the
    figures written next to it. ``fsync=False`` skips the flush to disk (bulk writers call
    ``os.sync()`` once at the end instead).
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
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str, fsync: bool = True) -> Path:
    """:func:`atomic_write_bytes` of UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)


def atomic_write_json(path: str | os.PathLike, data: Any, fsync: bool = True) -> Path:
    """:func:`atomic_write_text` of ``data`` as indented JSON with sorted keys."""
    return atomic_write_text(path, json.dumps(jsonable(data), indent=1, sort_keys=True) + "\n", fsync=fsync)


def atomic_dir(target: str | os.PathLike, fill: Callable[[Path], None]) -> Path:
    """Call ``fill(tmp)`` on a temporary sibling folder, then rename it to ``target`` (replacing
    an older one), so a half-written folder is never found under ``target``."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        fill(tmp)
        os.chmod(tmp, 0o777 & ~_umask())
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def read_json(path: str | os.PathLike, rebuild: str = "") -> Any:
    """Read JSON; a file that does not parse raises :class:`CorruptFile` naming it (and, given
    ``rebuild``, the command that rebuilds it)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        hint = f"; delete it and run `{rebuild}` to rebuild it" if rebuild else ""
        raise CorruptFile(f"corrupted file {path}: {exc}{hint}") from None


# --------------------------------------------------------------------------- digests and JSON
def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes | str) -> str:
    """Hex sha256 of bytes (or of a string's UTF-8 encoding)."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


@functools.lru_cache(maxsize=65536)
def _file_digest(path: str, size: int, mtime_ns: int, root: str = "") -> str:   # the stat makes the cache safe
    if root and path.endswith((".yaml", ".yml")):      # a task YAML names its data files absolutely (below)
        text = Path(path).read_text(encoding="utf-8")
        return hashlib.sha256(text.replace(root, "<folder>").encode()).hexdigest()
    return sha256_file(path)


def digest(path: str | os.PathLike) -> str:
    """Content digest of a file, or of a folder (every file under it by relative path and content;
    hidden temporary files and Python's bytecode caches excluded: a task folder's ``utils.py``
    leaves a ``__pycache__`` once lm-eval imports it); ``"missing"`` when the path does not exist.
    In a YAML file the folder's own absolute path counts as the same text wherever the folder lies:
    lm-eval reads a local task's data files from the working directory, so its YAML names them
    absolutely (:mod:`lib.pipeline.localtasks`), and a moved checkout must not re-run what read it."""
    path = Path(path)
    if not path.exists():
        return "missing"
    if path.is_file():
        st = path.stat()
        return _file_digest(str(path), st.st_size, st.st_mtime_ns, os.path.abspath(path.parent))
    h = hashlib.sha256()
    root = os.path.abspath(path)
    for sub in sorted(path.rglob("*")):
        rel = sub.relative_to(path)
        if sub.is_file() and not any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            st = sub.stat()
            h.update(f"{rel.as_posix()}\0{_file_digest(str(sub), st.st_size, st.st_mtime_ns, root)}\n".encode())
    return h.hexdigest()


def jsonable(obj: Any) -> Any:
    """numpy scalars/arrays, tuples and Paths -> plain JSON types; non-finite floats -> None."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 1) == 0:
        obj = obj.item()
    elif hasattr(obj, "tolist"):
        return jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


# --------------------------------------------------------------------------- messages
def did_you_mean(word: str, options: Iterable, n: int = 1, cutoff: float = 0.6) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``options`` to ``word``, or ``""``."""
    match = difflib.get_close_matches(str(word), [str(o) for o in options], n=n, cutoff=cutoff)
    return f" (did you mean {', '.join(map(repr, match))}?)" if match else ""


# --------------------------------------------------------------------------- stamps
def current(stamp: str | os.PathLike, key: Any, needs: Iterable[str | os.PathLike] = (),
            field: str = "key") -> dict | None:
    """The record of ``stamp`` if its ``field`` equals ``key`` (compared as JSON) and every path of
    ``needs`` exists; else None (the cached work is missing, unfinished or made another way)."""
    stamp = Path(stamp)
    if not stamp.exists():
        return None
    try:
        record = read_json(stamp)
    except CorruptFile:
        return None
    if not isinstance(record, dict) or jsonable(record.get(field)) != jsonable(key):
        return None
    return record if all(Path(p).exists() for p in needs) else None


def mark(stamp: str | os.PathLike, key: Any, **record: Any) -> dict:
    """Write the stamp of finished work: ``{"key": key, **record}`` (atomically, last)."""
    data = {"key": key, **record}
    atomic_write_json(stamp, data)
    return jsonable(data)


# --------------------------------------------------------------------------- what code a computation runs
def code_digest(path: str | os.PathLike) -> str:
    """Digest of what a Python source file does: its syntax tree without docstrings, so that a
    comment, a docstring or the layout of a line leaves it as it is, and any other edit (a changed
    constant, a renamed variable, a moved statement) changes it."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()


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
    root = root or ROOT
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
            todo |= _imports_of(path.read_text(), sub, path.name == "__init__.py") - set(seen)
    return sorted(set(seen.values()))


@functools.lru_cache(maxsize=512)
def _imports_of(source: str, module: str, is_package: bool) -> frozenset[str]:
    """:func:`_imported` of a module's source, remembered by its content: the runner and the plan
    of ``make all`` ask for the same modules' imports for every stage (an edited file is parsed anew)."""
    return frozenset(_imported(_parse(source), module, is_package))


def _parse(source: str) -> ast.AST:
    try:
        return ast.parse(source)
    except SyntaxError:      # IPython magics: keep the lines Python can read
        return ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))


# --------------------------------------------------------------------------- recorded reads
def note_read(path: str | os.PathLike) -> None:
    """Record that the running stage read ``path`` (a file or folder) when ``runner.run`` asks for it
    (environment variable ``TBT_READS``); a no-op otherwise. The record names the path relative to
    the outputs folder, the published data folder or the repository (:func:`lib.paths.portable`),
    so a moved folder is the same input and other data under the same name is not."""
    log = os.environ.get(READS_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(portable(path) + "\n")


# --------------------------------------------------------------------------- warnings
def short_warning_paths() -> None:
    """From now on a warning names its file as ``peft/tuners/lora/layer.py`` (from its package) or
    ``lib/...`` (from the repository), not by the path of this machine's environment."""
    if getattr(warnings.formatwarning, "_short_paths", False):
        return
    original = warnings.formatwarning

    def formatwarning(message, category, filename, lineno, line=None):
        if line is None:
            line = linecache.getline(filename, lineno)
        return original(message, category, short_path(filename), lineno, line)

    formatwarning._short_paths = True
    warnings.formatwarning = formatwarning


def short_path(filename: str) -> str:
    """``filename`` relative to the site-packages or standard library folder that holds it, or to
    the repository; unchanged when it lies elsewhere."""
    bases = [*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["stdlib"],
             str(Path(__file__).resolve().parents[1])]
    for base in sorted(set(bases), key=len, reverse=True):
        if base and filename.startswith(base.rstrip(os.sep) + os.sep):
            return filename[len(base.rstrip(os.sep)) + 1:]
    return filename


# --------------------------------------------------------------------------- the CPU arithmetic
# The same CPU arithmetic on every x86-64 machine (lib/pipeline/device.py says why); here, in the
# ground floor, so that a command can pin it before numpy loads without importing the pipeline.
PINNED_ARITHMETIC = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT",
                     "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "1"}


def pin_arithmetic(environ=None) -> dict[str, str]:
    """Set :data:`PINNED_ARITHMETIC` in ``environ`` (default ``os.environ``) where unset, on x86-64
    machines (elsewhere the variables mean nothing); returns the values in force."""
    environ = os.environ if environ is None else environ
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return {}
    for key, value in PINNED_ARITHMETIC.items():
        environ.setdefault(key, value)
    return {key: environ[key] for key in PINNED_ARITHMETIC}
