"""Run the notebooks of a profile, in order, through papermill: ``python -m lib.run PROFILE``.

Each stage writes ``outputs/<profile>/<stage>/`` (the executed notebook, summary.json, tables,
figures). A stage is skipped when its fingerprint (notebook source, injected parameters, the lib
source, and the fingerprints of the stages before it) equals the one recorded by its last
successful run, so a second ``make all`` only re-runs what changed. Long stages additionally cache
per unit of work (see ``lib.pipeline.jobs``), so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import sys
import time
from pathlib import Path

from . import paths
from .params import ParamsError, Profile, check_stage, load_profile, notebook_path
from .store import atomic_write_json, read_json

FINGERPRINT = ".fingerprint.json"


def _notebook_source_hash(path: Path) -> str:
    nb = json.loads(path.read_text())
    src = [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]
    return hashlib.sha256(json.dumps(src).encode()).hexdigest()


def lib_hash() -> str:
    h = hashlib.sha256()
    for p in sorted((paths.ROOT / "lib").rglob("*.py")):
        h.update(str(p.relative_to(paths.ROOT)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def fingerprint(stage: str, params: dict, upstream: str, lib: str) -> str:
    payload = json.dumps({"notebook": _notebook_source_hash(notebook_path(stage)), "params": params,
                          "upstream": upstream, "lib": lib}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


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


def execute(stage: str, params: dict, out_dir: Path, kernel: str = "python3", progress: bool = False) -> Path:
    """Execute one notebook with papermill; the executed copy appears only when it succeeded."""
    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / f"{stage}.ipynb"
    partial = out_dir / f".{stage}.partial.ipynb"
    pm.execute_notebook(str(notebook_path(stage)), str(partial), parameters=params,
                        kernel_name=kernel, cwd=str(paths.NOTEBOOKS), progress_bar=progress,
                        log_output=False)
    os.replace(partial, final)
    return final


def _show(path: Path) -> str:
    try:
        return str(path.relative_to(paths.ROOT))
    except ValueError:
        return str(path)


def run_profile(name: str, stages: list[str] | None = None, force: bool = False,
                kernel: str = "python3") -> dict[str, dict]:
    """Run (or skip, when cached) the stages of profile ``name``; returns per-stage status/timing."""
    prof = load_profile(name)                     # validates every stage before any work starts
    selected = list(prof.stages)
    if stages:
        chosen = []
        for s in stages:
            hits = [st for st in prof.stages if st == s or st.split("_")[0] == s]
            if not hits:
                raise ParamsError(f"{prof.path}: no stage {s!r}; stages: {list(prof.stages)}")
            chosen += hits
        selected = [s for s in prof.stages if s in chosen]
    # Hugging Face's per-file download/load bars drown the stage lines (our own tqdm bars stay).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if prof.offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    t_start = time.time()
    run_prepare(prof)
    lib = lib_hash()
    upstream = ""
    log: dict[str, dict] = {}
    for stage in prof.stages:
        params = check_stage(prof, stage, prof.stages[stage])
        fp = fingerprint(stage, params, upstream, lib)
        upstream = fp
        if stage not in selected:
            continue
        out_dir = paths.stage_dir(name, stage)
        stamp = out_dir / FINGERPRINT
        cached = (not force and stamp.exists() and (out_dir / "summary.json").exists()
                  and read_json(stamp).get("fingerprint") == fp)
        if cached:
            print(f"[{name}] {stage}: cached", flush=True)
            log[stage] = {"status": "cached", "seconds": 0.0}
            continue
        stamp.unlink(missing_ok=True)
        print(f"[{name}] {stage}: running ...", flush=True)
        t0 = time.time()
        execute(stage, params, out_dir, kernel=kernel, progress=sys.stdout.isatty())
        dt = time.time() - t0
        if not (out_dir / "summary.json").exists():
            raise RuntimeError(f"stage {stage} finished without writing {out_dir / 'summary.json'}")
        atomic_write_json(stamp, {"fingerprint": fp, "seconds": dt, "finished": time.time()})
        print(f"[{name}] {stage}: done in {dt:.1f}s -> {_show(out_dir)}", flush=True)
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
