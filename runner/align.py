"""``make align`` / ``make score``: the command line of :mod:`lib.benchalign.align`.

    python -m runner.align align --items A.npz [B.npz ...] --prefs prefs.csv --out bench.json
    python -m runner.align score --bench bench.json --items C.npz [...] [--out scores.csv]

Every bad input stops with one ``error:`` line and exit status 2 (:class:`lib.benchalign.align.AlignError`);
docs/align.md walks through both commands.
"""

from __future__ import annotations

from lib.util import pin_arithmetic

pin_arithmetic()    # before numpy loads: `python -m` gives the same bytes as `make align` (no Makefile pins)

import argparse
import os
import signal
import sys
from pathlib import Path

from lib.benchalign import align as core
from lib.benchalign.align import AlignError
from lib.util import atomic_write_text


def _write(text: str, out: str | None) -> None:
    if out:
        atomic_write_text(out, text)
    else:
        sys.stdout.write(text)


def check_out(out: str | None, inputs: list[str], replace: bool) -> None:
    """Before any work: ``--out`` is a file this command may write, not one of its inputs, and not an
    existing file unless ``replace``; temporary files a killed earlier write left beside it go."""
    if not out:
        return
    path = Path(out)
    if path.is_dir():
        raise AlignError(f"--out {out} is a folder: give a file name")
    if any(path.resolve() == Path(i).resolve() for i in inputs):
        raise AlignError(f"--out {out} is one of the inputs: it would be overwritten; give another file name")
    if path.exists() and not replace:
        raise AlignError(f"--out {out} exists: add --replace to overwrite it, or give another file name")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise AlignError(f"--out {out}: cannot write in {folder} (missing, read-only or no permission)")
    for stale in folder.glob(f".{path.name}.*.tmp"):       # from a write that was killed
        stale.unlink(missing_ok=True)


def _raise_on_sigterm(signum, frame):
    raise KeyboardInterrupt    # so that a write in progress removes its temporary file (util.atomic_write_bytes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m runner.align", description=__doc__.split("\n\n")[0],
                                epilog="docs/align.md walks through both commands")
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("align", help="learn item weights from preferences; write the aligned benchmark (JSON)")
    a.add_argument("--items", nargs="+", required=True, help=".npz, .csv, .parquet or a folder of lm-eval samples")
    a.add_argument("--prefs", required=True, help="winner,loser[,weight] pairs or model,score (.csv/.parquet/.jsonl)")
    a.add_argument("--out", required=True, help="the aligned benchmark (.json)")
    a.add_argument("--replace", action="store_true", help="overwrite --out when it exists")
    for name, default, what in (("seed", 0, "seed of the folds, the bootstrap and the optimiser"),
                                ("folds", 5, "cross-validation folds over the models (steps chosen out of fold)"),
                                ("max-steps", 3000, "most optimiser steps"),
                                ("patience", 200, "stop after this many steps without a lower validation loss")):
        a.add_argument(f"--{name}", type=int, default=default, help=f"{what} (default {default})")
    a.add_argument("--lr", type=float, default=1e-4, help="Adam's learning rate (default 1e-4)")
    s = sub.add_parser("score", help="aligned scores and ranks of new models (CSV)")
    s.add_argument("--bench", required=True, help="an aligned benchmark written by align")
    s.add_argument("--items", nargs="+", required=True, help="the new models' items, in the formats align reads")
    s.add_argument("--out", help="CSV file (default: stdout)")
    s.add_argument("--replace", action="store_true", help="overwrite --out when it exists")
    for q in (a, s):
        q.add_argument("--metric", help="lm-eval samples: the metric to read (default: the first numeric one)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        check_out(args.out, [*args.items, args.prefs if args.command == "align" else args.bench], args.replace)
        if args.command == "align":
            items, prefs = core.read_items(args.items, args.metric), core.read_preferences(args.prefs)
            core.check_preferences(prefs, items)         # every input error before torch loads
            from lib.benchalign.methods import set_threads

            set_threads(1)
            bench = core.align(items, prefs, seed=args.seed, folds=args.folds, lr=args.lr,
                               max_steps=args.max_steps, patience=args.patience)
            core.write_bench(args.out, bench)
            for line in bench["warnings"]:
                print(f"warning: {line}", file=sys.stderr)
            wrote = f"wrote {args.out} (inputs sha256 {bench['sha256'][:16]}...)"
            print("\n".join(core.report_lines(bench) + [wrote]))
        else:
            bench = core.read_bench(args.bench)
            scores = core.score(bench, core.read_items(args.items, args.metric))
            _write(scores.to_csv(index=False, float_format="%.6g"), args.out)
    except AlignError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
