"""The lm-eval task registry: find tasks, check them, count their splits, select benchmarks, plan
their splits, and render one document as lm-eval scores it (:func:`render`: what fine-tuning
trains on).

Tasks come from lm-eval's own registry (the installed package, ``include_defaults``) and from
``include_path`` folders of local task YAML (``lib.pipeline.localtasks``). Nothing of lm-eval is
copied: a task here *is* the lm-eval ``Task`` object, and its prompts, targets, metrics and filters
are lm-eval's. Fine-tuning needs train / validation / test: :class:`SplitRule` says how they are
planned (:func:`plan_splits`); notebook 01 plans every task it selects, so no task reaches 02 that
02 cannot run.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
import threading
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import UserError
from ..metadata import Benchmark
from ..util import did_you_mean, note_read
from . import datasets

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


class TaskError(UserError, ValueError):
    """A task cannot be used (unknown, malformed, no training split, empty, unreachable)."""


# ---------------------------------------------------------------------------------------------
# registry


def check_task_yaml(include_paths: Iterable[str | Path]) -> list[Path]:
    """Parse every task YAML under ``include_paths`` the way lm-eval does; returns the files. lm-eval
    silently skips a YAML it cannot parse (the task then looks unknown); here it is an error naming it."""
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
    (where prepare hooks write local tasks, e.g. the mini world's ``world/tasks``)."""
    return [(Path(work) / Path(p).expanduser()).resolve() for p in include_paths]


def selected_include_paths(selection: dict) -> list[Path]:
    """The task folders notebook 01's summary names, where they lie now."""
    return [paths.located(p) for p in selection.get("include_paths") or []]


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


def load_task(manager, name: str, timeout: float | None = 300.0, revision: str | None = None):
    """The lm-eval ``Task`` ``name`` with its dataset loaded (at ``revision`` when given), in a daemon
    thread bounded by ``timeout`` seconds, so an unreachable hub is a :class:`TaskError`, not a hang."""
    check_names(manager, [name])
    spec = name if revision is None else datasets.pinned_config(manager, name, revision)
    box: dict[str, Any] = {}

    def work():
        try:
            box["task"] = manager.load([spec])["tasks"][name]
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


def _known(name: str, store: str | Path | None):
    """The benchmark's record in ``lib.metadata``, or None."""
    from .. import metadata

    try:
        return metadata.benchmark_info(name, store)
    except metadata.MetadataError:
        return None


def describe(task, name: str, store: str | Path | None = None) -> TaskInfo:
    """Kind, metric, filter and category of ``task``: the metadata tables where they know the
    benchmark (the paper's choices, e.g. cola -> mcc, gsm8k -> flexible-extract), else the task's
    own first metric and filter."""
    kind = task.config.output_type
    metric, hib = _config_metric(task)
    filters = [f["name"] for f in (task.config.filter_list or [])] or ["none"]
    filt, category = filters[0], "Other"
    info = _known(name, store)
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


def count_docs(task, info: TaskInfo) -> dict[str, int | None]:
    """Documents in each of the task's own splits (after lm-eval's ``process_docs``)."""
    process = task.config.process_docs or (lambda ds: ds)
    return {role: None if own is None else len(process(task.dataset[own])) for role, own in info.splits.items()}


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
            revision: str | None = None) -> tuple[Any, TaskInfo]:
    """Load ``name`` (at ``revision`` of its dataset when given) and describe it, counting documents;
    raises :class:`TaskError`."""
    task = load_task(manager, name, timeout, revision)
    info = describe(task, name, store)
    return task, dataclasses.replace(info, counts=count_docs(task, info))


