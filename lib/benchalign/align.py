"""Align a benchmark to your own preferences, and score new models with it: what ``make align`` and
``make score`` run (their command line: :mod:`runner.align`; docs/align.md gives the input formats, the
output and every error). :func:`align` learns one weight per item with BenchAlign's linear RankNet and
its cross-validated protocol (:func:`lib.benchalign.rank.fit_pairs` for pairs,
:func:`lib.benchalign.rank.fit` for a score per model) on the models the preferences name;
:func:`score` applies the aligned benchmark to new models.
Every bad input stops with one ``error:`` line and exit status 2 (:class:`AlignError`).

Notebook 07's worked example of this command line and its study of noisy, sparse preferences are
:func:`lib.benchalign.studies.example` and :func:`lib.benchalign.studies.noise_study`.
"""

from __future__ import annotations

from ..util import pin_arithmetic

pin_arithmetic()    # before numpy loads: any process that imports this gives make align's bytes

import hashlib
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis import uncertainty
from ..outputs import clean, est
from ..util import atomic_write_text, sha256_file
from .data import ItemData, ItemDataError, check_matrix, dedupe

FORMAT = "benchalign-aligned/1"
MIN_MODELS = 4          # two folds of two models: the least the protocol can cross-validate
MIN_PAIRS = 10
NORMALISER = ("score = sum_j weights[j] * correct[j]; weights = w / d with d = sqrt(((sum w)^2 + "
              "floor^2 (sum |w|)^2) / (1 + floor^2)) > 0 (already applied: non-negative weights give a "
              "weighted accuracy, uniform ones plain accuracy)")


class AlignError(ValueError):
    """Bad input to ``align`` / ``score``: the message is the one line printed after ``error:``."""


# --------------------------------------------------------------------------- inputs
@dataclass
class Items:
    """Per-model item correctness: ``X`` (models x items, in [0, 1]), model names, item ids, files."""
    X: np.ndarray
    models: list[str]
    ids: list[str]
    files: list[Path] = field(default_factory=list)

    @classmethod
    def from_data(cls, data: ItemData) -> Items:
        """The items of an :class:`ItemData` (ids ``<benchmark>/<index>``, as the npz reader names them)."""
        ids = [f"{b}/{i}" for b, i in zip(data.item_benchmark, data.item_id)]
        return cls(np.asarray(data.X, dtype=np.float64), list(data.models), ids)

    def select(self, models) -> np.ndarray:
        index = {m: i for i, m in enumerate(self.models)}
        return self.X[[index[m] for m in models]]


def _parse_error(path: Path, why: str) -> AlignError:
    return AlignError(f"{path} does not parse: {why}")


def _read_npz(path: Path) -> tuple[np.ndarray, list[str], list[str]]:
    if not zipfile.is_zipfile(path):
        raise _parse_error(path, "not an .npz file (a zip archive of arrays)")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:  # noqa: BLE001 - any failure to read is the file's: name it
        raise _parse_error(path, f"{type(exc).__name__}: {exc}") from None
    if "scores" not in arrays or "models" not in arrays:
        raise _parse_error(path, f"an items .npz needs arrays 'scores' and 'models'; found {sorted(arrays)}")
    X, models = arrays["scores"], [str(m) for m in arrays["models"]]
    if X.ndim != 2 or X.shape[0] != len(models):
        raise _parse_error(path, f"scores of shape {X.shape} for {len(models)} model names")
    ids = ([str(i) for i in arrays["items"]] if "items" in arrays else [f"{path.stem}/{j}" for j in range(X.shape[1])])
    if len(ids) != X.shape[1]:
        raise _parse_error(path, f"{len(ids)} item ids for {X.shape[1]} columns")
    return X, models, ids


NAME_COLUMNS = ("model", "winner", "loser", "item")     # always text: a model named 025, NA or null is a name


CHUNK_ROWS = 500_000    # rows of a preferences file read at once (a few tens of MB)


