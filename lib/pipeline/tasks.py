"""The lm-eval task registry: find tasks, check them, count their splits, select benchmarks.

Tasks come from lm-eval's own registry (the installed package, ``include_defaults``) and from
``include_path`` folders of local task YAML (``lib.pipeline.localtasks``). Nothing of lm-eval is
copied: a task here *is* the lm-eval ``Task`` object, and its prompts, targets, metrics and filters
are lm-eval's.

Split plan (:func:`plan_splits`): fine-tuning needs train / validation / test. A task's own
splits are used where it has them; where it has no labelled test split (lm-eval configures no
``test_split``, e.g. GLUE), the official validation split becomes the test split and a validation
split is carved out of train (recorded as ``carved``). Caps (paper: 50k / 1k / 10k) take a seeded
random subset; document ids are always indices into the task's original split, so per-item
results of different models line up.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import paths
from ..metadata import Benchmark
from ..util import did_you_mean, note_read

# Training-split sizes the paper counted (the README's Data section): the fallback when a dataset cannot be
# reached (offline, hub down). Used for selection only, never for training.
CACHED_TRAIN_COUNTS: dict[str, int] = {
    "mnli": 392702, "qqp": 363846, "medmcqa": 182822, "triviaqa": 138384, "qnli": 104743,
    "record": 100730, "nq_open": 87925, "drop": 77409, "swag": 73546, "sst2": 67349,
    "paws_en": 49401, "winogrande": 40398, "hellaswag": 39905, "social_iqa": 33410,
    "fld_default": 30000, "mathqa": 29837, "babi": 18013, "anli_r1": 16946, "piqa": 16113,
    "sciq": 11679, "medqa_4options": 10178, "commonsense_qa": 9741, "boolq": 9427,
    "mela_en": 8551, "cola": 8551, "gsm8k": 7473, "logiqa": 7376, "coqa": 7199, "mutual": 7088,
    "wic": 5428, "openbookqa": 4957, "webqs": 3778, "mrpc": 3668, "headqa_en": 2657,
    "sglue_rte": 2490, "rte": 2490, "arc_easy": 2251, "arc_challenge": 1119, "multirc": 705,
    "wnli": 635, "wsc": 554, "pubmedqa": 450, "qasper_bool": 409, "copa": 400, "cb": 250,
}
SPLITS = ("train", "validation", "test")
_INSTALLED = {"train": "tbt_train", "validation": "tbt_validation", "test": "tbt_test"}

log = logging.getLogger(__name__)


class TaskError(ValueError):
    """A task cannot be used (unknown, malformed, no training split, empty, unreachable)."""


# ---------------------------------------------------------------------------------------------
# registry


def check_task_yaml(include_paths: Iterable[str | Path]) -> list[Path]:
    """Parse every task YAML under ``include_paths`` the way lm-eval does; returns the files.

    lm-eval silently skips a YAML it cannot parse (the task then looks unknown); here a malformed
    file is an error that names it.
    """
    from lm_eval.tasks._yaml_loader import load_yaml

    files = []
    for root in include_paths:
        root = Path(root)
        if not root.is_dir():
            raise TaskError(f"include_path {root} is not a folder (a profile's local tasks come from its prepare "
                            f"hook: `{paths.make_command(root, '01')}`)")
        for path in sorted(root.glob("**/*.yaml")):
            try:
                cfg = load_yaml(path, resolve_func=False, recursive=True)
            except Exception as exc:  # yaml errors, include cycles, missing includes
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise TaskError(f"malformed task YAML {path}: {first}") from None
            if not any(k in cfg for k in ("task", "group", "tag")):
                raise TaskError(f"malformed task YAML {path}: no 'task' (or 'group') key")
            files.append(path)
    return files


def resolve_include_paths(include_paths: Iterable[str | Path], work: str | Path) -> list[Path]:
    """Absolute include paths; relative ones are taken relative to the profile's work folder
    (where prepare hooks write local tasks, e.g. ``tiny/tasks``)."""
    out = []
    for p in include_paths:
        p = Path(p).expanduser()
        out.append(p if p.is_absolute() else (Path(work) / p))
    return [p.resolve() for p in out]


@functools.lru_cache(maxsize=8)
def _manager(include_paths: tuple[str, ...], include_defaults: bool):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=list(include_paths) or None, include_defaults=include_defaults)


def task_manager(include_paths: Iterable[str | Path] = (), include_defaults: bool = False):
    """An lm-eval ``TaskManager`` over ``include_paths`` (checked first) and optionally the built-ins."""
    paths = tuple(str(Path(p).resolve()) for p in include_paths)
    check_task_yaml(paths)
    for p in paths:
        note_read(p)
    if not paths and not include_defaults:
        raise TaskError("no tasks: give include_paths and/or include_defaults=True")
    return _manager(paths, include_defaults)


def check_names(manager, names: Iterable[str]) -> None:
    """Raise :class:`TaskError` for the first name lm-eval does not know (with close matches)."""
    known = set(manager.all_subtasks)
    for name in names:
        if name not in known:
            where = "the built-in registry and " if manager.include_path is None else ""
            raise TaskError(f"unknown task {name!r}{did_you_mean(name, known, n=3)}; searched "
                            f"{where}include_path {manager.include_path}")


def load_task(manager, name: str, timeout: float | None = 300.0):
    """The lm-eval ``Task`` ``name`` with its dataset loaded.

    Dataset access runs in a daemon thread bounded by ``timeout`` seconds, so an unreachable hub
    gives a :class:`TaskError` naming the task instead of a hang.
    """
    check_names(manager, [name])
    box: dict[str, Any] = {}

    def work():
        try:
            box["task"] = manager.load([name])["tasks"][name]
        except BaseException as exc:  # noqa: BLE001 - reported below with the task's name
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True, name=f"load-{name}")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TaskError(f"task {name!r}: loading its dataset did not finish within {timeout:.0f}s "
                        "(hub unreachable? set HF_DATASETS_OFFLINE=1 to fail fast)")
    if "error" in box:
        exc = box["error"]
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise TaskError(f"task {name!r}: cannot load it: {type(exc).__name__}: {text}") from exc
    return box["task"]


# ---------------------------------------------------------------------------------------------
# metric, kind, category


@dataclass(frozen=True, kw_only=True)
class TaskInfo(Benchmark):
    """A benchmark as the pipeline found it in lm-eval: its record (:class:`lib.metadata.Benchmark`)
    plus the task's own split names and sizes (01 writes these into its summary)."""
    splits: dict[str, str | None] = field(default_factory=dict)   # the task's own split names
    counts: dict[str, int | None] = field(default_factory=dict)   # documents per own split
    test_on: str = "test"      # "test", or "validation" when the task has no labelled test split
    count_source: str = "dataset"

    @property
    def result_key(self) -> str:
        return f"{self.metric},{self.filter}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TaskInfo:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _config_metric(task) -> tuple[str, bool]:
    metrics = task.config.metric_list or []
    if metrics:
        first = metrics[0]
        name = first["metric"] if isinstance(first, dict) else str(first)
        hib = first.get("higher_is_better") if isinstance(first, dict) else None
        return name, bool(task.higher_is_better().get(name, True) if hib is None else hib)
    name = next(iter(task.higher_is_better()), "acc")
    return name, bool(task.higher_is_better().get(name, True))