def select(names: list[str], include_paths: Iterable[str | Path] = (), include_defaults: bool = False,
           min_train: int = 1000, store: str | Path | None = None, timeout: float = 300.0,
           corpora: Iterable[str] = (), rule: SplitRule | None = None, allow_unreachable: bool = False,
           ) -> list[dict]:
    """One row per task: kind, metric, filter, category, split sizes, the planned split sizes,
    selected and why.

    Unknown names and malformed YAML are errors (before anything else runs). Every task is loaded
    and its split plan made under ``rule`` (default: the paper's), so a task that 02 could not
    run (no training split, too few documents, a plan that fails) is rejected here with its
    reason. A task whose data cannot be loaded is reported (``count_source = "cached"`` with the
    paper's cached training count where there is one) and rejected, unless ``allow_unreachable``
    (an offline look at what would be selected; 02 and 03 would fail on it). ``corpora``
    (perplexity corpora) need a training split but no minimum size.
    """
    rule = rule or SplitRule(caps={})
    if include_defaults and not allow_unreachable:     # built-in tasks load from the hub: ask it once, quickly
        from .hub import HubUnreachable, require

        profile = Path(store).parent.name if store else "<profile>"     # store: outputs/<profile>/store
        try:
            require("lm-eval's built-in tasks", f"make models PROFILE={profile}")
        except HubUnreachable as exc:
            raise TaskError(str(exc)) from None
    manager = task_manager(include_paths, include_defaults)
    corpora = list(corpora)
    check_names(manager, list(names) + corpora)
    try:
        datasets.check_revisions(rule.revisions, list(names) + corpora)
    except datasets.DatasetError as exc:
        raise TaskError(str(exc)) from None
    rows = []
    for name in list(names) + corpora:
        is_corpus = name in corpora
        row: dict[str, Any] = {"task": name, "role": "corpus" if is_corpus else "benchmark"}
        try:
            task, info = inspect(manager, name, store, timeout, rule.revisions.get(name))
        except TaskError as exc:
            cached = CACHED_TRAIN_COUNTS.get(name)
            known = _known(name, store)
            row.update({k: getattr(known, k) for k in ("kind", "metric", "filter", "higher_is_better", "category")}
                       if known else {})
            row.update(count_source="cached" if cached is not None else "unavailable", n_train=cached,
                       note=str(exc))
            keep = allow_unreachable and cached is not None and cached >= min_train and not is_corpus
            row.update(selected=keep, reason=(f"dataset unreachable; selected on the cached training count "
                                              f"{cached} >= {min_train} (allow_unreachable)" if keep else
                                              f"dataset unreachable: {exc}"))
            rows.append(row)
            continue
        row.update(info.to_dict())
        row.update(n_train=info.counts["train"], n_validation=info.counts["validation"],
                   n_test=info.counts["test"], count_source="dataset", note="")
        try:
            validate_for_training(info)
            plan = plan_splits(task, info, rule)
        except TaskError as exc:
            row.update(selected=False, reason=str(exc))
            rows.append(row)
            continue
        row.update(plan_train=plan.sizes["train"], plan_validation=plan.sizes["validation"],
                   plan_test=plan.sizes["test"], carved=plan.carved, validation_in_test=plan.validation_in_test,
                   dataset=datasets.record(task, plan), chars_per_example=_chars_per_example(task, info, plan))
        if not is_corpus and info.counts["train"] < min_train:
            row.update(selected=False, reason=f"{info.counts['train']} training documents < min_train {min_train}")
        elif plan.validation_in_test:
            row.update(selected=True, reason="ok; validation and test are the same split: the validation "
                       "documents are part of the test set (shared_test='share', as the paper)")
        elif plan.carved:
            row.update(selected=True, reason="ok; validation carved from train" +
                       ("" if info.test_on == "test" else "; tests on the official validation split"))
        else:
            row.update(selected=True, reason="ok")
        rows.append(row)
    return rows