def _read_chunks(path: Path, rows: int | None):
    """The table at ``path`` in frames of up to ``rows`` rows (all at once for ``None`` and parquet),
    name columns as text and never empty; each frame's index continues the file's row count."""
    try:
        if path.suffix == ".parquet":
            chunks = [pd.read_parquet(path)]
        elif path.suffix == ".jsonl":
            chunks = pd.read_json(path, lines=True, dtype=False, chunksize=rows) if rows else [
                pd.read_json(path, lines=True, dtype=False)]
        else:
            chunks = pd.read_csv(path, dtype={c: str for c in NAME_COLUMNS}, keep_default_na=False, chunksize=rows)
            chunks = chunks if rows else [chunks]
        for df in chunks:
            for c in (c for c in NAME_COLUMNS if c in df.columns):
                empty = np.flatnonzero(df[c].isna().to_numpy() | (df[c].astype(str).str.strip() == "").to_numpy())
                if len(empty):
                    raise _parse_error(path, f"row {df.index[empty[0]] + 2}: no {c} name")
                df[c] = df[c].astype(str)
            yield df
    except AlignError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _parse_error(path, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None


def _read_table(path: Path) -> tuple[np.ndarray, list[str], list[str]]:
    df = pd.concat(list(_read_chunks(path, None)), ignore_index=True)
    if "model" not in df.columns:
        raise _parse_error(path, f"an items table needs a 'model' column; found {list(df.columns)[:5]}")
    if {"item", "correct"} <= set(df.columns) and len(df.columns) == 3:            # long
        if df.duplicated(["model", "item"]).any():
            first = df[df.duplicated(["model", "item"])].iloc[0]
            raise _parse_error(path, f"model {first.model!r} has item {first['item']!r} twice")
        df = df.assign(item=df["item"].astype(str)).pivot(index="model", columns="item", values="correct")
        df = df.reindex(columns=sorted(df.columns))
    else:
        df = df.set_index("model")
    df.index = df.index.astype(str)
    X = df.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)   # text: missing, named below
    return X, list(df.index), [str(c) for c in df.columns]


def _read_samples(folder: Path, metric: str | None) -> tuple[np.ndarray, list[str], list[str]]:
    """lm-eval ``--log_samples`` outputs: ``folder/<model>/samples_<task>_<date>.jsonl``."""
    per_model: dict[str, dict[str, float]] = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        newest: dict[str, Path] = {}
        for p in sorted(sub.glob("samples_*.jsonl")):       # dates sort: the newest of a task wins
            newest[p.stem[len("samples_"):].rsplit("_", 1)[0]] = p
        values: dict[str, float] = {}
        for task, p in newest.items():
            values.update(_samples_file(p, task, metric))
        if values:
            per_model[sub.name.replace("__", "/")] = values
    if not per_model:
        raise _parse_error(folder, "no <model>/samples_<task>_<date>.jsonl files of lm-eval --log_samples in it")
    df = pd.DataFrame(per_model).T
    df = df.reindex(columns=sorted(df.columns))
    return df.to_numpy(dtype=np.float64), list(df.index), list(df.columns)


def _samples_file(path: Path, task: str, metric: str | None) -> dict[str, float]:
    out: dict[str, float] = {}
    filters: set[str] = set()
    with open(path, encoding="utf-8") as lines:            # line by line: a large file is never held whole
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                names = [metric] if metric else rec["metrics"]
                name = next(m for m in names if isinstance(rec.get(m), (int, float)) and not isinstance(rec[m], bool))
                out[f"{task}/{rec['doc_id']}"] = float(rec[name])
                filters.add(rec.get("filter", ""))
            except (json.JSONDecodeError, KeyError, StopIteration, TypeError) as exc:
                what = f"no numeric metric {metric!r}" if metric else f"{type(exc).__name__}: {exc}"
                raise _parse_error(path, f"line {n}: {what}") from None
    if len(filters) > 1:
        raise _parse_error(path, f"records of several filters {sorted(filters)}; keep one filter's records")
    return out


