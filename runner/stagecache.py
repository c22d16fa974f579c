"""The stage cache: what a stage depends on, and whether its last run still holds (:func:`stale`).

A stage is skipped when nothing it depends on changed since its last successful run: its *key*
(:func:`stage_key`: notebook source, parameters, the source of the ``lib`` modules it imports); its
*reads* (every input it recorded through :func:`lib.util.note_read`, by content digest, under a
portable name: other data behind the same ``HARMONY_DATA`` re-runs what read it, a moved outputs
folder or checkout re-runs nothing); and its *results* (:func:`results_digest`), so that a notebook
run by hand in JupyterLab that changed them is redone. So editing ``lib/benchalign`` re-runs only
07, and a stage whose upstream outputs came out the same stays cached.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from lib import paths
from lib.params import notebook_path
from lib.pipeline.device import PINNED_ARITHMETIC
from lib.util import CorruptFile, digest, jsonable, lib_closure, read_json, sha256_bytes


def cells(stage: str) -> list[tuple[str, str]]:
    """(type, source) of each cell of the stage's notebook."""
    nb = json.loads(notebook_path(stage).read_text())
    return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]


def stage_key(stage: str, params: dict, root: Path | None = None) -> dict:
    """What determines a stage besides its inputs: notebook source, parameters, lib closure, and the
    CPU arithmetic its processes run with (:data:`lib.pipeline.device.PINNED_ARITHMETIC`: another
    setting computes other last bits)."""
    root = root or paths.ROOT
    source = cells(stage)
    files = lib_closure([text for kind, text in source if kind == "code"], root)
    return {"notebook": sha256_bytes(json.dumps(source)), "params": params,
            "lib": {str(p.relative_to(root)): digest(p) for p in files},
            "arithmetic": {k: os.environ.get(k) for k in PINNED_ARITHMETIC}}


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
    was = old.get("arithmetic") or {}
    moved = [f"{k} {was.get(k)} -> {v}" for k, v in new.get("arithmetic", {}).items() if was.get(k) != v]
    if moved and "arithmetic" in old:
        return f"the arithmetic changed ({', '.join(moved[:2])})"
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
    """None when the stage is cached: its stamp holds ``key``, its summary.json parses, and its inputs
    and results are as its last run left them (see the module's docstring); else why it runs, in words."""
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