def _config_filters(task) -> list[str]:
    return [f["name"] for f in (task.config.filter_list or [])] or ["none"]


def describe(task, name: str, store: str | Path | None = None) -> TaskInfo:
    """Kind, metric, filter and category of ``task``: the metadata tables where they know the
    benchmark (the paper's choices, e.g. cola -> mcc, gsm8k -> flexible-extract), else the task's
    own first metric and filter."""
    from .. import metadata

    kind = task.config.output_type
    metric, hib = _config_metric(task)
    filters = _config_filters(task)
    filt, category = filters[0], "Other"
    try:
        info = metadata.benchmark_info(name, store)
    except metadata.MetadataError:
        info = None
    if info is not None:
        metric, hib, category = info.metric, info.higher_is_better, info.category
        if info.filter != "none":              # "none": whatever the task reports first
            filt = info.filter
    if filt not in filters:
        raise TaskError(f"task {name!r}: filter {filt!r} is not defined by the task "
                        f"(its filters: {filters})")
    splits = {"train": task.config.training_split, "validation": task.config.validation_split,
              "test": task.config.test_split}
    return TaskInfo(name=name, kind=kind, metric=metric, filter=filt, higher_is_better=hib,
                    category=category, splits=splits,
                    test_on="test" if splits["test"] else "validation")


def _raw(task, split: str):
    return task.dataset[split]