def _read_one(path: Path, metric: str | None) -> tuple[np.ndarray, list[str], list[str]]:
    if not path.exists():
        raise AlignError(f"{path} does not exist")
    if path.is_dir():
        X, models, ids = _read_samples(path, metric)
    elif path.suffix == ".npz":
        X, models, ids = _read_npz(path)
    elif path.suffix in (".csv", ".parquet", ".jsonl"):
        X, models, ids = _read_table(path)
    else:
        raise _parse_error(path, "items are read from .npz, .csv, .parquet or a folder of lm-eval samples")
    if len(set(ids)) != len(ids):
        raise _parse_error(path, f"item id {next(i for i in ids if ids.count(i) > 1)!r} occurs twice")
    bad = np.argwhere(~np.isfinite(np.asarray(X, dtype=np.float64)))
    if len(bad):
        i, j = bad[0]
        raise _parse_error(path, f"model {models[i]!r} has no value for item {ids[j]!r} (missing or not a number; "
                                 f"{len(bad)} such entries)")
    try:
        X = check_matrix(X, str(path), models, binary=False)
    except ItemDataError as exc:
        raise _parse_error(path, str(exc).split(": ", 1)[-1]) from None
    X, models, _ = dedupe(X, models, "first", where=str(path))
    return X, models, ids


def read_items(paths, metric: str | None = None) -> Items:
    """The items of one or more files, joined by model name (the models every file holds)."""
    paths = [Path(p) for p in paths]
    parts = [_read_one(p, metric) for p in paths]
    ids = [i for _, _, part_ids in parts for i in part_ids]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise AlignError(f"item id {dup!r} occurs in more than one of the items files {[str(p) for p in paths]}")
    held = [set(models) for _, models, _ in parts]
    for k, (_, models, _) in enumerate(parts):
        for other, names in enumerate(held):
            lost = [m for m in models if m not in names]
            if lost:
                raise AlignError(f"model {lost[0]!r} is in {paths[k]} but not in {paths[other]} ({len(lost)} such "
                                 "models): every items file must hold the same models; give its items or drop it")
    common = list(parts[0][1])
    blocks = [Items(X, models, part_ids).select(common) for X, models, part_ids in parts]
    return Items(np.concatenate(blocks, axis=1), common, ids, paths)


@dataclass
class Preferences:
    """Pairs (model ``winner[k]`` beats model ``loser[k]`` with ``weight[k]``; indices into ``names``)
    or, when ``scores`` is set, a score per model."""
    names: list[str] = field(default_factory=list)
    winner: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    loser: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    weight: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scores: dict[str, float] | None = None
    path: Path | None = None

    @property
    def models(self) -> list[str]:
        return list(self.scores) if self.scores is not None else self.names


def read_preferences(path) -> Preferences:
    """Pairs (columns winner, loser[, weight]) or scores (model, score) from a CSV, JSONL or parquet file,
    read :data:`CHUNK_ROWS` rows at a time: memory grows with the models and the pairs' integer
    codes, not with the file's text."""
    path = Path(path)
    if not path.exists():
        raise AlignError(f"{path} does not exist")
    kind, parts, winners, losers, scores = None, [], {}, {}, {}
    for df in _read_chunks(path, CHUNK_ROWS):
        cols = set(df.columns)
        kind = kind or ("pairs" if {"winner", "loser"} <= cols else "scores" if {"model", "score"} <= cols else None)
        if kind is None:
            raise _parse_error(path, "preferences need columns winner, loser[, weight] or model, score; "
                               f"found {list(df.columns)}")
        if kind == "pairs":
            w = df["weight"] if "weight" in cols else pd.Series(1.0, index=df.index)
            w = pd.to_numeric(w, errors="coerce").to_numpy(dtype=np.float64)
            bad = np.flatnonzero(~(np.isfinite(w) & (w > 0)))
            if len(bad):
                raise _parse_error(path, f"row {df.index[bad[0]] + 2}: a pair needs a winner, a loser and a "
                                   "positive weight")
            same = np.flatnonzero((df["winner"] == df["loser"]).to_numpy())
            if len(same):
                raise _parse_error(path, f"row {df.index[same[0]] + 2}: {df['winner'].iloc[same[0]]!r} is "
                                   "preferred to itself")
            a = np.array([winners.setdefault(m, len(winners)) for m in df["winner"]], np.int64)
            b = np.array([losers.setdefault(m, len(losers)) for m in df["loser"]], np.int64)
            parts.append((a, b, w))
        else:
            s = pd.to_numeric(df["score"], errors="coerce").to_numpy(dtype=np.float64)
            bad = np.flatnonzero(~np.isfinite(s))
            if len(bad):
                raise _parse_error(path, f"row {df.index[bad[0]] + 2}: a model needs a name and a finite score")
            for m, v in zip(df["model"], s.tolist()):
                if m in scores:
                    raise _parse_error(path, f"model {m!r} has two scores")
                scores[m] = v
    if kind == "scores":
        return Preferences(scores=scores, path=path)
    if kind is None:
        raise _parse_error(path, "no rows")
    names = list(dict.fromkeys([*winners, *losers]))          # winners first, then losers: the models' order
    index = {m: i for i, m in enumerate(names)}
    to_w, to_l = np.array([index[m] for m in winners], np.int64), np.array([index[m] for m in losers], np.int64)
    a, b, w = (np.concatenate(x) for x in zip(*parts))
    return Preferences(names, to_w[a], to_l[b], w, path=path)