def preview_selection(names: list[str], rule: SplitRule, include_paths: Iterable[str | Path] = (),
                      include_defaults: bool = True) -> dict:
    """A stand-in for notebook 01's summary without loading any dataset (the preflight of a profile
    that has not run): split names from the tasks' YAML, the paper's cached training counts, and
    planned sizes under ``rule`` where they follow from them, else the caps (upper bounds)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    manager = task_manager(include_paths, include_defaults)
    check_names(manager, names)
    caps = rule.caps
    tasks = {}
    for name in names:
        cfg = load_yaml(manager.task_index[name].yaml_path, resolve_func=False, recursive=True)
        n = CACHED_TRAIN_COUNTS.get(name)
        if n is None:
            raise TaskError(f"task {name!r}: no cached training count to preview it offline; run notebook 01")
        splits = {"train": cfg.get("training_split"), "validation": cfg.get("validation_split"),
                  "test": cfg.get("test_split")}
        shared = bool(splits["validation"]) and splits["validation"] == splits["test"]
        carved = not (splits["validation"] and splits["test"]) or (shared and rule.shared_test == "carve")
        n_train = int((1 - rule.val_fraction) * n) if carved else n
        n_val = int(rule.val_fraction * n) if carved else None
        tasks[name] = {"kind": cfg.get("output_type", "multiple_choice"), "splits": splits, "count_source": "cached",
                       "plan_train": min(n_train, caps.get("train") or n_train),
                       "plan_validation": min(n_val, caps.get("validation") or n_val) if n_val is not None
                       else caps.get("validation") or None,
                       "plan_test": caps.get("test") or None, "carved": carved}
    return {"selected": list(names), "benchmarks": list(names), "corpora": [], "tasks": tasks,
            "include_paths": [str(p) for p in include_paths], "include_defaults": include_defaults,
            "split_rule": rule.to_dict(), "preview": True}


def _chars_per_example(task, info: TaskInfo, plan: SplitPlan, sample: int = 200) -> float:
    """Mean characters of a rendered training example over up to ``sample`` planned training
    documents (for the memory and time estimates printed before submission)."""
    install_splits(task, plan)
    train = docs(task, "train")
    n = min(sample, len(train))
    total = 0
    for i in range(n):
        context, continuation = render(task, info, train[i], None)
        total += len(context) + len(continuation)
    return round(total / max(n, 1), 1)


# ---------------------------------------------------------------------------------------------
# split plan


SPLIT_PROCEDURES = ("paper", "carve")
SHARED_TEST = ("share", "carve")


@dataclass(frozen=True)
class SplitRule:
    """How notebook 01 turns a task's own splits into train / validation / test (02 and 03 read
    it from 01's summary, so both protocols test on the same documents).

    - A task with a training split, a validation split and a test split keeps all three.
    - Otherwise validation is carved out of train, and the test split is the task's test split or,
      without one (GLUE), its official validation split. ``procedure`` ``"paper"`` carves as the
      paper's code did: ``numpy.random.seed(seed)``, ``order = permutation(n)``,
      train = ``order[:int((1 - f) n)]``, validation = the next ``int(f n)`` (floor rounding, so a
      document can be dropped), ``f = val_fraction`` (paper: 0.2). ``"carve"`` draws
      ``min(cap, max(1, floor(f n)))`` documents with Python's ``random.Random(seed)``.
    - A task whose lm-eval config names the same split for validation and test (medmcqa:
      ``validation_split: validation``, ``test_split: validation``): ``shared_test`` ``"share"``
      keeps it, as the paper did (the validation documents are part of the test set: recorded as
      ``validation_in_test``); ``"carve"`` carves validation from train as above.
    - Caps (paper: 50,000 / 1,000 / 10,000): ``"paper"`` takes the documents at positions
      ``permutation(len(split))[:cap]`` after ``numpy.random.seed(seed)``, separately per split, in
      the order the split has at that point: a task's own split in its own order, a carved split in
      its permuted order (as the paper's ``select`` kept it; capping the sorted ids instead would keep
      as many documents but other ones). ``"carve"`` takes a seeded ``random.sample``. A cap of 0
      means none.

    Document ids are indices into the task's own splits (sorted), so per-item results of
    different models line up. They are positions, so they choose the same documents only from the
    same rows: ``revisions`` ({task: revision of its dataset repository}) pins the data a task is
    loaded from (:mod:`lib.pipeline.datasets`).
    """
    caps: dict
    seed: int = 0
    procedure: str = "paper"
    val_fraction: float = 0.2
    shared_test: str = "share"
    revisions: dict = field(default_factory=dict)

    def __post_init__(self):
        for what, value, allowed in (("split procedure", self.procedure, SPLIT_PROCEDURES),
                                     ("shared_test", self.shared_test, SHARED_TEST)):
            if value not in allowed:
                raise TaskError(f"{what} must be one of {list(allowed)}, got {value!r}"
                                f"{did_you_mean(str(value), allowed)}")
        if not 0 < self.val_fraction < 1:
            raise TaskError(f"val_fraction must lie strictly between 0 and 1, got {self.val_fraction}")
        unknown = sorted(set(self.caps) - set(SPLITS))
        if unknown:
            raise TaskError(f"caps: unknown split(s) {unknown}; expected {list(SPLITS)}")
        try:
            datasets.check_revisions(self.revisions)
        except datasets.DatasetError as exc:
            raise TaskError(str(exc)) from None

    def to_dict(self) -> dict:
        """Plain values (what a result's configuration records); ``revisions`` only when some are pinned,
        so a rule without them keeps the configuration results made before pins existed."""
        out = {"caps": dict(self.caps), "seed": self.seed, "procedure": self.procedure,
               "val_fraction": self.val_fraction, "shared_test": self.shared_test}
        return {**out, "revisions": dict(self.revisions)} if self.revisions else out

    @classmethod
    def from_dict(cls, d: dict) -> SplitRule:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    @classmethod
    def from_params(cls, params: dict) -> SplitRule:
        """The rule of notebook 01's parameters (caps, seed, procedure, fraction, shared test, pinned
        dataset revisions)."""
        return cls(caps={"train": params["cap_train"], "validation": params["cap_validation"],
                         "test": params["cap_test"]}, seed=params["split_seed"], procedure=params["split_procedure"],
                   val_fraction=params["val_fraction"], shared_test=params["shared_test"],
                   revisions=dict(params.get("dataset_revisions") or {}))

    @classmethod
    def from_selection(cls, selection: dict) -> SplitRule:
        """The rule notebook 01 recorded in its summary."""
        return cls.from_dict(selection.get("split_rule") or {"caps": selection.get("caps") or {},
                                                             "seed": selection.get("split_seed", 0)})


@dataclass
class SplitPlan:
    """Document ids (indices into the task's own splits) used for train / validation / test, and what
    they chose (``dataset``: :func:`lib.pipeline.datasets.record`, set by whoever loaded the task)."""
    source: dict[str, str]                 # role -> the task's own split the ids index into
    ids: dict[str, list[int]]
    carved: bool                           # validation carved out of train
    caps: dict[str, int]
    validation_in_test: bool = False       # validation documents are also test documents (medmcqa, "share")
    dataset: dict = field(default_factory=dict)

    @property
    def sizes(self) -> dict[str, int]:
        return {role: len(v) for role, v in self.ids.items()}


def paper_carve(n: int, val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, validation) indices of ``n`` training documents as the paper's ``random_split`` made
    them (:class:`SplitRule`), *in the permuted order*: its ``select`` kept it, and its cap indexed that."""
    import numpy as np

    order = np.random.RandomState(seed).permutation(n).tolist()
    n_train, n_val = int((1 - val_fraction) * n), int(val_fraction * n)
    return order[:n_train], order[n_train:n_train + n_val]


def paper_cap(ids: list[int], cap: int | None, seed: int) -> list[int]:
    """The paper's cap (:class:`SplitRule`) on a split whose documents are ``ids`` in the split's order."""
    import numpy as np

    if not cap or cap <= 0:
        return list(ids)
    keep = np.random.RandomState(seed).permutation(len(ids))[:cap]
    return [ids[i] for i in keep.tolist()]


def _cap(ids: list[int], cap: int | None, rng: random.Random) -> list[int]:
    if cap is None or cap <= 0 or len(ids) <= cap:
        return ids
    return sorted(rng.sample(ids, cap))


def plan_splits(task, info: TaskInfo, rule: SplitRule | dict, seed: int | None = None) -> SplitPlan:
    """Train / validation / test document ids of ``task`` under ``rule`` (:class:`SplitRule`;
    deterministic for its seed). A dict of caps and ``seed`` stand for a paper-procedure rule.

    The test ids never overlap what training sees; they overlap validation only for a task whose
    validation and test are the same split under ``shared_test="share"`` (recorded). Raises
    :class:`TaskError` naming the task when a split is too small to plan.
    """
    if not isinstance(rule, SplitRule):
        rule = SplitRule(caps=dict(rule), seed=0 if seed is None else seed)
    validate_for_training(info)
    sp = info.splits
    n = {role: len(task.dataset[own]) for role, own in sp.items() if own}
    for role, own in sp.items():
        counted = (info.counts or {}).get(role)
        if own and counted is not None and counted != n[role]:
            raise TaskError(f"task {info.name!r}: lm-eval's process_docs turns {n[role]} {own} documents into "
                            f"{counted}; document ids would not line up")
    shared = bool(sp["validation"]) and sp["validation"] == sp["test"]
    source = {"train": sp["train"], "test": sp["test"] or sp["validation"]}
    carve = not (sp["validation"] and sp["test"]) or (shared and rule.shared_test == "carve")
    caps = rule.caps
    rng = random.Random(rule.seed)                 # the "carve" procedure's one generator
    train_ids = list(range(n["train"]))
    if carve:
        source["validation"] = sp["train"]
        if rule.procedure == "paper":
            train_ids, val_ids = paper_carve(n["train"], rule.val_fraction, rule.seed)
        else:
            n_val = min(caps.get("validation") or n["train"], max(1, int(n["train"] * rule.val_fraction + 1e-9)))
            perm = train_ids[:]
            rng.shuffle(perm)
            val_ids, train_ids = sorted(perm[:n_val]), sorted(perm[n_val:])
        if not train_ids or not val_ids:
            raise TaskError(f"task {info.name!r}: training split too small ({n['train']}) to carve a "
                            f"validation fraction of {rule.val_fraction}")
    else:
        source["validation"] = sp["validation"]
        val_ids = list(range(n["validation"]))
    test_ids = list(range(len(task.dataset[source["test"]])))
    if rule.procedure == "paper":
        ids = {role: sorted(paper_cap(chosen, caps.get(role), rule.seed))      # capped in the paper's order
               for role, chosen in (("train", train_ids), ("validation", val_ids), ("test", test_ids))}
    else:
        ids = {"train": _cap(train_ids, caps.get("train"), rng),
               "validation": _cap(val_ids, caps.get("validation"), rng),
               "test": _cap(test_ids, caps.get("test"), rng)}
    overlap = source["validation"] == source["test"] and set(ids["validation"]) & set(ids["test"])
    for role, chosen in ids.items():
        if not chosen:
            raise TaskError(f"task {info.name!r}: the planned {role} split is empty")
    return SplitPlan(source=source, ids=ids, carved=carve, caps=dict(caps), validation_in_test=bool(overlap))


def install_splits(task, plan: SplitPlan, num_fewshot: int = 0, seed: int = 0) -> list[int]:
    """Put the planned subsets into the task's dataset as ``tbt_train/validation/test`` and point
    the task's split config at them (lm-eval then renders and scores exactly those documents).
    Zero-shot, as in the paper, unless ``num_fewshot`` = k > 0: then every prompt starts with the
    same k documents of the planned *training* split, the first k of its seeded shuffle (so the
    1-shot example is the first of the 5-shot ones), in that order, through lm-eval's own few-shot
    rendering (its ``first_n`` sampler). Returns their training-split ids (empty zero-shot)."""
    for role in SPLITS:
        task.dataset[_INSTALLED[role]] = task.dataset[plan.source[role]].select(plan.ids[role])
    task.config.training_split = _INSTALLED["train"]
    task.config.validation_split = _INSTALLED["validation"]
    task.config.test_split = _INSTALLED["test"]
    task.set_config(key="num_fewshot", value=int(num_fewshot))
    if not num_fewshot:
        return []
    from lm_eval.api.samplers import FirstNSampler

    train = plan.ids["train"]
    if num_fewshot > len(train):
        raise TaskError(f"task {task.config.task!r}: {num_fewshot} in-context examples asked, the planned "
                        f"training split has {len(train)} documents")
    order = list(range(len(train)))
    random.Random(seed).shuffle(order)
    pool = docs(task, "train")
    task.sampler = FirstNSampler([pool[i] for i in order[:num_fewshot]], rnd=None)
    return [train[i] for i in order[:num_fewshot]]


def reduce_training(plan: SplitPlan, fraction: float, seed: int = 0) -> SplitPlan:
    """``plan`` with a seeded ``fraction`` of its training documents (at least one; validation and
    test as they were): the reduced fine-tuning budget."""
    train = plan.ids["train"]
    keep = sorted(random.Random(seed).sample(train, max(1, round(len(train) * fraction))))
    return dataclasses.replace(plan, ids={**plan.ids, "train": keep})


def use_split(task, role: str) -> None:
    """Make lm-eval evaluate ``role`` (``validation`` or ``test``) of an installed plan."""
    task.config.test_split = _INSTALLED[role]


def docs(task, role: str):
    """The (processed) documents of an installed role, as lm-eval sees them."""
    ds = task.dataset[_INSTALLED[role]]
    return task.config.process_docs(ds) if task.config.process_docs is not None else ds


def selection_summary(rows: list[dict], include_paths: Iterable[str | Path], include_defaults: bool,
                      min_train: int, rule: SplitRule, task_timeout: float = 300.0) -> dict:
    """Notebook 01's summary.json: what the later stages read (never 01's variables): the selected
    tasks, the rejected ones with their reasons, each task's row of :func:`select`, where the task
    folders lie (:func:`selected_include_paths` reads them back) and the split rule."""
    selected = [r["task"] for r in rows if r["selected"]]
    keys = list(TaskInfo.__dataclass_fields__) + ["role", "plan_train", "plan_validation", "plan_test", "carved",
                                                  "validation_in_test", "dataset", "chars_per_example"]
    return {
        "selected": selected,
        "benchmarks": [r["task"] for r in rows if r["selected"] and r["role"] == "benchmark"],
        "corpora": [r["task"] for r in rows if r["selected"] and r["role"] == "corpus"],
        "rejected": {r["task"]: r["reason"] for r in rows if not r["selected"]},
        "tasks": {r["task"]: {k: r[k] for k in keys if k in r} for r in rows},
        "include_paths": [paths.portable(p) for p in include_paths],       # found again after outputs/ moves
        "include_defaults": include_defaults, "min_train": min_train,
        "split_rule": rule.to_dict(), "caps": dict(rule.caps), "split_seed": rule.seed,
        "task_timeout": float(task_timeout),
    }


# ---------------------------------------------------------------------------------------------
# rendering: one document as lm-eval scores it (what fine-tuning trains on)


def _gold_index(task, doc, choices: list[str]) -> int:
    gold = task.doc_to_text(doc) if task.multiple_input else task.doc_to_target(doc)
    if isinstance(gold, list):
        gold = gold[0]
    if isinstance(gold, str):
        gold = choices.index(gold) if gold in choices else int(gold)
    return int(gold)


@contextmanager
def _description(task, keep: bool):
    """The task's description kept in the prompt or left out while training text is rendered."""
    saved = task.config.description
    if not keep:
        task.config.description = ""
    try:
        yield
    finally:
        task.config.description = saved


def render(task, info: TaskInfo, doc, lm, chat_template: bool = False, list_targets: str = "first",
           task_description: bool = True) -> tuple[str, str]:
    """(context, continuation) of one training document, as lm-eval renders it zero-shot.

    ``task_description`` False leaves the task's description out of the context (the paper trained
    on ``doc_to_text`` alone); ``list_targets`` renders a generative task's list of gold answers
    (nq_open) as ``"join"`` (all, space-separated: the paper) or ``"first"``.
    """
    if info.kind == "loglikelihood_rolling":
        return "", str(task.doc_to_target(doc))
    chat = lm.apply_chat_template if chat_template else None
    with _description(task, task_description):
        ctx = task.fewshot_context(doc, num_fewshot=0, apply_chat_template=chat_template,
                                   fewshot_as_multiturn=chat_template, chat_template=chat,
                                   gen_prefix=task.doc_to_prefix(doc))
    if info.kind == "multiple_choice":
        requests = task.construct_requests(doc=doc, ctx=ctx, metadata=(info.name, 0, 1),
                                           apply_chat_template=chat_template, chat_template=chat)
        choices = task.doc_to_choice(doc)
        context, continuation = requests[_gold_index(task, doc, choices)].args[:2]
        return context, continuation
    if info.kind == "loglikelihood":
        return ctx, str(task.doc_to_target(doc))
    target = task.doc_to_target(doc)
    if isinstance(target, list):
        target = " ".join(str(t) for t in target) if list_targets == "join" else target[0]
    if isinstance(target, int) and task.config.doc_to_choice is not None:
        target = task.doc_to_choice(doc)[target]
    return ctx, f"{task.config.target_delimiter}{target}"
