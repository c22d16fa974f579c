"""Item matrices for BenchAlign: models x items correctness, a target score per model, model sizes.

Three sources feed the same :class:`ItemData`: :func:`load_oll` (the Open LLM Leaderboard v2 item
files of the published data, joined **by model name**, never by row: the model lists differ between
files), :func:`load_pipeline` (our own direct-evaluation items, the train-before-test score as the
target) and :func:`load_cross_paper` (the published direct-evaluation scores as features).

Duplicated model names (19 in the leaderboard files) keep their first row by default
(:func:`dedupe`); in the published files every duplicated name has identical rows, so the rule
changes nothing there. Sizes come from the model id (:func:`parse_size_b`) or
:func:`lib.metadata.model_info`; the instruction-tuned flag (the one-bit baseline BenchAlign must
beat) from the name (:func:`instruct_mark`) or, for our own models, their metadata.
"""

from __future__ import annotations

import re
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import layout, paths
from ..data import corrupt
from ..errors import UserError
from ..util import did_you_mean, note_read

OLL_DIR = "oll-v2-items"
DUPLICATES = ("first", "mean", "error")


class ItemDataError(UserError, ValueError):
    """Item data is missing, malformed or inconsistent; the message names the culprit."""


# --------------------------------------------------------------------------- model sizes
_UNIT = {"b": 1.0, "m": 1e-3}
# "8x7B": mixture of experts, N experts of S parameters each.
_MOE = re.compile(r"(?<![A-Za-z0-9.])(\d+)x(\d+(?:[._]\d+)?)([bBmM])(?![A-Za-z0-9])")
# "7B", "1.5b", "1_8b", "135M", "7b1" (= 7.1B, BLOOM style); the number must start a token.
_SIZE = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:[._]\d+)?)([bBmM])(\d+)?(?![A-Za-z0-9])")


def parse_size_b(model_id: str) -> float | None:
    """Parameter count in billions parsed from a model id, or None when it names no size.

    Rules (documented because benchmarks split models by size):

    - a size is a token of the name part (after ``/``) made of a number and a unit ``B`` or ``M``
      (case-insensitive), e.g. ``-70B``, ``7b``, ``1.5B``, ``135M``; ``1_8b`` reads 1.8 and BLOOM's
      ``7b1`` reads 7.1; letters glued in front (``A14B``: active parameters, ``r7b``) do not count;
    - mixtures of experts ``NxS`` (``8x7B``, ``4x7B``) count the nominal total N * S (Mixtral-8x7B:
      56, an over-estimate of its 46.7B since experts share attention layers; either way it is a
      30B+ model);
    - when several sizes appear (``OLMoE-1B-7B``: active-total; ``-1M`` context suffixes), the
      largest wins;
    - names without a size (``gpt2``, ``phi-4``, ``flan-t5-xl``) give None: such models are not
      used as source or test models.
    """
    name = model_id.split("/")[-1]
    sizes = [int(n) * float(s.replace("_", ".")) * _UNIT[u.lower()] for n, s, u in _MOE.findall(name)]
    stripped = _MOE.sub(" ", name)
    for num, unit, frac in _SIZE.findall(stripped):
        value = float(num.replace("_", "."))
        if frac:
            value = float(f"{num}.{frac}") if "." not in num and "_" not in num else value
        sizes.append(value * _UNIT[unit.lower()])
    return max(sizes) if sizes else None


INSTRUCT_SUBSTRINGS = ("instruct", "chat", "dpo", "sft", "rlhf", "orpo")
INSTRUCT_TOKENS = ("it",)


def instruct_mark(model_id: str) -> str | None:
    """The mark in a model id that flags it as instruction-tuned, or None (a base model, as far as
    its name says): the name part, lower-cased, contains one of :data:`INSTRUCT_SUBSTRINGS` or has
    one of :data:`INSTRUCT_TOKENS` as a token (``gemma-2b-it``). The one rule for every model whose
    metadata we do not hold (the leaderboard's 428, the published store's 61); fine-tunes named
    otherwise (``zephyr``, ``Hermes``) count as base models, so stage 07 writes the list it produced
    (``instruct_flag.csv``) for review."""
    name = model_id.split("/")[-1].lower()
    for mark in INSTRUCT_SUBSTRINGS:
        if mark in name:
            return mark
    tokens = set(re.split(r"[-_. ]+", name))
    return next((t for t in INSTRUCT_TOKENS if t in tokens), None)


def instruct_flags(models: Sequence[str]) -> np.ndarray:
    """:func:`instruct_mark` of each model as a boolean array."""
    return np.array([instruct_mark(m) is not None for m in models], dtype=bool)