def _sha256(path: Path) -> str:
    """sha256 of a file, or of a folder's files (their relative paths and contents, sorted)."""
    h = hashlib.sha256()
    if path.is_dir():
        for p in sorted(q for q in path.rglob("*") if q.is_file()):
            h.update(str(p.relative_to(path)).encode() + b"\0" + bytes.fromhex(sha256_file(p)))
        return h.hexdigest()
    return sha256_file(path)


# --------------------------------------------------------------------------- checks
def _components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected component of each of n models in the graph of compared pairs."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    return connected_components(coo_matrix((np.ones(len(a)), (a, b)), shape=(n, n)), directed=False)[1]


def check_preferences(prefs: Preferences, items: Items) -> list[str]:
    """Every model of the preferences has items; enough pairs, models and connection to learn from.
    Returns warnings: preferences in more than one connected component name the models whose
    scores cannot be compared with the largest component's (nothing relates them)."""
    where = prefs.path or "the preferences"
    known = set(items.models)
    missing = [m for m in prefs.models if m not in known]
    if missing:
        files = ", ".join(str(p) for p in items.files) or "the items"
        raise AlignError(f"{where}: {len(missing)} model(s) in the preferences have no items in {files} "
                         f"(first: {missing[0]!r}); give their items or drop their preferences")
    models = prefs.models
    if prefs.scores is not None:
        distinct = len(set(prefs.scores.values()))
        if len(models) < MIN_MODELS or distinct < 2:
            raise AlignError(f"{where}: preferences too few to learn from: {len(models)} model(s) with "
                             f"{distinct} distinct score(s); need at least {MIN_MODELS} models and 2 distinct scores")
        return []
    if len(prefs.winner) < MIN_PAIRS or len(models) < MIN_MODELS:
        raise AlignError(f"{where}: preferences too few to learn from: {len(prefs.winner)} pair(s) among "
                         f"{len(models)} model(s); need at least {MIN_PAIRS} pairs among at least {MIN_MODELS} models")
    comp = _components(len(models), prefs.winner, prefs.loser)
    largest = int(np.bincount(comp).max())
    if 2 * largest < len(models):
        raise AlignError(f"{where}: preferences too disconnected to learn from: {comp.max() + 1} components, the "
                         f"largest holds {largest} of {len(models)} models; need one component holding at least "
                         f"half of them ({-(-len(models) // 2)}): add pairs between the components")
    if comp.max() == 0:
        return []
    apart = [m for m, c in zip(models, comp) if c != np.argmax(np.bincount(comp))]
    return [f"{where}: the pairs form {comp.max() + 1} groups with no pair between them: the {len(apart)} model(s) "
            f"outside the largest ({', '.join(apart[:5])}{', ...' if len(apart) > 5 else ''}) are aligned but "
            "cannot be compared with the rest; add pairs between the groups"]