def count_docs(task, info: TaskInfo) -> dict[str, int | None]:
    """Documents in each of the task's own splits (after lm-eval's ``process_docs``)."""
    counts = {}
    for role, own in info.splits.items():
        if own is None:
            counts[role] = None
            continue
        docs = _raw(task, own)
        if task.config.process_docs is not None:
            docs = task.config.process_docs(docs)
        counts[role] = len(docs)
    return counts


def validate_for_training(info: TaskInfo) -> None:
    """A task must have a training split, something to test on, and documents in them."""
    if not info.splits.get("train"):
        raise TaskError(f"task {info.name!r} has no training split (lm-eval training_split is unset); "
                        "train-before-test cannot fine-tune on it")
    if not (info.splits.get("test") or info.splits.get("validation")):
        raise TaskError(f"task {info.name!r} has neither a test nor a validation split to test on")
    for role, n in info.counts.items():
        if n == 0:
            raise TaskError(f"task {info.name!r}: its {role} split {info.splits[role]!r} is empty")


def inspect(manager, name: str, store: str | Path | None = None, timeout: float | None = 300.0,
            ) -> tuple[Any, TaskInfo]:
    """Load ``name`` and describe it, counting documents; raises :class:`TaskError`."""
    task = load_task(manager, name, timeout)
    info = describe(task, name, store)
    return task, dataclasses.replace(info, counts=count_docs(task, info))


def _known_metadata(name: str, store: str | Path | None) -> dict:
    """Kind, metric, filter, category of a task from ``lib.metadata`` (for unreachable tasks)."""
    from .. import metadata

    try:
        info = metadata.benchmark_info(name, store)
    except metadata.MetadataError:
        return {}
    return {"kind": info.kind, "metric": info.metric, "filter": info.filter,
            "higher_is_better": info.higher_is_better, "category": info.category}


def select(names: list[str], include_paths: Iterable[str | Path] = (), include_defaults: bool = False,
           min_train: int = 1000, store: str | Path | None = None, timeout: float = 300.0,
           corpora: Iterable[str] = ()) -> list[dict]:
    """One row per task: kind, metric, filter, category, split sizes, selected and why.

    Unknown names and malformed YAML are errors (before anything else runs). A task whose data
    cannot be reached is reported (``count_source = "cached"``) with the paper's cached training
    count when there is one, and judged on it. ``corpora`` (perplexity corpora) need a training
    split but no minimum size.
    """
    manager = task_manager(include_paths, include_defaults)
    corpora = list(corpora)
    check_names(manager, list(names) + corpora)
    rows = []
    for name in list(names) + corpora:
        is_corpus = name in corpora
        row: dict[str, Any] = {"task": name, "role": "corpus" if is_corpus else "benchmark"}
        try:
            _, info = inspect(manager, name, store, timeout)
        except TaskError as exc:
            cached = CACHED_TRAIN_COUNTS.get(name)
            row.update(_known_metadata(name, store))
            row.update(count_source="cached" if cached is not None else "unavailable", n_train=cached,
                       note=str(exc))
            keep = cached is not None and cached >= min_train and not is_corpus
            row.update(selected=keep, reason=("dataset unreachable; cached training count "
                                              f"{cached} >= {min_train}" if keep else
                                              f"dataset unreachable: {exc}"))
            rows.append(row)
            continue
        row.update(info.to_dict())
        row.update(n_train=info.counts["train"], n_validation=info.counts["validation"],
                   n_test=info.counts["test"], count_source="dataset", note="")
        try:
            validate_for_training(info)
        except TaskError as exc:
            row.update(selected=False, reason=str(exc))
            rows.append(row)
            continue
        if not is_corpus and info.counts["train"] < min_train:
            row.update(selected=False, reason=f"{info.counts['train']} training documents < min_train {min_train}")
        else:
            row.update(selected=True, reason="ok" if info.test_on == "test" else
                       "ok; no labelled test split: tests on the official validation split, "
                       "validation carved from train")
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# split plan


@dataclass
class SplitPlan:
    """Document ids (indices into the task's own splits) used for train / validation / test."""
    source: dict[str, str]                 # role -> the task's own split the ids index into
    ids: dict[str, list[int]]
    carved: bool                           # validation carved out of train
    caps: dict[str, int]

    @property
    def sizes(self) -> dict[str, int]:
        return {role: len(v) for role, v in self.ids.items()}


def _cap(ids: list[int], cap: int | None, rng: random.Random) -> list[int]:
    if cap is None or cap <= 0 or len(ids) <= cap:
        return ids
    return sorted(rng.sample(ids, cap))