# --------------------------------------------------------------------------- container
@dataclass
class ItemData:
    """Features ``X`` (models x items, entries in [0, 1]) with names, and optional target/sizes.

    ``item_benchmark[j]`` names the benchmark of item ``j``; ``item_id[j]`` is its index (doc id)
    inside that benchmark. ``target`` is the score whose ranking BenchAlign learns to reproduce
    (higher is better); ``size_b`` the parameter count (NaN when unknown); ``instruct`` whether
    each model is instruction-tuned (None: unknown for every model, the flag baselines are skipped).
    """
    X: np.ndarray
    models: list[str]
    item_benchmark: np.ndarray
    item_id: np.ndarray
    target: np.ndarray | None = None
    size_b: np.ndarray | None = None
    info: dict = field(default_factory=dict)
    instruct: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.X = np.asarray(self.X, dtype=np.float32)
        K, M = self.X.shape
        if len(self.models) != K or len(set(self.models)) != K:
            raise ItemDataError(f"ItemData: {K} rows but {len(set(self.models))} distinct model names")
        if len(self.item_benchmark) != M or len(self.item_id) != M:
            raise ItemDataError(f"ItemData: {M} columns but {len(self.item_benchmark)} item names")
        if self.instruct is not None:
            self.instruct = np.asarray(self.instruct, dtype=bool)
        for name in ("target", "size_b", "instruct"):
            val = getattr(self, name)
            if val is not None and len(val) != K:
                raise ItemDataError(f"ItemData: {name} has {len(val)} entries for {K} models")

    @property
    def benchmarks(self) -> list[str]:
        return list(dict.fromkeys(self.item_benchmark.tolist()))

    def rows(self, models: Sequence[str]) -> ItemData:
        """The sub-matrix of the named models, in the given order."""
        index = {m: i for i, m in enumerate(self.models)}
        missing = [m for m in models if m not in index]
        if missing:
            raise ItemDataError(f"unknown model(s) {missing[:3]}{did_you_mean(missing[0], self.models)}")
        idx = np.array([index[m] for m in models], dtype=int)
        return ItemData(self.X[idx], list(models), self.item_benchmark, self.item_id,
                        None if self.target is None else self.target[idx],
                        None if self.size_b is None else self.size_b[idx], dict(self.info),
                        None if self.instruct is None else self.instruct[idx])

    def columns(self, mask_or_index) -> ItemData:
        """The sub-matrix of the selected items (boolean mask or integer index)."""
        sel = np.asarray(mask_or_index)
        return ItemData(self.X[:, sel], list(self.models), self.item_benchmark[sel], self.item_id[sel],
                        self.target, self.size_b, dict(self.info), self.instruct)

