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
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import sys
import time
from pathlib import Path

from . import paths
from .params import ParamsError, Profile, check_stage, load_profile, notebook_path
from .progress import STAGE_ENV
from .util import READS_ENV, atomic_write_json, current, digest, mark, sha256_bytes


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
        func(prof.name, **(kwargs or {}))
        print(f"[{prof.name}] prepare {spec} done in {time.time() - t0:.1f}s", flush=True)


def execute(stage: str, params: dict, out_dir: Path, kernel: str = "python3", progress: bool = False
            ) -> dict[str, str]:
    """Execute one notebook with papermill; the executed copy appears only when it succeeded.
    Returns the inputs the stage recorded as read, with their content digests."""
    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / f"{stage}.ipynb"
    partial = out_dir / f".{stage}.partial.ipynb"
    reads_log = out_dir / ".reads.partial"
    reads_log.unlink(missing_ok=True)
    os.environ[READS_ENV] = str(reads_log)       # the kernel (a subprocess) inherits both
    os.environ[STAGE_ENV] = stage
    try:
        pm.execute_notebook(str(notebook_path(stage)), str(partial), parameters=params,
                            kernel_name=kernel, cwd=str(paths.NOTEBOOKS), progress_bar=progress,
                            log_output=False)
    finally:
        os.environ.pop(READS_ENV, None)
        os.environ.pop(STAGE_ENV, None)
    reads = sorted(set(reads_log.read_text().split("\n")) - {""}) if reads_log.exists() else []
    reads_log.unlink(missing_ok=True)
    os.replace(partial, final)
    return {p: digest(p) for p in reads}


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


def run_profile(name: str, stages: list[str] | None = None, force: bool = False,
                kernel: str = "python3") -> dict[str, dict]:
    """Run (or skip, when cached) the stages of profile ``name``; returns per-stage status/timing."""
    prof = load_profile(name)                     # validates every stage before any work starts
    selected = _select(prof, stages)
    # Hugging Face's per-file download/load bars drown the stage lines (our own tqdm bars stay).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if prof.offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
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
        reads = execute(stage, params, out_dir, kernel=kernel, progress=sys.stdout.isatty())
        dt = time.time() - t0
        if not (out_dir / "summary.json").exists():
            raise RuntimeError(f"stage {stage} finished without writing {out_dir / 'summary.json'}")
        mark(out_dir / paths.STAGE_STAMP, key, reads=reads, seconds=dt, finished=time.time())
        print(f"[{name}] {stage}: done in {dt:.1f}s -> {paths.show(out_dir)}", flush=True)
        log[stage] = {"status": "ran", "seconds": dt}
    total = time.time() - t_start
    atomic_write_json(paths.profile_dir(name) / "run_log.json", {"stages": log, "total_seconds": total})
    print(f"[{name}] all stages finished in {total:.1f}s", flush=True)
    return log


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.run", description=__doc__.splitlines()[0])
    ap.add_argument("profile", help="params/<profile>.yaml")
    ap.add_argument("--stages", nargs="*", help="run only these stages (full name or number, e.g. 04)")
    ap.add_argument("--force", action="store_true", help="ignore cached stages")
    ap.add_argument("--then-published", action="store_true",
                    help="afterwards run the `published` profile if its data is present")
    args = ap.parse_args(argv)
    try:
        run_profile(args.profile, args.stages, args.force)
        if args.then_published and args.profile != "published":
            if paths.has_data("lm-harmony/all_results.json"):
                run_profile("published", None, args.force)
            else:
                print("[published] skipped: published data not found (set HARMONY_DATA=<folder> or run "
                      "`make data`, then `make all PROFILE=published`)", flush=True)
    except (ParamsError, paths.DataMissing) as exc:
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
