"""The train-before-test paper's published results imported into a profile's results store, and a
first run compared with them.

:func:`import_store` (the ``published`` profile's ``prepare`` hook; idempotent by the file's sha256)
writes one :class:`lib.store.Result` per entry of ``all_results.json`` (:func:`lib.published.parse_results`),
metric and direction from :mod:`lib.metadata`. :func:`compare` puts a profile's own direct-evaluation
scores next to the published ones (``python -m runner.published --compare paper_slice``).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd

from lib import metadata, paths, store
from lib.published import SOURCE, parse_results, results_path
from lib.util import current, did_you_mean, mark, read_json, sha256_file

MARKER = "published_import.json"     # <store>/_meta/<MARKER>: what was imported, from which file hash


def _check_metadata(results: dict, path: Path) -> dict[str, metadata.Benchmark]:
    """Every benchmark and model must have metadata before anything is written."""
    benches = sorted({b for per in results.values() for b in per})
    models = sorted({m for per in results.values() for by in per.values() for m in by})
    try:
        infos = {b: metadata.benchmark_info(b) for b in benches}
        for m in models:
            metadata.model_info(m)
    except metadata.MetadataError as exc:
        raise metadata.MetadataError(f"{path}: {exc}") from None
    return infos


def import_store(profile: str, source: str | Path | None = None, force: bool = False) -> dict[str, Any]:
    """Import the published results into ``lib.paths.store_dir(profile)``; returns the import record.
    Skips the work when the store already holds an import of a file with the same sha256 (unless
    ``force``); results of an earlier import that the new file no longer contains are removed."""
    path = Path(source) if source is not None else results_path()
    if not path.is_file():
        raise paths.DataMissing(f"published results not found: {path} ({paths.provide_data()})")
    root = paths.store_dir(profile)
    digest = sha256_file(path)
    marker = root / "_meta" / MARKER
    if not force:
        done = current(marker, digest)
        if done is not None and all(store.path_for(root, *k.split("|")).exists() for k in done.get("keys", [])):
            return done
    t0 = time.time()
    results = parse_results(path)
    infos = _check_metadata(results, path)
    provenance = {"source": str(path.name), "source_path": paths.portable(path), "sha256": digest, **SOURCE}
    keys = []
    for protocol, per_bench in results.items():
        for bench, by_model in per_bench.items():
            info = infos[bench]
            for model, val in by_model.items():
                store.write(root, store.Result(protocol=protocol, benchmark=bench, model=model,
                                               metric=info.metric, score=val["score"], stderr=val["stderr"],
                                               higher_is_better=info.higher_is_better,
                                               provenance=provenance), fsync=False)
                keys.append(f"{protocol}|{bench}|{model}")
    wanted = {store.path_for(root, *k.split("|")) for k in keys}
    removed = 0
    for old in list(store.iter_paths(root)):
        if old not in wanted and read_json(old).get("provenance", {}).get("repository") == SOURCE["repository"]:
            old.unlink()
            removed += 1
    os.sync()            # one flush for the whole batch (per-file fsync made the import 8x slower)
    return mark(marker, digest, source_path=paths.portable(path), sha256=digest, n_results=len(keys), removed=removed,
                seconds=round(time.time() - t0, 2), keys=sorted(keys))


def published_scores(models: list[str], benchmarks: list[str], protocol: str = store.DIRECT) -> pd.DataFrame:
    """The published score and standard error of each (model, benchmark) under ``protocol``."""
    data = json.loads(results_path().read_text())
    rows = []
    for b in benchmarks:
        if b not in data[protocol]:
            raise KeyError(f"benchmark {b!r} is not in all_results.json{did_you_mean(b, data[protocol])}")
        for m in models:
            if m not in data[protocol][b]:
                raise KeyError(f"model {m!r} has no published {protocol} score on {b!r}")
            rows.append({"model": m, "benchmark": b, "published": data[protocol][b][m],
                         "published_stderr": data[f"{protocol}_stderr"][b][m]})
    return pd.DataFrame(rows)


def compare(store_root: str | Path, models: list[str], benchmarks: list[str], protocol: str = store.DIRECT,
            ) -> pd.DataFrame:
    """Our scores next to the published ones: ``diff``, ``z`` (over the published standard error) and
    ``within`` (|z| <= 2): does a first run, e.g. ``paper_slice``, reproduce the paper?"""
    table = published_scores(models, benchmarks, protocol)
    ours = store.load(store_root, protocol)
    ours = {(r.model, r.benchmark): r.score for r in ours.itertuples()}
    table["ours"] = [ours.get((m, b), math.nan) for m, b in zip(table["model"], table["benchmark"])]
    table["diff"] = table["ours"] - table["published"]
    table["z"] = table["diff"] / table["published_stderr"]
    table["within"] = table["z"].abs() <= 2
    return table


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    from runner.fetch import profile_needs

    ap = argparse.ArgumentParser(prog="python -m runner.published", description=__doc__.splitlines()[0])
    ap.add_argument("profile", nargs="?", default="published")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--compare", action="store_true",
                    help="instead: the profile's direct-evaluation scores next to the published ones (exit 1 when one "
                         "differs by more than 2 standard errors)")
    args = ap.parse_args(argv)
    try:
        if args.compare:
            models, tasks = profile_needs(args.profile)
            table = compare(paths.store_dir(args.profile), models, tasks)
            print(table.to_string(index=False))
            return 0 if table["within"].all() else 1
        rec = import_store(args.profile, force=args.force)
    except (paths.DataMissing, store.StoreError, metadata.MetadataError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{rec['n_results']} results from {rec['source_path']} (sha256 {rec['sha256'][:12]}...)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