# --------------------------------------------------------------------------- validation
def check_matrix(X: np.ndarray, where: str, models: Sequence[str], binary: bool) -> np.ndarray:
    """Reject NaN/inf and (``binary``) anything but 0/1, (else) anything outside [0, 1]."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ItemDataError(f"{where}: expected a 2-d models x items matrix, got shape {X.shape}")
    if not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise ItemDataError(f"{where}: entries must be numbers, got dtype {X.dtype}")
    Xf = X.astype(np.float64)
    bad = ~np.isfinite(Xf)
    what = "NaN or infinite"
    if not bad.any():
        bad = ~np.isin(Xf, (0.0, 1.0)) if binary else (Xf < 0) | (Xf > 1)
        what = "not 0/1" if binary else "outside [0, 1]"
    if bad.any():
        i, j = map(int, np.argwhere(bad)[0])
        raise ItemDataError(f"{where}: {int(bad.sum())} entries are {what}, first at model "
                            f"{models[i]!r}, item {j} (value {X[i, j]!r})")
    return Xf


def dedupe(X: np.ndarray, models: Sequence[str], policy: str = "first",
           where: str = "matrix") -> tuple[np.ndarray, list[str], dict[str, int]]:
    """Collapse rows that share a model name; returns (X, names, {name: count}) of duplicates.

    ``first`` keeps the first row of each name, ``mean`` averages the rows, ``error`` raises when
    the rows of a name differ (identical duplicates are collapsed silently).
    """
    if policy not in DUPLICATES:
        raise ItemDataError(f"{where}: unknown duplicate policy {policy!r}; expected one of {DUPLICATES}")
    names = list(models)
    order = list(dict.fromkeys(names))
    if len(order) == len(names):
        return X, names, {}
    groups: dict[str, list[int]] = {}
    for i, m in enumerate(names):
        groups.setdefault(m, []).append(i)
    dups = {m: len(rows) for m, rows in groups.items() if len(rows) > 1}
    out = np.empty((len(order), X.shape[1]), dtype=X.dtype if policy != "mean" else np.float64)
    for k, m in enumerate(order):
        rows = groups[m]
        if policy == "error" and len(rows) > 1 and np.any(X[rows] != X[rows[0]]):
            raise ItemDataError(f"{where}: model {m!r} occurs {len(rows)} times with different rows "
                                "(choose duplicates='first' or 'mean')")
        out[k] = X[rows].mean(axis=0) if policy == "mean" else X[rows[0]]
    return out, order, dups


# --------------------------------------------------------------------------- leaderboard items
def read_oll(name: str, data: str | Path | None = None, duplicates: str = "first"
             ) -> tuple[np.ndarray, list[str], dict[str, int]]:
    """One leaderboard file: (0/1 matrix, unique model names, duplicated names with counts)."""
    base = Path(data) if data else paths.data_dir(OLL_DIR)
    path = base / OLL_DIR / f"{name}.npz"
    note_read(path)
    if not path.exists():
        known = sorted(p.stem for p in (base / OLL_DIR).glob("*.npz"))
        raise ItemDataError(f"no leaderboard item file {path}{did_you_mean(name, known)}; present: {known}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in ("scores", "models") if k in npz.files}
            found = npz.files
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:   # truncated, not a zip
        raise corrupt(path, f"{type(exc).__name__}: {exc}") from None
    if len(arrays) < 2:
        raise corrupt(path, f"missing array(s) {sorted({'scores', 'models'} - set(arrays))}; found {found}")
    scores, models = arrays["scores"], [str(m) for m in arrays["models"]]
    if scores.ndim != 2 or scores.shape[0] != len(models):
        raise corrupt(path, f"scores shape {scores.shape} does not match {len(models)} model names")
    X = check_matrix(scores, str(path), models, binary=True)
    return dedupe(X, models, duplicates, where=str(path))


def join(parts: dict[str, tuple[np.ndarray, list[str]]]) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
    """Join per-benchmark matrices by model name (inner join; models keep the first part's order)."""
    names = list(parts)
    common = [m for m in parts[names[0]][1] if all(m in set(parts[b][1]) for b in names[1:])]
    blocks, bench, ids = [], [], []
    for b in names:
        X, models = parts[b]
        index = {m: i for i, m in enumerate(models)}
        blocks.append(X[[index[m] for m in common]])
        bench += [b] * X.shape[1]
        ids.append(np.arange(X.shape[1]))
    X = np.concatenate(blocks, axis=1) if blocks else np.zeros((len(common), 0))
    return X, common, np.array(bench), np.concatenate(ids) if ids else np.zeros(0, int)


def load_oll(features: Sequence[str], target: str | None = None, data: str | Path | None = None,
             duplicates: str = "first") -> ItemData:
    """Leaderboard items of ``features`` for the models present in every file (and in ``target``).

    The target is the mean correctness on the ``target`` benchmark (IFEval in the main setup).
    Sizes are parsed from the model ids (:func:`parse_size_b`).
    """
    if not features:
        raise ItemDataError("load_oll: no feature benchmarks given")
    if target is not None and target in features:
        raise ItemDataError(f"load_oll: target {target!r} is also a feature benchmark")
    parts, dups = {}, {}
    for name in list(features) + ([target] if target else []):
        X, models, d = read_oll(name, data, duplicates)
        parts[name], dups[name] = (X, models), d
    if target:
        yX, ymodels = parts.pop(target)
        ymap = dict(zip(ymodels, yX.mean(axis=1)))
        X, models, bench, ids = join(parts)
        keep = [i for i, m in enumerate(models) if m in ymap]
        X, models = X[keep], [models[i] for i in keep]
        y = np.array([ymap[m] for m in models])
    else:
        X, models, bench, ids = join(parts)
        y = None
    size = np.array([np.nan if (s := parse_size_b(m)) is None else s for m in models])
    info = {"source": "oll-v2-items", "features": list(features), "target": target,
            "duplicates": duplicates, "duplicated_names": {b: sorted(d) for b, d in dups.items()}}
    return ItemData(X, models, bench, ids, y, size, info, instruct_flags(models))


# --------------------------------------------------------------------------- our pipeline
def load_pipeline(store: str | Path, work: str | Path, benchmarks: Sequence[str] = (),
                  protocol: str = "direct_eval", target_protocol: str = "train_before_test") -> ItemData:
    """Features from the per-item files of ``protocol``; target = mean ``target_protocol`` score.

    ``benchmarks`` empty means every benchmark with item files. Items are matched by doc id across
    models (the ids every model has); models need item files for every benchmark and a target
    result on every one of those benchmarks (others are left out and listed in ``info``).
    """
    from .. import metadata
    from ..store import load, orient

    root = layout.items_dir(work, protocol)
    note_read(root)
    if not root.is_dir():
        raise ItemDataError(f"no per-item correctness under {root} (run direct evaluation first: "
                            f"`{paths.make_command(root, '03')}`)")
    present = sorted(p.name for p in root.iterdir() if p.is_dir())
    benchmarks = list(benchmarks) or present
    for b in benchmarks:
        if b not in present:
            raise ItemDataError(f"no per-item files for benchmark {b!r} under {root}{did_you_mean(b, present)}")
    per: dict[str, dict[str, dict[int, float]]] = {}
    for b in benchmarks:
        for f in sorted(layout.items_dir(work, protocol, b).glob("*.json")):
            d = layout.read_items(f)
            per.setdefault(b, {})[d["model"]] = dict(zip(map(int, d["doc_ids"]), map(float, d["correct"])))
    df = load(store)
    tbt = df[(df["protocol"] == target_protocol) & df["benchmark"].isin(benchmarks)]
    wide = tbt.pivot(index="model", columns="benchmark", values="score")
    models = [m for m in per[benchmarks[0]] if all(m in per[b] for b in benchmarks)]
    dropped = {"no items for every benchmark": sorted(set().union(*map(set, per.values())) - set(models))}
    no_target = [m for m in models if m not in wide.index or wide.loc[m, benchmarks].isna().any()]
    dropped["no target result on every benchmark"] = no_target
    models = [m for m in models if m not in no_target]
    if not models:
        raise ItemDataError(f"no model has per-item files and {target_protocol} results for {benchmarks} "
                            f"(store {store})")
    blocks, bench, ids = [], [], []
    for b in benchmarks:
        common = sorted(set.intersection(*(set(per[b][m]) for m in models)))
        blocks.append(np.array([[per[b][m][i] for i in common] for m in models]))
        bench += [b] * len(common)
        ids += common
    X = np.concatenate(blocks, axis=1)
    # the target: mean over benchmarks of the scores turned so that higher is better
    dirs = {b: metadata.benchmark_info(b, store=store).higher_is_better for b in benchmarks}
    y = orient(wide.loc[models, benchmarks], dirs).to_numpy().mean(axis=1)
    size, instruct = [], []
    for m in models:
        try:
            meta = metadata.model_info(m, store=store)
            s, flag = meta.params_b, meta.instruct
        except metadata.MetadataError:
            s, flag = None, False
        size.append(np.nan if s is None else float(s))
        instruct.append(bool(flag))
    info = {"source": "pipeline", "features": benchmarks, "target": f"mean {target_protocol}",
            "dropped": dropped, "instruct": "lib.metadata (the store's model records)"}
    return ItemData(X, models, np.array(bench), np.array(ids), y, np.array(size), info, np.array(instruct))


# --------------------------------------------------------------------------- across the two papers
def load_cross_paper(store: str | Path) -> ItemData:
    """Published results: features = direct-evaluation scores (one per benchmark), target = mean
    train-before-test score over the same benchmarks; models need both protocols on all of them.

    Perplexity corpora (lower is better) are left out; sizes from :func:`lib.metadata.model_info`.
    """
    from .. import metadata
    from ..store import load, matrix

    df = load(store)
    direct, tbt = matrix(df, "direct_eval"), matrix(df, "train_before_test")
    names = [b for b in sorted(set(direct.columns) & set(tbt.columns))
             if not metadata.benchmark_info(b, store=store).is_perplexity]
    both = direct[names].dropna().index.intersection(tbt[names].dropna().index)
    models = sorted(both)
    if not models:
        raise ItemDataError(f"no model has both protocols on all of {names} in {store}")
    X = direct.loc[models, names].to_numpy(dtype=np.float64)
    y = tbt.loc[models, names].to_numpy(dtype=np.float64).mean(axis=1)
    if not np.isfinite(X).all():     # scores may lie outside [0, 1] (mcc), but must be finite
        i, j = map(int, np.argwhere(~np.isfinite(X))[0])
        raise ItemDataError(f"direct_eval score of {models[i]!r} on {names[j]!r} in {store} is not finite")
    size = np.array([np.nan if (s := metadata.model_info(m, store=store).params_b) is None else s
                     for m in models])
    info = {"source": "published store", "features": names, "target": "mean train_before_test"}
    return ItemData(X, models, np.array(names), np.zeros(len(names), int), y, size, info, instruct_flags(models))


# --------------------------------------------------------------------------- one entry point
SOURCES = ("oll_items", "pipeline")


def load_source(source: str, *, store: str | Path, work: str | Path, features: Sequence[str] = (),
                target: str = "", duplicates: str = "first") -> ItemData:
    """The item data of notebook 07: ``oll_items`` (leaderboard files, ``features`` -> ``target``)
    or ``pipeline`` (direct-evaluation items of ``features`` or all, train-before-test target)."""
    if source == "oll_items":
        return load_oll(features, target or None, duplicates=duplicates)
    if source == "pipeline":
        return load_pipeline(store, work, features)
    raise ItemDataError(f"unknown data source {source!r}{did_you_mean(source, SOURCES)}; expected one of {SOURCES}")