# --------------------------------------------------------------------------- align and score
def bt_strengths(winner: np.ndarray, loser: np.ndarray, weight: np.ndarray, n: int, ridge: float = 1e-2) -> np.ndarray:
    """Bradley-Terry strengths of n models from weighted pairs (maximum likelihood with a small ridge
    penalty, so that unbeaten models and separate components stay finite): the reference the
    cross-validated rho of pair preferences is taken against."""
    from scipy.optimize import minimize

    def nll(theta):
        d = theta[winner] - theta[loser]
        p = np.exp(-np.logaddexp(0.0, d))                    # sigmoid(-d)
        g = np.bincount(loser, weight * p, minlength=n) - np.bincount(winner, weight * p, minlength=n)
        return float((weight * np.logaddexp(0.0, -d)).sum() + 0.5 * ridge * theta @ theta), g + ridge * theta
    return minimize(nll, np.zeros(n), jac=True, method="L-BFGS-B", options={"maxiter": 1000}).x


def _metrics(oof: np.ndarray, plain: np.ndarray, ref: np.ndarray, pairs, n_boot: int, seed: int) -> dict:
    """Cross-validated rho (with ``ref``) and pair accuracy (over the preference pairs, or all pairs of
    ``ref`` when there are none) of the out-of-fold scores, beside plain accuracy's, with 95 % bootstrap
    intervals (models for rho, pairs for pair accuracy) and the paired difference."""
    out: dict = {}
    from . import rank

    mdraws = uncertainty.draws(len(ref), n_boot, seed)
    for name, s in (("aligned", oof), ("plain_accuracy", plain)):
        out[name] = {"rho": rank.spearman(s, ref), "rho_draws": uncertainty.weighted_spearman(s, ref, mdraws)}
    if pairs is None:
        for name, s in (("aligned", oof), ("plain_accuracy", plain)):
            out[name].update(pair_acc=rank.pair_accuracy(s, ref),
                             pair_draws=uncertainty.weighted_pair_accuracy(s, ref, mdraws))
    else:
        w, lo, wt = pairs
        right = {name: np.where(s[w] > s[lo], 1.0, np.where(s[w] == s[lo], 0.5, 0.0))
                 for name, s in (("aligned", oof), ("plain_accuracy", plain))}
        boot = _pair_bootstrap(wt, right, n_boot, seed + 1)
        for name in right:
            out[name].update(pair_acc=float(wt @ right[name] / wt.sum()), pair_draws=boot[name])
    res: dict = {}
    for name in ("aligned", "plain_accuracy"):
        r = out[name]
        res[name] = {"rho": clean(r["rho"]), "rho_ci": _ci(r["rho_draws"]),
                     "pair_acc": clean(r["pair_acc"]), "pair_acc_ci": _ci(r["pair_draws"])}
    a, p = out["aligned"], out["plain_accuracy"]
    res["diff"] = {"rho": clean(a["rho"] - p["rho"]), "rho_ci": _ci(a["rho_draws"] - p["rho_draws"]),
                   "pair_acc": clean(a["pair_acc"] - p["pair_acc"]),
                   "pair_acc_ci": _ci(a["pair_draws"] - p["pair_draws"])}
    return res


BOOT_ELEMENTS = 25_000_000    # bootstrap weights held at once (n_boot x pairs): about 0.3 GB