def plan_splits(task, info: TaskInfo, caps: dict[str, int], seed: int) -> SplitPlan:
    """Train / validation / test document ids of ``task`` under ``caps`` (seeded, deterministic).

    With a labelled test split: the task's train, validation (carved from train when absent) and
    test. Without one: test = the official validation split, validation carved from train
    (``min(cap, 10% of train)`` documents). The test ids never overlap what training or selection
    see.
    """
    validate_for_training(info)
    sp = info.splits
    n = {role: len(_raw(task, own)) for role, own in sp.items() if own}
    rng = random.Random(seed)
    train_ids = list(range(n["train"]))
    source = {"train": sp["train"]}
    if sp["test"]:
        source["test"] = sp["test"]
        carve = not sp["validation"]
    else:
        source["test"] = sp["validation"]
        carve = True
    if carve:
        n_val = min(caps.get("validation") or n["train"], max(1, n["train"] // 10))
        if n["train"] - n_val < 1:
            raise TaskError(f"task {info.name!r}: training split too small ({n['train']}) to carve a validation split")
        perm = train_ids[:]
        rng.shuffle(perm)
        val_ids = sorted(perm[:n_val])
        train_ids = sorted(perm[n_val:])
        source["validation"] = sp["train"]
    else:
        val_ids = list(range(n["validation"]))
        source["validation"] = sp["validation"]
    ids = {"train": _cap(train_ids, caps.get("train"), rng),
           "validation": _cap(val_ids, caps.get("validation"), rng),
           "test": _cap(list(range(len(_raw(task, source["test"])))), caps.get("test"), rng)}
    if source["validation"] == source["test"] and set(ids["validation"]) & set(ids["test"]):
        raise TaskError(f"task {info.name!r}: validation and test overlap")  # defensive: cannot happen
    return SplitPlan(source=source, ids=ids, carved=carve, caps=dict(caps))


def install_splits(task, plan: SplitPlan) -> None:
    """Put the planned subsets into the task's dataset as ``tbt_train/validation/test`` and point
    the task's split config at them (lm-eval then renders and scores exactly those documents)."""
    for role in SPLITS:
        task.dataset[_INSTALLED[role]] = _raw(task, plan.source[role]).select(plan.ids[role])
    task.config.training_split = _INSTALLED["train"]
    task.config.validation_split = _INSTALLED["validation"]
    task.config.test_split = _INSTALLED["test"]
    task.set_config(key="num_fewshot", value=0)       # zero-shot, as in the paper


def use_split(task, role: str) -> None:
    """Make lm-eval evaluate ``role`` (``validation`` or ``test``) of an installed plan."""
    if role not in ("validation", "test"):
        raise ValueError(f"use_split: role must be 'validation' or 'test', got {role!r}")
    if _INSTALLED[role] not in task.dataset:
        raise TaskError(f"task {task.config.task!r}: call install_splits first")
    task.config.test_split = _INSTALLED[role]


def docs(task, role: str):
    """The (processed) documents of an installed role, as lm-eval sees them."""
    ds = task.dataset[_INSTALLED[role]]
    return task.config.process_docs(ds) if task.config.process_docs is not None else ds


def selection_summary(rows: list[dict], include_paths: Iterable[str | Path], include_defaults: bool,
                      min_train: int, caps: dict[str, int], split_seed: int) -> dict:
    """Notebook 01's summary.json: what the later stages read (never 01's variables).

    Keys: ``selected`` (benchmarks then corpora, in the order asked), ``benchmarks``, ``corpora``,
    ``rejected`` ({task: reason}), ``tasks`` ({task: kind, metric, filter, category, splits,
    counts, test_on, count_source}), ``include_paths``, ``include_defaults``, ``min_train``,
    ``caps`` (train / validation / test), ``split_seed``.
    """
    selected = [r["task"] for r in rows if r["selected"]]
    keys = list(TaskInfo.__dataclass_fields__)
    return {
        "selected": selected,
        "benchmarks": [r["task"] for r in rows if r["selected"] and r["role"] == "benchmark"],
        "corpora": [r["task"] for r in rows if r["selected"] and r["role"] == "corpus"],
        "rejected": {r["task"]: r["reason"] for r in rows if not r["selected"]},
        "tasks": {r["task"]: {k: r[k] for k in keys + ["role"] if k in r} for r in rows},
        "include_paths": [str(Path(p)) for p in include_paths],
        "include_defaults": include_defaults, "min_train": min_train, "caps": dict(caps),
        "split_seed": split_seed,
    }