def _pair_bootstrap(wt: np.ndarray, right: dict[str, np.ndarray], n_boot: int, seed: int) -> dict[str, np.ndarray]:
    """Weighted pair accuracy of each of ``right`` (1, 0.5 or 0 per pair) in ``n_boot`` draws of the
    pairs with replacement, :data:`BOOT_ELEMENTS` weights at a time: all draws at once up to that
    size, beyond it in blocks of draws, each block from its own seed (millions of pairs fit)."""
    n = len(wt)
    rows = max(1, BOOT_ELEMENTS // max(n, 1))
    out: dict[str, list] = {name: [] for name in right}
    for k, start in enumerate(range(0, n_boot, rows)):
        size = min(rows, n_boot - start)
        d = uncertainty.draws(n, size, seed if rows >= n_boot else [seed, k]) * wt
        total = d.sum(1)
        for name, r in right.items():
            out[name].append(d @ r / total)
    return {name: np.concatenate(v) for name, v in out.items()}


def _ci(draws) -> list | None:
    lo, hi = uncertainty.interval(draws)
    return None if not np.isfinite(lo) else [clean(lo), clean(hi)]


def align(items: Items, prefs: Preferences, *, seed: int = 0, folds: int = 5, lr: float = 1e-4,
          max_steps: int = 3000, patience: int = 200, eval_every: int = 10, floor: float | None = None,
          n_boot: int = 1000) -> dict:
    """The aligned benchmark (a JSON-ready dict) of ``items`` fitted to ``prefs`` on the models it names.

    The weights are kept only when they rank the source models better than plain accuracy out of
    fold (the difference in pair accuracy for pairs, in rho for scores, is positive); otherwise the
    benchmark falls back to uniform weights, plain accuracy. The step choice alone cannot see that:
    it minimises the validation RankNet loss, which falls as the weights spread the scores apart
    even while they order the models worse (uniform weights put every score in [0, 1], so the
    pairs' sigmoids sit near 1/2). ``verdict`` says which, from the paired interval."""
    from . import rank

    warnings = check_preferences(prefs, items)
    floor = rank.FLOOR if floor is None else floor
    models = prefs.models
    X = items.select(models)
    settings = {"loss": "ranknet", "lr": lr, "max_steps": max_steps, "patience": patience, "folds": folds,
                "eval_every": eval_every, "floor": floor, "seed": seed}
    kw = {k: settings[k] for k in ("folds", "lr", "max_steps", "patience", "eval_every", "floor")}
    if prefs.scores is not None:
        ref = np.array([prefs.scores[m] for m in models])
        fit = rank.fit(X, ref, seed=seed, loss="ranknet", **kw)
        pairs, described = None, {"kind": "scores", "models": len(models)}
        reference, judged_on = "the given scores", "rho"
    else:
        w, lo = prefs.winner, prefs.loser
        ref = bt_strengths(w, lo, prefs.weight, len(models))
        fit = rank.fit_pairs(X, w, lo, prefs.weight, seed=seed, strata=ref, **kw)
        pairs = (w, lo, prefs.weight)
        described = {"kind": "pairs", "pairs": len(w), "models": len(models),
                     "components": int(_components(len(models), w, lo).max() + 1)}
        reference, judged_on = "Bradley-Terry strengths of the pairs (ridge 0.01)", "pair_acc"
    plain = X.mean(axis=1)
    oof = fit.oof_scores(X) if fit.folds else plain
    cv = _metrics(oof, plain, ref, pairs, n_boot, seed)
    weights, step, note = fit.weights, int(fit.step), fit.note
    diff, interval = cv["diff"][judged_on], cv["diff"][judged_on + "_ci"] or [np.nan, np.nan]
    label = {"rho": "rho", "pair_acc": "pair accuracy"}[judged_on]
    shown = np.nan if diff is None else diff
    said = f"cross-validated {label} {shown:+.3f} [{interval[0]:+.3f}, {interval[1]:+.3f}]"
    if step > 0 and diff is not None and diff < 0:
        weights, step = rank.normalise(np.ones(X.shape[1]), floor), 0
        note = f"fell back to uniform weights (plain accuracy): the weights of step {fit.step} ranked worse ({said})"
        verdict = f"does not beat plain accuracy ({said}): fell back to plain accuracy"
    elif step == 0:
        verdict = "ties plain accuracy: the weights stayed uniform" + (f" ({note})" if note else "")
    elif interval[0] > 0:
        verdict = f"beats plain accuracy ({said})"
    else:
        verdict = f"ties plain accuracy ({said}: the interval reaches 0)"
    cv["reference"] = reference
    cv["how"] = (f"out-of-fold scores of {fit.folds}-fold cross-validation over the models at the chosen step; "
                 "intervals: 95 % bootstrap over models (rho) and pairs (pair accuracy)")
    inputs = [{"file": Path(p).name, "sha256": _sha256(p)}          # names only: the same file, the same bytes
              for p in [*items.files, *([prefs.path] if prefs.path else [])]]
    return {"format": FORMAT, "items": list(items.ids), "weights": [float(v) for v in weights],
            "normaliser": {"floor": floor, "scores": NORMALISER}, "source_models": list(models),
            "preferences": described,
            "settings": {**settings, "folds_used": int(fit.folds), "chosen_step": step,
                         "steps_run": int(fit.steps_run), "note": note},
            "cv": cv, "verdict": verdict, "warnings": warnings, "inputs": inputs,
            "sha256": hashlib.sha256("".join(i["sha256"] for i in inputs).encode()).hexdigest()}


def write_bench(path, bench: dict) -> Path:
    """Write an aligned benchmark (JSON, one value per line of its lists: diffs stay readable)."""
    return atomic_write_text(path, json.dumps(bench, indent=1) + "\n")


def read_bench(path) -> dict:
    path = Path(path)
    try:
        bench = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _parse_error(path, f"{type(exc).__name__}: {exc}") from None
    if not isinstance(bench, dict) or bench.get("format") != FORMAT or len(bench.get("items", ())) != len(
            bench.get("weights", (None,))):
        raise _parse_error(path, f"not an aligned benchmark ({FORMAT}: items and weights of equal length)")
    ids, weights = bench["items"], bench["weights"]
    for k, (item, w) in enumerate(zip(ids, weights)):
        if not isinstance(item, str):
            raise _parse_error(path, f"item {k} is {item!r}, not an item id")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not np.isfinite(w):
            raise _parse_error(path, f"the weight of item {item!r} is {w!r}, not a finite number (write the file "
                                     "again with `align`)")
    if len(set(ids)) != len(ids):
        raise _parse_error(path, f"item id {next(i for i in ids if ids.count(i) > 1)!r} occurs twice")
    bench["path"] = str(path)
    return bench


def score(bench: dict, items: Items) -> pd.DataFrame:
    """Aligned scores and ranks (1 = best) of the models of ``items``, with plain accuracy's;
    ``in_sample`` marks the models the weights were learned from (their rank is not out of sample)."""
    index = {i: j for j, i in enumerate(items.ids)}
    missing = [i for i in bench["items"] if i not in index]
    if missing:
        files = ", ".join(str(p) for p in items.files) or "the items"
        raise AlignError(f"{files}: {len(missing)} of the aligned benchmark's {len(bench['items'])} item ids are "
                         f"missing (first: {missing[0]!r}); give the items that "
                         f"{bench.get('path', 'the aligned benchmark')} was aligned on")
    X = items.X[:, [index[i] for i in bench["items"]]]
    s, plain = X @ np.asarray(bench["weights"], dtype=np.float64), X.mean(axis=1)
    df = pd.DataFrame({"model": items.models, "aligned_score": s, "plain_accuracy": plain})
    df["rank"] = df.aligned_score.rank(ascending=False, method="min").astype(int)
    df["plain_rank"] = df.plain_accuracy.rank(ascending=False, method="min").astype(int)
    df["in_sample"] = df.model.isin(set(bench.get("source_models", ())))
    return (df.sort_values(["rank", "model"], kind="stable")[["model", "aligned_score", "rank", "plain_accuracy",
                                                              "plain_rank", "in_sample"]].reset_index(drop=True))


def report_lines(bench: dict) -> list[str]:
    """What ``align`` prints: the data, the chosen step and the cross-validated metrics."""
    p, st, cv = bench["preferences"], bench["settings"], bench["cv"]
    what = (f"{p['pairs']} pairs among {p['models']} models ({p['components']} component(s))" if p["kind"] == "pairs"
            else f"scores of {p['models']} models")
    lines = [f"aligned {len(bench['items'])} items to {what}",
             f"chosen step {st['chosen_step']} of {st['steps_run']} run ({st['folds_used']}-fold cross-validation)"
             + (f"; {st['note']}" if st["note"] else "")]
    for k, label in (("rho", "rho with " + cv["reference"]), ("pair_acc", "pair accuracy")):
        a, b, d = cv["aligned"], cv["plain_accuracy"], cv["diff"]
        lines.append(f"cross-validated {label}: {est(a[k], a[k + '_ci'])}; plain accuracy "
                     f"{est(b[k], b[k + '_ci'])}; difference {est(d[k], d[k + '_ci'], sign=True)}")
    return lines + [f"verdict: the aligned benchmark {bench['verdict']}"]
